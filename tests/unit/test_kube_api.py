"""The services' Kubernetes API client (shared/api/client.py) against a real loopback HTTP server that
plays the API server: paths, errors, DeleteOptions, watches, the node-wide budget, and a bad
kubeconfig named in the error."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from shared.api.client import ApiError, KubeconfigError, api_client, patch_pod_status, path
from tests.unit.fake_api_server import FakeApiServer


def test_paths_escape_every_name():
    assert path("v1", "pods", "web", "default", "status") == "/api/v1/namespaces/default/pods/web/status"
    assert path("coordination.k8s.io/v1", "leases", "n1", "kube-node-lease") == \
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
    assert path("v1", "pods", "../../secrets/x", "a/b") == "/api/v1/namespaces/a%2Fb/pods/..%2F..%2Fsecrets%2Fx"


async def test_requests_errors_and_delete_options(api_server, tmp_path):
    api = await api_client(api_server.kubeconfig(tmp_path), qps=50, burst=100, root_dir=tmp_path)
    try:
        api_server.replies["/api/v1/nodes/n1"] = (200, b'{"metadata": {"name": "n1", "uid": "u1"}}')
        node = await api.get(path("v1", "nodes", "n1"))
        assert node["metadata"]["uid"] == "u1"
        assert api_server.requests[-1][2]["authorization"] == "Bearer secret-token"
        assert await api.get_or_none(path("v1", "nodes", "gone")) is None
        with pytest.raises(ApiError) as err:
            await api.get(path("v1", "nodes", "gone"))
        assert err.value.status == 404 and err.value.reason == "NotFound"

        api_server.replies["/api/v1/namespaces/ns/pods/p"] = (200, b'{"kind": "Status"}')
        await api.delete(path("v1", "pods", "p", "ns"), grace_period=0, uid="u-123")
        method, _, headers, body = api_server.requests[-1]
        assert method == "DELETE" and json.loads(body) == {
            "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": "u-123"}}

        api_server.replies["/api/v1/namespaces/ns/pods/p/status"] = (409, b'{"reason": "Conflict", "message": "uid"}')
        assert await patch_pod_status(api, "ns", "p", "u-9", {"phase": "Running"}) is False
        method, _, headers, body = api_server.requests[-1]
        assert method == "PATCH" and headers["content-type"] == "application/merge-patch+json"
        assert json.loads(body) == {"metadata": {"uid": "u-9"}, "status": {"phase": "Running"}}

        api_server.replies["/api/v1/nodes/garbage"] = (500, b"<html>not json</html>")
        with pytest.raises(ApiError) as err:
            await api.get(path("v1", "nodes", "garbage"))
        assert err.value.status == 500 and "not json" in err.value.message
    finally:
        await api.close()


async def test_a_watch_yields_changes_and_raises_on_an_error_event(api_server, tmp_path):
    api = await api_client(api_server.kubeconfig(tmp_path), qps=50, burst=100, root_dir=tmp_path)
    try:
        api_server.replies["/api/v1/pods"] = (200, [
            b'{"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}}',
            b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}}',
            b'{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}'])
        seen = []
        with pytest.raises(ApiError) as err:
            async for kind, obj in api.watch(path("v1", "pods"), "4", 60, fieldSelector="spec.nodeName=n1"):
                seen.append((kind, obj["metadata"]["resourceVersion"]))
        assert seen == [("ADDED", "5"), ("BOOKMARK", "6")]
        assert err.value.status == 410
        target = api_server.requests[-1][1]
        assert "watch=1" in target and "resourceVersion=4" in target and "fieldSelector=spec.nodeName%3Dn1" in target

        api_server.replies["/api/v1/pods"] = (200, [b"this is not json"])
        with pytest.raises(ValueError):
            async for _ in api.watch(path("v1", "pods"), "4", 60):
                pass
    finally:
        await api.close()


async def test_every_request_draws_on_the_node_budget(api_server, tmp_path):
    """burst 2, 5 a second: the first two requests go at once, each later one waits its token."""
    api_server.replies["/api/v1/nodes/n1"] = (200, b"{}")
    from shared.api.client import RATE_LIMITER_SECONDS

    def waited() -> tuple[float, float]:  # (requests, seconds) of rest_client_rate_limiter_duration_seconds
        samples = [s for m in RATE_LIMITER_SECONDS.collect() for s in m.samples if s.labels.get("verb") == "GET"]
        return (sum(s.value for s in samples if s.name.endswith("_count")),
                sum(s.value for s in samples if s.name.endswith("_sum")))
    api = await api_client(api_server.kubeconfig(tmp_path), qps=5, burst=2, root_dir=tmp_path)
    try:
        before = waited()
        start = time.monotonic()
        for _ in range(4):
            await api.get(path("v1", "nodes", "n1"))
        elapsed = time.monotonic() - start
        assert elapsed >= 0.35, "requests beyond the burst wait for tokens"
        assert (tmp_path / "run" / "kube-api-budget").exists(), "the budget file every service shares"
        # The waits are in client-go's metric, as the kubelet exports it. The time the requests
        # themselves take refills the bucket, so on a busy machine the waits add up to less than
        # the 0.4 s the tokens alone would need; they are never more than the time it all took.
        after = waited()
        assert after[0] - before[0] == 4 and 0.1 <= after[1] - before[1] <= elapsed, (before, after, elapsed)
    finally:
        await api.close()


@pytest.mark.parametrize("content, why", [
    ("{{{ not yaml", "cannot use kubeconfig"),
    ("apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n", "cannot use kubeconfig"),
])
async def test_a_broken_kubeconfig_is_named_in_a_clear_error(tmp_path, content, why):
    f = tmp_path / "kubeconfig"
    f.write_text(content)
    with pytest.raises(KubeconfigError) as err:
        await api_client(f, qps=5, burst=10, root_dir=tmp_path)
    assert why in str(err.value) and str(f) in str(err.value)
    with pytest.raises(KubeconfigError):
        await api_client(tmp_path / "missing", qps=5, burst=10, root_dir=tmp_path)


async def test_an_idle_connection_is_kept_for_the_next_periodic_request(tmp_path):
    """The node's own cadences (mirror pods every 5 s, Lease and node status every 10 s) reuse
    one connection instead of paying a TLS handshake each: idle connections live 90 s."""
    connections = 0

    async def handle(reader, writer):
        nonlocal connections
        connections += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    keepalive = await asyncio.start_server(handle, "127.0.0.1", 0)
    s = FakeApiServer()
    s.port = keepalive.sockets[0].getsockname()[1]
    api = await api_client(s.kubeconfig(tmp_path), qps=50, burst=100, root_dir=tmp_path)
    try:
        await api.get("/api/v1/nodes/n1")
        await asyncio.sleep(6)  # past httpx's default keep-alive of 5 s
        await api.get("/api/v1/nodes/n1")
        assert connections == 1
    finally:
        await api.close()
        keepalive.close()
