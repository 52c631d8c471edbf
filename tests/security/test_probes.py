"""HTTP probes with CR/LF in a header or the path fail with a clear message; the container never
receives a smuggled header."""

from __future__ import annotations

from tests.integration.conftest import wait_for


def _listener(pods, name: str, port: int, probe: dict) -> dict:
    # Prints every request it receives: a smuggled header would show in the logs.
    return {"name": name, "image": pods.image("busybox"),
            "command": ["sh", "-c", f"while true; do nc -l -p {port} -w 2 </dev/null; done"],
            "readinessProbe": {"httpGet": {"port": port, **probe}, "periodSeconds": 1}}


def test_crlf_in_probe_headers_and_paths_never_reaches_the_container(pods, canary):
    pods.write_pod("smuggler", {"containers": [
        _listener(pods, "header", 8080, {"path": "/", "httpHeaders": [{"name": "X-Test",
                                                                        "value": "a\r\nX-Injected: 1"}]}),
        _listener(pods, "path", 8081, {"path": "/ok HTTP/1.1\r\nX-Injected: 2\r\nX: "}),
        _listener(pods, "name", 8082, {"path": "/", "httpHeaders": [{"name": "X-Injected: 3\r\nX", "value": "v"}]})]})
    pod = pods.wait_pod("smuggler", lambda p: p["phase"] == "Running", 60, "Running")

    def failures():
        rows = [r for r in pods.admin_get('probe', "/probes", timeout=5).json()
                if r["pod"] == f"default/{pod['name']}"]
        return rows if len(rows) == 3 and all("invalid probe request" in r["lastFailure"] for r in rows) else None
    rows = wait_for(failures, 30, "all three probes failing with the reason")
    assert all(r["result"] == "Failure" for r in rows), rows
    assert not any(c["ready"] for c in pods.pod("smuggler")["containers"])
    for c in ("header", "path", "name"):
        assert "X-Injected" not in pods.cli("logs", "smuggler", "-c", c).stdout, f"{c}: a header was smuggled"
