"""Reading an HTTP answer from a server that may send too much: up to a limit, no further."""

from __future__ import annotations

import httpx


async def read_at_most(resp: httpx.Response, limit: int) -> bytes | None:
    """The body of a streamed response, or None as soon as it is longer than `limit` bytes
    (what is beyond is never read)."""
    body = bytearray()
    async for chunk in resp.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)
