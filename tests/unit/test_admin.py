"""The admin app every service serves: its own endpoints without FastAPI, views built on demand."""

from __future__ import annotations

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient

from shared.model.redact import REDACTED
from shared.process.admin import AdminApp

TOKEN = "k" * 43
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def client_of(app: AdminApp) -> TestClient:
    """A client that asks as root does: with the node's admin token."""
    return TestClient(app, headers=AUTH)


def make_app(checks=None, freshness=None, secrets=None) -> tuple[AdminApp, list[str]]:
    built: list[str] = []

    def views() -> APIRouter:
        built.append("views")
        r = APIRouter()

        @r.get("/things")
        def things() -> list[str]:
            return ["a"]

        @r.get("/pods")
        def pods() -> list[dict]:
            return [{"spec": {"containers": [{
                "name": "app", "env": [{"name": "DB_PASSWORD", "value": "s3cret-value"}],
                "readinessProbe": {"httpGet": {"httpHeaders": [{"name": "Authorization", "value": "Bearer abc"}]}}}]},
                "message": "exec: \"/bin/s3cret-value\": not found; header from the store: quoted-elsewhere"}]
        return r

    app = AdminApp("probe", checks if checks is not None else {"bus": lambda: (True, "connected")}, token=TOKEN,
                   freshness=freshness, secrets=secrets)
    app.add_views(views)
    return app, built


def test_health_ready_and_metrics_never_build_the_views():
    app, built = make_app()
    client = client_of(app)
    res = client.get("/healthz")
    assert (res.status_code, res.text, res.headers["content-type"]) == (200, "ok", "text/plain; charset=utf-8")
    res = client.get("/readyz")
    assert res.status_code == 200
    assert res.json() == {"service": "probe", "ready": True, "checks": {"bus": {"ok": True, "message": "connected"}}}
    res = client.get("/metrics")
    assert res.status_code == 200 and "python_info" in res.text
    assert res.headers["content-type"].startswith("text/plain; version=")
    assert built == [], "the FastAPI views were built for a health check"


def test_not_ready_is_503_with_every_reason():
    app, _ = make_app({"bus": lambda: (False, "not connected to nats://127.0.0.1:4222"),
                       "store": lambda: (True, "writable")})
    res = client_of(app).get("/readyz")
    assert res.status_code == 503
    body = res.json()
    assert body["ready"] is False
    assert body["checks"]["bus"] == {"ok": False, "message": "not connected to nats://127.0.0.1:4222"}
    assert body["checks"]["store"]["ok"] is True


def test_head_and_other_methods():
    app, built = make_app()
    client = client_of(app)
    res = client.head("/healthz")
    assert res.status_code == 200 and res.content == b"" and res.headers["content-length"] == "2"
    res = client.post("/readyz")
    assert res.status_code == 405 and res.headers["allow"] == "GET, HEAD"
    assert built == []


def test_views_are_built_once_on_the_first_view_request():
    app, built = make_app(freshness=lambda: ["pod-sync has not reconciled since it started"])
    client = client_of(app)
    res = client.get("/things")
    assert res.json() == ["a"]
    assert res.headers["Pykubelet-Current"] == "no"
    assert res.headers["Pykubelet-Not-Current"] == "pod-sync has not reconciled since it started"
    assert client.get("/things").status_code == 200
    assert client.get("/no/such/view").status_code == 404
    assert built == ["views"]
    assert "Pykubelet-Current" not in client.get("/healthz").headers
    with pytest.raises(RuntimeError, match="before the admin app serves"):
        app.add_views(lambda: APIRouter())


def test_garbage_paths_are_a_404_not_a_crash():
    app, _ = make_app()
    client = client_of(app)
    for path in ("/healthz/../../etc/passwd", "/%00", "/readyz%2f", "/" + "a" * 5000):
        res = client.get(path)
        assert res.status_code == 404, path
    assert client.get("/healthz").text == "ok"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                                     {"Authorization": f"bearer {TOKEN}x"}, {"Cookie": TOKEN}])
def test_without_the_token_nothing_answers(headers):
    """Loopback is every local user's and every hostNetwork pod's: every path, the health checks
    included, is a 401 that shows nothing, and nothing of the views is built for it."""
    app, built = make_app()
    client = TestClient(app, headers=headers)
    for method, path in [("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/things"),
                         ("GET", "/pods"), ("GET", "/openapi.json"), ("GET", "/nothing"), ("POST", "/readyz"),
                         ("HEAD", "/healthz")]:
        res = client.request(method, path)
        assert res.status_code == 401, (method, path)
        assert res.headers["www-authenticate"].startswith("Bearer")
        if method != "HEAD":
            assert res.json()["detail"].startswith("Unauthorized: every admin URL needs the node's admin token")
    assert built == []


def test_two_authorization_headers_are_refused():
    app, _ = make_app()
    res = TestClient(app).get("/healthz", headers=[("Authorization", f"Bearer {TOKEN}"),
                                                   ("Authorization", "Bearer other")])
    assert res.status_code == 401


def test_an_admin_app_cannot_be_made_without_a_token():
    with pytest.raises(ValueError, match="admin token"):
        AdminApp("probe", {}, token="")


def test_views_never_show_env_values_headers_or_what_quotes_them():
    app, _ = make_app(secrets=lambda: {"quoted-elsewhere"})
    pod = client_of(app).get("/pods").json()[0]
    container = pod["spec"]["containers"][0]
    assert container["env"] == [{"name": "DB_PASSWORD", "value": REDACTED}]
    assert container["readinessProbe"]["httpGet"]["httpHeaders"] == [{"name": "Authorization", "value": REDACTED}]
    assert pod["message"] == f'exec: "/bin/{REDACTED}": not found; header from the store: {REDACTED}'
