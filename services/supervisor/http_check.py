"""Is a loopback HTTP server up: one GET, answered 200.

The supervisor asks this of the registry and of every service's admin app while the node
starts. It imports the services' stack only so that the services it forks share it; code the
supervisor runs stays in its memory as long as the node runs (its pages are copied the first time
they are touched), so it uses a plain socket here, not an HTTP client with its TLS setup. The
address is numeric: a host name would be resolved in a thread, and the supervisor forks only
while it runs no thread (services/supervisor/forking.py). The socket is closed before the
check returns: a service forked right after would otherwise inherit it, and hold a dead
connection to its sibling for as long as it runs.
"""

from __future__ import annotations

import asyncio

TIMEOUT = 1.0


async def http_ok(host: str, port: int, path: str, timeout: float = TIMEOUT, token: str = "") -> bool:
    """token: sent as `Authorization: Bearer` (the admin apps answer nothing without it)."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\n{auth}\r\n".encode())
                await writer.drain()
                status_line = await reader.readline()
            finally:
                await closed(writer)
    except (OSError, TimeoutError):
        return False
    parts = status_line.split()
    return len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1] == b"200"


async def closed(writer: asyncio.StreamWriter) -> None:
    """Close now: StreamWriter.close() alone leaves the socket open until the loop's next turn."""
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:  # reset by the peer: closed all the same
        pass
