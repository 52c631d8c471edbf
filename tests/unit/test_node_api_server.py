"""The kubelet API server on loopback with real TLS: authentication (x509, bearer token through a
fake TokenReview, anonymous), authorization (the kubelet's attribute mapping through a fake
SubjectAccessReview), routing errors, and the byte-for-byte upgrade proxy to a streaming server."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from services.node_api import streaming
from services.node_api.auth import Attributes, Authenticator, AuthError, Authorizer, User, request_attributes
from services.node_api.http import HTTPError, HTTPServer, Request, Response, Router, text_response
from services.node_api.listeners import auth_gate
from services.node_api.tls import server_context, serving_cert_paths
from shared.config.settings import KubeletConfiguration
from tests.cluster.pki import PKI


class FakeReviews:
    """Tokens map to users; a user may do what `allowed` lists as (verb, subresource)."""

    def __init__(self) -> None:
        self.tokens = {"good-token": User("alice", ("devs",))}
        self.allowed: dict[str, set[tuple[str, str]]] = {"alice": {("get", "stats")}}
        self.token_calls = 0
        self.access_calls: list[tuple[str, Attributes]] = []

    async def token_review(self, token: str):
        self.token_calls += 1
        user = self.tokens.get(token)
        return (user is not None), user, "" if user else "invalid token"

    async def access_review(self, user: User, attrs: Attributes):
        self.access_calls.append((user.name, attrs))
        ok = (attrs.verb, attrs.subresource) in self.allowed.get(user.name, set())
        return ok, "" if ok else "no RBAC rule"


def subresources(method: str, path: str) -> list[str]:
    return [a.subresource for a in request_attributes(method, path, "n1")]


def test_request_attributes_follow_the_kubelet():
    assert request_attributes("GET", "/stats/summary", "n1") == [Attributes("get", "stats", "n1", "/stats/summary")]
    assert subresources("GET", "/metrics/cadvisor") == ["metrics"]
    assert subresources("GET", "/logs/syslog") == ["log"]
    assert subresources("GET", "/spec/") == ["spec"]
    # KubeletFineGrainedAuthz (locked on since 1.36): their own subresource first, then proxy
    assert subresources("GET", "/pods") == ["pods", "proxy"]
    assert subresources("GET", "/runningpods/") == ["pods", "proxy"]
    assert subresources("GET", "/healthz") == ["healthz", "proxy"]
    assert subresources("GET", "/configz") == ["configz", "proxy"]
    assert subresources("GET", "/podsfoo") == ["proxy"]
    # container logs, exec, flags and everything else are nodes/proxy
    assert subresources("GET", "/containerLogs/ns/p/c") == ["proxy"]
    assert request_attributes("POST", "/exec/ns/p/c", "n1")[0].verb == "create"
    assert subresources("PUT", "/debug/flags/v") == ["proxy"]
    assert subresources("GET", "/statsfoo") == ["proxy"]


@pytest.fixture
def pki(tmp_path):
    return PKI(tmp_path / "pki")


@pytest.fixture
async def server(tmp_path, pki):
    """An HTTPS kubelet API with two routes, x509 + webhook authn, webhook authz."""
    cfg = KubeletConfiguration.model_validate({"authentication": {"x509": {"clientCAFile": str(pki.ca.cert)}}})
    reviews = FakeReviews()
    authn = Authenticator(cfg.authentication, reviews)
    authz = Authorizer(cfg.authorization, reviews, "node1")
    router = Router()

    async def whoami(req: Request) -> Response:
        return text_response(f"{req.user.name} {','.join(req.user.groups)}")

    async def boom(req: Request) -> Response:
        raise HTTPError(404, 'pod "x" does not exist')

    router.add("GET", "/stats/summary", whoami)
    router.add("GET", "/pods", whoami)
    router.add("GET", "/exec/{ns}/{pod}/{container}", boom)

    cert, key = serving_cert_paths(cfg, tmp_path / "certs", "node1", ["127.0.0.1"])
    srv = HTTPServer(router, auth_gate(authn, authz), server_context(cfg, cert, key), "test")
    await srv.start("127.0.0.1", 0)
    srv.reviews = reviews  # type: ignore[attr-defined]
    yield srv
    await srv.stop()


async def request(port: int, path: str, *, method: str = "GET", headers: dict[str, str] | None = None,
                  cert=None, raw: bytes | None = None) -> tuple[int, str]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        if raw is None:
            lines = [f"{method} {path} HTTP/1.1", "Host: node1", "Connection: close",
                     *(f"{k}: {v}" for k, v in (headers or {}).items())]
            raw = ("\r\n".join(lines) + "\r\n\r\n").encode()
        writer.write(raw)
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    if not data:
        raise ConnectionError("closed without a response")
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


async def test_no_credentials_is_401(server):
    assert (await request(server.port, "/pods"))[0] == 401


async def test_x509_client_certificate_is_the_user(server, pki):
    admin = pki.issue("admin", "kube-apiserver-kubelet-client", ["system:masters"])
    server.reviews.allowed["kube-apiserver-kubelet-client"] = {("get", "proxy")}
    status, body = await request(server.port, "/pods", cert=admin)
    assert (status, body) == (200, "kube-apiserver-kubelet-client system:masters,system:authenticated")
    # nodes/pods asked first (the kubelet's fine-grained check), then nodes/proxy, which allows it
    assert [attrs for _, attrs in server.reviews.access_calls[-2:]] == [
        Attributes("get", "pods", "node1", "/pods"), Attributes("get", "proxy", "node1", "/pods")]


async def test_nodes_pods_alone_reads_the_pod_list_but_cannot_exec(server, pki):
    """What KubeletFineGrainedAuthz gives: a monitoring agent granted nodes/pods reads /pods
    without nodes/proxy, which would also let it exec into every container."""
    agent = pki.issue("agent", "pod-lister")
    server.reviews.allowed["pod-lister"] = {("get", "pods")}
    assert (await request(server.port, "/pods", cert=agent))[0] == 200
    status, body = await request(server.port, "/exec/ns/p/c", cert=agent)
    assert status == 403 and "subresource(s)=[proxy]" in body, body


async def test_certificate_from_another_ca_fails_the_handshake(server, tmp_path):
    stranger = PKI(tmp_path / "other").issue("eve", "eve", ["system:masters"])
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await request(server.port, "/pods", cert=stranger)


async def test_bearer_token_reviewed_once_and_rbac_applied(server):
    ok = await request(server.port, "/stats/summary", headers={"Authorization": "Bearer good-token"})
    assert ok == (200, "alice devs")
    # allowed to get nodes/stats, not nodes/proxy: the kubelet's 403 wording
    status, body = await request(server.port, "/pods", headers={"Authorization": "Bearer good-token"})
    assert status == 403
    assert "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])" in body
    assert server.reviews.token_calls == 1  # cached for cacheTTL
    bad = await request(server.port, "/stats/summary", headers={"Authorization": "Bearer forged"})
    assert bad[0] == 401


async def test_unknown_path_and_handler_errors(server, pki):
    admin = pki.issue("admin", "root", ["system:masters"])
    server.reviews.allowed["root"] = {("get", "proxy")}
    assert (await request(server.port, "/nope", cert=admin))[0] == 404
    assert await request(server.port, "/exec/ns/x/c", cert=admin) == (404, 'pod "x" does not exist\n')
    assert (await request(server.port, "/pods", method="DELETE", cert=admin))[0] == 405


async def test_garbage_gets_400_and_the_server_keeps_serving(server, pki):
    status, _ = await request(server.port, "", raw=b"\x16\x03garbage\r\n\r\n")
    assert status == 400
    assert (await request(server.port, "/pods"))[0] == 401


def test_anonymous_only_when_enabled():
    cfg = KubeletConfiguration.model_validate({"authentication": {"anonymous": {"enabled": True},
                                                                  "webhook": {"enabled": False}}})
    user = asyncio.run(Authenticator(cfg.authentication, None).authenticate(None, None))
    assert user == User("system:anonymous", ("system:unauthenticated",))
    default = KubeletConfiguration()
    with pytest.raises(AuthError) as exc:
        asyncio.run(Authenticator(default.authentication, None).authenticate(None, None))
    assert exc.value.status == 401


async def test_webhook_authorization_without_api_server_refuses():
    cfg = KubeletConfiguration()
    with pytest.raises(AuthError) as exc:
        await Authorizer(cfg.authorization, None, "n").authorize(User("u"), "GET", "/pods")
    assert exc.value.status == 403 and "AlwaysAllow" in str(exc.value)


async def test_upgrade_is_proxied_byte_for_byte():
    """A fake streaming server answers 101 and echoes; the proxy passes the upgrade headers on,
    keeps the client's credentials to itself, and relays both directions."""
    seen: dict[str, bytes] = {}
    backend_done = asyncio.Event()

    async def backend(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        seen["head"] = head
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nConnection: Upgrade\r\n\r\n")
        while data := await reader.read(100):
            writer.write(data.upper())
            await writer.drain()
        writer.close()
        backend_done.set()

    back = await asyncio.start_server(backend, "127.0.0.1", 0)
    back_port = back.sockets[0].getsockname()[1]
    router = Router()

    async def upgrade(req, conn):
        await streaming.proxy_upgrade(req, conn, f"http://127.0.0.1:{back_port}/exec/tok123", 30)

    async def plain(req):
        raise HTTPError(400, "Upgrade request required")

    router.add("GET POST", "/exec/{ns}/{pod}/{container}", plain, upgrade)

    async def gate(req):
        return None

    front = HTTPServer(router, gate, None, "test")
    await front.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    writer.write(b"POST /exec/ns/p/c?command=sh&input=1 HTTP/1.1\r\nHost: n\r\nConnection: Upgrade\r\n"
                 b"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
                 b"Authorization: Bearer secret\r\n\r\nhello")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 101")
    assert await asyncio.wait_for(reader.readexactly(5), 5) == b"HELLO"
    writer.write(b"more")
    assert await asyncio.wait_for(reader.readexactly(4), 5) == b"MORE"
    sent = seen["head"]
    assert sent.startswith(b"POST /exec/tok123 HTTP/1.1\r\n")
    assert b"x-stream-protocol-version: v4.channel.k8s.io" in sent.lower() and b"upgrade: spdy/3.1" in sent.lower()
    assert b"secret" not in sent
    # the client going away ends the stream at once: the runtime's side is closed too
    writer.close()
    await asyncio.wait_for(backend_done.wait(), 5)
    await asyncio.sleep(0.1)
    assert not front._connections
    await front.stop()
    back.close()


class SlowReviews(FakeReviews):
    """TokenReviews that wait to be released, or fail while `failing`."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.failing = False

    async def token_review(self, token: str):
        self.token_calls += 1
        await self.release.wait()
        if self.failing:
            raise ConnectionError("API server unreachable")
        user = self.tokens.get(token)
        return (user is not None), user, "" if user else "invalid token"


def _authenticator(reviews) -> Authenticator:
    return Authenticator(KubeletConfiguration().authentication, reviews)


async def test_concurrent_requests_with_one_token_share_one_review():
    reviews = SlowReviews()
    authn = _authenticator(reviews)
    tries = [asyncio.create_task(authn.authenticate(None, "Bearer forged")) for _ in range(20)]
    await asyncio.sleep(0.05)
    tries[0].cancel()  # a client that goes away does not end the review the others wait for
    reviews.release.set()
    results = await asyncio.gather(*tries, return_exceptions=True)
    assert reviews.token_calls == 1
    assert all(isinstance(r, AuthError) and r.status == 401 for r in results[1:])
    with pytest.raises(AuthError):
        await authn.authenticate(None, "Bearer forged")  # rejected: cached like an accepted one
    assert reviews.token_calls == 1


async def test_a_failed_review_is_not_repeated_for_a_few_seconds(monkeypatch):
    from services.node_api import auth

    now = [1000.0]
    monkeypatch.setattr(auth.time, "monotonic", lambda: now[0])
    reviews = SlowReviews()
    reviews.release.set()
    reviews.failing = True
    authn = _authenticator(reviews)
    for _ in range(5):
        with pytest.raises(AuthError) as exc:
            await authn.authenticate(None, "Bearer good-token")
        assert exc.value.status == 401
    assert reviews.token_calls == 1
    # the API server is back: after FAILED_REVIEW_TTL the token is reviewed again, and accepted
    reviews.failing = False
    now[0] += auth.FAILED_REVIEW_TTL
    assert (await authn.authenticate(None, "Bearer good-token")).name == "alice"
    assert reviews.token_calls == 2


async def test_made_up_tokens_do_not_push_a_real_one_out_of_the_cache():
    from services.node_api import auth

    reviews = FakeReviews()
    authn = Authenticator(KubeletConfiguration().authentication, reviews)
    assert (await authn.authenticate(None, "Bearer good-token")).name == "alice"
    for i in range(auth.CACHE_SIZE + 100):
        with pytest.raises(AuthError):
            await authn.authenticate(None, f"Bearer made-up-{i}")
    calls = reviews.token_calls
    assert (await authn.authenticate(None, "Bearer good-token")).name == "alice"
    assert reviews.token_calls == calls  # still cached


async def test_a_stream_nothing_moves_on_is_closed_after_streaming_connection_idle_timeout():
    """Both sides silent after the upgrade: the proxy ends the stream when
    streamingConnectionIdleTimeout has passed, and not before."""
    import time

    idle = KubeletConfiguration.model_validate({"streamingConnectionIdleTimeout": "1s"}).streaming_connection_idle_timeout

    async def backend(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nConnection: Upgrade\r\n\r\n")
        await writer.drain()
        await reader.read()  # silent until the proxy closes
        writer.close()

    back = await asyncio.start_server(backend, "127.0.0.1", 0)
    back_port = back.sockets[0].getsockname()[1]
    router = Router()

    async def upgrade(req, conn):
        await streaming.proxy_upgrade(req, conn, f"http://127.0.0.1:{back_port}/exec/tok", idle)

    async def plain(req):
        raise HTTPError(400, "Upgrade request required")

    async def gate(req):
        return None
    router.add("GET POST", "/exec/{ns}/{pod}/{container}", plain, upgrade)
    front = HTTPServer(router, gate, None, "test")
    await front.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        writer.write(b"POST /exec/ns/p/c HTTP/1.1\r\nHost: n\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 101")
        start = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 10) == b"", "closed by the proxy"
        took = time.monotonic() - start
        assert 0.9 <= took < 5, f"closed after {took:.1f}s of silence, streamingConnectionIdleTimeout is 1s"
        writer.close()
    finally:
        await front.stop()
        back.close()
