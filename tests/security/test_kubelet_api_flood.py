"""Flooding the kubelet API port from a neighbour on the node (issue 29, case 3): slow request
heads that never finish, and large bodies sent without credentials. Authenticated clients must
go on being answered promptly while it happens, and node-api must not buffer what it will refuse.

All traffic goes to 127.0.0.1, and every socket the tests open is closed before they end."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import select
import socket
import ssl
import threading
import time

import pytest

from tests.security.conftest import SecureNode, assert_node_serves, kubelet_api, wait_for

SLOW_CONNECTIONS = 1100
TRICKLE_INTERVAL = 2.0       # one more header byte on each slow connection this often
ATTACK_LIMIT = 150.0         # the slow-header attacker stops by itself after this, whatever happens
BODY_CONNECTIONS = 200
BODY = 1 << 20
RSS_BOUND = 60 << 20         # node-api may grow by this much while the bodies arrive, not by the bodies


@pytest.fixture(autouse=True, scope="module")
def enough_file_descriptors():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = SLOW_CONNECTIONS + BODY_CONNECTIONS + 512
    if soft < need:
        assert hard == resource.RLIM_INFINITY or hard >= need, f"RLIMIT_NOFILE hard limit {hard} < {need}"
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _client_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # a flood does not care whose certificate the node shows
    return ctx


def established_to(port: int) -> int:
    """TCP connections the node holds on its side of port (local port == port, ESTABLISHED)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


class Slowloris:
    """Keeps `count` TLS connections to the port, each sending one more byte of a request head
    every TRICKLE_INTERVAL; connections the server closes are opened again, as the attack tools do.
    Stops on stop() or after ATTACK_LIMIT seconds."""

    HEAD = b"GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.ctx = _client_context()
        self.socks: list[ssl.SSLSocket] = []
        self.opened = 0          # connections that completed the TLS handshake
        self.refused = 0         # connections the server closed before or during the handshake
        self.rounds = 0          # trickle rounds with `count` connections attempted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slowloris", daemon=True)
        self._deadline = time.monotonic() + ATTACK_LIMIT

    def __enter__(self) -> Slowloris:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the attacker thread did not stop"
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()
        self.socks.clear()

    def _stopping(self) -> bool:
        return self._stop.is_set() or time.monotonic() > self._deadline

    def _open(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        try:
            s = self.ctx.wrap_socket(raw)
            s.sendall(self.HEAD)
        except OSError:
            raw.close()
            self.refused += 1
            return
        self.opened += 1
        self.socks.append(s)

    def _trickle(self) -> None:
        """One byte on each connection; drop the ones the server has closed."""
        alive = []
        for s in self.socks:
            try:
                readable, _, _ = select.select([s], [], [], 0)
                if readable:  # the server closed it (or answered, which also ends this attempt)
                    raise ConnectionError
                s.sendall(b"a")
                alive.append(s)
            except (OSError, ValueError):
                with contextlib.suppress(OSError):
                    s.close()
        self.socks = alive

    def _run(self) -> None:
        while not self._stopping():
            while len(self.socks) < self.count and not self._stopping():
                try:
                    self._open()
                except OSError:
                    self.refused += 1
            self.rounds += 1
            if self._stop.wait(TRICKLE_INTERVAL):
                return
            self._trickle()


def authenticated_get_pods(sn: SecureNode, what: str) -> float:
    try:
        status, body, took = kubelet_api(sn, "/pods", timeout=10)
    except OSError as exc:
        pytest.fail(f"{what}: the authenticated GET /pods got no answer: {exc!r}")
    assert status == 200, f"{what}: GET /pods answered {status} {body[:200]!r}"
    return took


def test_slow_request_heads_do_not_lock_out_authenticated_clients(secure_node: SecureNode):
    port = secure_node.node.kubelet_port
    with Slowloris(port, SLOW_CONNECTIONS) as attack:
        deadline = time.monotonic() + 60
        while attack.rounds < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert attack.rounds >= 2, f"the attack did not get going: {attack.opened} opened, {attack.refused} refused"
        took, held = [], []
        for i in range(5):
            # Each request while the node holds hundreds of the slow connections: their number
            # dips when a batch reaches the header deadline at once, until the attacker has
            # opened them again.
            held.append(wait_for(lambda: (n := established_to(port)) >= 400 and n, 30,
                                 f"the node to hold 400 slow connections again (request {i + 1})", 0.05))
            took.append(authenticated_get_pods(secure_node, f"request {i + 1} of 5 during the attack"))
            time.sleep(1)
        assert max(took) < 1.0, f"authenticated GET /pods took {took} s during the attack (connections held: {held})"
        assert_node_serves(secure_node, "slowloris-bystander", api_within=1.0)
        assert attack.rounds >= 3 and not attack._stopping(), "the attack ended before the checks did"


async def _post_body_without_credentials(port: int, ctx: ssl.SSLContext, body: bytes,
                                         attempted: list[int]) -> int | str:
    """One connection sending a request with a body and no credentials: the answer's status."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx), 20)
    except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
        return f"no connection: {exc!r}"
    finally:
        attempted[0] += 1
    try:
        writer.write(b"POST /run/default/nobody/app?cmd=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/octet-stream\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 60)
        return int(head.split()[1])
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError, asyncio.TimeoutError) as exc:
        return f"no answer: {exc!r}"
    finally:
        writer.transport.abort()


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_bodies_without_credentials_are_refused_before_they_are_read(secure_node: SecureNode):
    port = secure_node.node.kubelet_port
    pid = secure_node.node.service_pid("node-api")
    before = _rss(pid)
    peak = [before]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.02):
            peak[0] = max(peak[0], _rss(pid))

    sampler = threading.Thread(target=sample, name="rss-sampler", daemon=True)
    sampler.start()

    async def attack() -> tuple[list[int | str], float]:
        # One client context for all: making one loads the CA store, 40 ms of this loop each.
        attempted, body, ctx = [0], b"x" * BODY, _client_context()
        tasks = [asyncio.create_task(_post_body_without_credentials(port, ctx, body, attempted))
                 for _ in range(BODY_CONNECTIONS)]
        try:
            deadline = time.monotonic() + 30
            while attempted[0] < BODY_CONNECTIONS and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            # While the bodies are on their way: the node answers its authenticated clients.
            took = await asyncio.to_thread(authenticated_get_pods, secure_node, "during the body flood")
            return list(await asyncio.wait_for(asyncio.gather(*tasks), 90)), took
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    try:
        answers, took = asyncio.run(attack())
        time.sleep(0.5)
    finally:
        sampling.set()
        sampler.join(5)
    grew = peak[0] - before
    assert grew < RSS_BOUND, (f"node-api's RSS grew by {grew >> 20} MiB ({before >> 20} -> {peak[0] >> 20} MiB) "
                              f"while {BODY_CONNECTIONS} unauthenticated 1 MiB bodies arrived")
    unexpected = [a for a in answers if a not in (401, 413)]
    assert not unexpected, f"{len(unexpected)} of {BODY_CONNECTIONS} bodies without credentials got {unexpected[:5]}"
    assert took < 5, f"GET /pods took {took:.2f}s during the body flood"

    # The refusal comes before the body: a client that announces 1 MiB and sends 1 KiB is answered.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with _client_context().wrap_socket(raw) as s:
            s.sendall(b"POST /run/default/nobody/app?cmd=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Length: %d\r\n\r\n" % BODY + b"x" * 1024)
            try:
                head = s.recv(4096)
            except TimeoutError:
                pytest.fail("no answer within 5 s to a request whose body has not been sent: "
                            "node-api waits for the body before it authenticates")
            assert head.split()[1] in (b"401", b"413"), head[:200]
