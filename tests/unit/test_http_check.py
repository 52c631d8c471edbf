"""The supervisor's readiness GET (services/supervisor/http_check.py) against real loopback
servers: only an HTTP 200 is up; an error status, garbage, silence or no listener is not."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from services.supervisor.http_check import http_ok


async def serve(reply: bytes | None):
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        if reply is None:
            await asyncio.sleep(10)  # never answers
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("reply, up", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", True),
    (b"HTTP/1.0 200 OK\r\n\r\n", True),
    (b"HTTP/1.1 503 Service Unavailable\r\n\r\n", False),
    (b"SSH-2.0-OpenSSH_9.2\r\n", False),
    (b"", False),
])
async def test_only_a_200_is_up(reply, up):
    server, port = await serve(reply)
    try:
        assert await http_ok("127.0.0.1", port, "/healthz") is up
    finally:
        server.close()


async def test_a_silent_server_or_none_is_not_up_and_the_check_ends_on_time():
    server, port = await serve(None)
    try:
        start = time.monotonic()
        assert await http_ok("127.0.0.1", port, "/healthz", timeout=0.3) is False
        assert time.monotonic() - start < 2
    finally:
        server.close()
    assert await http_ok("127.0.0.1", port, "/healthz") is False  # nothing listens now


async def test_the_token_is_sent_as_a_bearer_header():
    heads: list[bytes] = []

    async def handle(reader, writer):
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await http_ok("127.0.0.1", port, "/healthz", token="t0ken")
        assert await http_ok("127.0.0.1", port, "/v2/")
    finally:
        server.close()
    assert b"\r\nAuthorization: Bearer t0ken\r\n" in heads[0]
    assert b"Authorization" not in heads[1], "no token: no header (the registry gets none)"


def _sockets_to(port: int) -> int:
    """This process's TCP connections to 127.0.0.1:port (from /proc/net/tcp and its fds)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[2] == f"0100007F:{port:04X}" and fields[9] in mine:
                n += 1
    return n


async def test_the_socket_is_closed_when_the_check_returns():
    """The supervisor forks the next service right after a check: a socket still open then would
    stay open in that service for as long as it runs (a dead connection to its sibling)."""
    server, port = await serve(b"HTTP/1.0 200 OK\r\n\r\n")
    try:
        assert await http_ok("127.0.0.1", port, "/healthz")
        assert _sockets_to(port) == 0  # no turn of the loop in between
    finally:
        server.close()
