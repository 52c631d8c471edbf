"""Issue 29, case 4: the admin endpoints are root's alone, and no admin view shows a secret.

Every URL of every service's loopback admin app (its own /healthz, /readyz, /metrics and every
route of its views, enumerated from the running app's OpenAPI document so that a view added
later is covered too) is asked for:
- as uid 65534 (`nobody`), by a plain Python of the host: no answer with content, and the token
  file cannot be read;
- from a hostNetwork pod (root in its container, on the node's loopback, without the token file):
  no answer with content either;
- as root with the node's admin token: every one answers, and a recognisable secret put into a
  pod's env, a probe's httpHeaders, its last-applied annotation and an unusable manifest appears
  in none of them.
The node's other work is checked while the attack runs.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import threading

from shared.process.admin import SERVICES
from tests.integration.conftest import wait_for
from tests.security.conftest import assert_node_serves, kubelet_api

SECRET = f"hunter2-{secrets.token_hex(8)}"
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
# The host's own Python (stdlib only): the venv's interpreter is beneath /root, closed to nobody.
HOST_PYTHON = "/usr/bin/python3"
OWN_PATHS = ["/healthz", "/readyz", "/metrics", "/openapi.json", "/no-such-view"]

# Asks every URL given on stdin (a JSON list) and prints what came back: status and body. Runs as
# nobody, so it may import nothing of pykubelet.
ASK_ALL = r"""
import json, sys, urllib.error, urllib.request
spec = json.load(sys.stdin)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
out = {"results": [], "token": ""}
for rounds in range(spec["rounds"]):
    for url in spec["urls"]:
        for headers in ({}, {"Authorization": "Bearer " + "x" * 43}):
            req = urllib.request.Request(url, headers=headers)
            try:
                with opener.open(req, timeout=5) as resp:
                    out["results"].append([url, resp.status, resp.read().decode(errors="replace")])
            except urllib.error.HTTPError as exc:
                out["results"].append([url, exc.code, exc.read().decode(errors="replace")])
            except OSError as exc:
                out["results"].append([url, 0, "refused: %s" % exc])
try:
    with open(spec["token"]) as f:
        out["token"] = "READ: " + f.read()
except OSError as exc:
    out["token"] = type(exc).__name__
print(json.dumps(out))
"""


def _leaky_pods(pods) -> None:
    """A running pod carrying the secret everywhere a standalone pod can (static pods may not
    name secrets or configMaps: env values, a probe header, the last-applied annotation), a
    hostNetwork pod to attack from, and a manifest the node cannot use that holds the secret."""
    last_applied = json.dumps({"spec": {"containers": [{"env": [{"name": "DB_PASSWORD", "value": SECRET}]}]}})
    pods.write_pod("leaky", {
        "containers": [{
            "name": "web", "image": pods.image("web"),
            "env": [{"name": "DB_PASSWORD", "value": SECRET},
                    {"name": "DERIVED", "value": "prefix-$(DB_PASSWORD)"}],
            "readinessProbe": {"httpGet": {"path": "/", "port": 80,
                                           "httpHeaders": [{"name": "Authorization", "value": f"Bearer {SECRET}"}]},
                               "periodSeconds": 1}}]},
        annotations={"kubectl.kubernetes.io/last-applied-configuration": last_applied})
    pods.write_pod("attacker", {"hostNetwork": True, "containers": [{
        "name": "sh", "image": pods.image("busybox"), "command": ["sleep", "3600"]}]})
    pods.write_pod("unusable", {"restartPolicy": "Sometimes", "containers": [{
        "name": "app", "image": pods.image("busybox"), "env": [{"name": "TOKEN", "value": SECRET}]}]})


def _every_admin_url(pods, pod_name: str) -> list[str]:
    """Every URL of every service's admin app: its own paths, one that does not exist, and every
    route of its views as its OpenAPI document (asked as root, with the token) lists them."""
    fill = {"namespace": "default", "name": pod_name}
    urls = []
    for service in SERVICES:
        resp = pods.admin_get(service, "/openapi.json")
        assert resp.status_code == 200, f"{service}: /openapi.json {resp.status_code} {resp.text[:200]}"
        paths = set(OWN_PATHS)
        for path in resp.json()["paths"]:
            unknown = set(re.findall(r"{(\w+)}", path)) - set(fill)
            assert not unknown, f"{service} {path}: give this test a value for {unknown}"
            paths.add(re.sub(r"{(\w+)}", lambda m: fill[m.group(1)], path))
        urls += [pods.admin(service) + p for p in sorted(paths)]
    return urls


def _no_content(results: list[list], who: str) -> None:
    """Each [url, status, body]: refused (status 0), or 401/403 whose body is only the error."""
    asked = {r[0] for r in results}
    for url, status, body in results:
        assert status != 200, f"{who}: {url} answered 200: {body[:300]!r}"
        assert status in (0, 401, 403), f"{who}: {url} answered {status}: {body[:300]!r}"
        assert SECRET not in body, f"{who}: {url} showed the secret"
        if status:
            assert len(body) < 200 and "admin token" in body, f"{who}: {url} answered {status} with {body[:300]!r}"
    assert len(asked) >= len(SERVICES) * len(OWN_PATHS), f"{who}: only {len(asked)} URLs asked"


def _from_host_network_pod(pods, uid: str, urls: list[str]) -> list[list]:
    """Each URL asked from inside the hostNetwork pod, a raw HTTP/1.0 GET through busybox nc
    (what comes back is exactly what the pod gets): [url, status, body]."""
    # All at once, each connection held open a while after the request: busybox nc half-closes
    # it at the end of its input, and uvicorn drops an answer that is not written by then.
    asks, show = [], []
    for i, url in enumerate(urls):
        address, _, path = url.removeprefix("http://").partition("/")
        port = address.rsplit(":", 1)[1]
        asks.append(f"({{ printf 'GET /{path} HTTP/1.0\\r\\n\\r\\n'; sleep 4; }} "
                    f"| nc -w 5 127.0.0.1 {port} > /tmp/answer.{i} 2>&1 &)")
        show.append(f"echo '=== {url}'; cat /tmp/answer.{i}")
    _, out = pods.exec(uid, "sh", ["sh", "-c", "; ".join([*asks, "sleep 6", *show])], timeout=120)
    results = []
    for section in out.split("=== ")[1:]:
        url, _, answer = section.partition("\n")
        head, _, body = answer.partition("\r\n\r\n")
        status = re.match(r"HTTP/1\.[01] (\d{3})", head)
        # Every service listens: each URL gets an HTTP answer (nothing here may pass by failing).
        assert status, f"hostNetwork pod: {url}: no HTTP answer: {answer[:300]!r}"
        results.append([url, int(status.group(1)), body])
    assert len(results) == len(urls), out[-2000:]
    return results


def test_admin_endpoints_answer_root_with_the_token_only_and_show_no_secret(secure_node, pods, canary):
    _leaky_pods(pods)
    leaky = pods.wait_running("leaky")
    attacker = pods.wait_running("attacker")
    wait_for(lambda: any(e["file"].endswith("unusable.yaml") for e in pods.status()["manifestErrors"]), 30,
             "the unusable manifest reported")
    urls = _every_admin_url(pods, leaky["name"])
    token_file = str(pods.root / "run" / "admin-token")

    # The attack, as nobody, for as long as the node's other work is checked beside it.
    outcome: dict = {}

    def attack() -> None:
        proc = subprocess.run([*NOBODY, HOST_PYTHON, "-I", "-c", ASK_ALL], capture_output=True, text=True,
                              timeout=300, input=json.dumps({"urls": urls, "rounds": 3, "token": token_file}))
        outcome["proc"] = proc

    attacker_thread = threading.Thread(target=attack)
    attacker_thread.start()
    assert_node_serves(secure_node)
    attacker_thread.join(timeout=320)
    proc = outcome["proc"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout)
    assert seen["token"] in ("PermissionError", "FileNotFoundError"), f"nobody and the token file: {seen['token']}"
    _no_content(seen["results"], "nobody")

    _no_content(_from_host_network_pod(pods, attacker["uid"], urls), "a hostNetwork pod")

    # Root with the token: every URL answers (the missing view as a 404), none shows the secret.
    for url in urls:
        service = next(s for s in SERVICES if url.startswith(pods.admin(s) + "/"))
        path = url.removeprefix(pods.admin(service))
        resp = pods.admin_get(service, path)
        assert resp.status_code == (404 if path == "/no-such-view" else 200), \
            f"{url} as root with the token: {resp.status_code} {resp.text[:300]}"
        assert SECRET not in resp.text, f"{url} shows the secret: ...{_around(resp.text, SECRET)}..."
    shown = pods.cli("admin", "pod-sync", "/pods").stdout  # what root runs by hand
    assert leaky["uid"] in shown and SECRET not in shown
    node_api_pods = pods.admin_get("node-api", "/pods").json()["items"]
    env = next(p for p in node_api_pods if p["metadata"]["name"] == leaky["name"])["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["DB_PASSWORD", "DERIVED"], "the names stay, only values go"
    # node-api's merge of every service's /metrics (it asks them with the token) is whole.
    status, body, _ = kubelet_api(secure_node, "/metrics", timeout=15)
    assert status == 200
    for service in SERVICES:
        assert f'pykubelet_service_up{{service="{service}"}} 1.0' in body.decode(), f"{service} not scraped"
    assert_node_serves(secure_node, "bystander-after")


def _around(text: str, needle: str) -> str:
    at = text.find(needle)
    return text[max(0, at - 150):at + len(needle) + 50]
