"""The admin app every service serves: its own endpoints without FastAPI, views built on demand."""

from __future__ import annotations

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient

from shared.admin import AdminApp


def make_app(checks=None, freshness=None) -> tuple[AdminApp, list[str]]:
    built: list[str] = []

    def views() -> APIRouter:
        built.append("views")
        r = APIRouter()

        @r.get("/things")
        def things() -> list[str]:
            return ["a"]
        return r

    app = AdminApp("probe", checks if checks is not None else {"bus": lambda: (True, "connected")}, freshness)
    app.add_views(views)
    return app, built


def test_health_ready_and_metrics_never_build_the_views():
    app, built = make_app()
    client = TestClient(app)
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
    res = TestClient(app).get("/readyz")
    assert res.status_code == 503
    body = res.json()
    assert body["ready"] is False
    assert body["checks"]["bus"] == {"ok": False, "message": "not connected to nats://127.0.0.1:4222"}
    assert body["checks"]["store"]["ok"] is True


def test_head_and_other_methods():
    app, built = make_app()
    client = TestClient(app)
    res = client.head("/healthz")
    assert res.status_code == 200 and res.content == b"" and res.headers["content-length"] == "2"
    res = client.post("/readyz")
    assert res.status_code == 405 and res.headers["allow"] == "GET, HEAD"
    assert built == []


def test_views_are_built_once_on_the_first_view_request():
    app, built = make_app(freshness=lambda: ["pod-sync has not reconciled since it started"])
    client = TestClient(app)
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
    client = TestClient(app)
    for path in ("/healthz/../../etc/passwd", "/%00", "/readyz%2f", "/" + "a" * 5000):
        res = client.get(path)
        assert res.status_code == 404, path
    assert client.get("/healthz").text == "ok"
