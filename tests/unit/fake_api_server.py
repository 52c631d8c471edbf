"""An HTTP server answering as the API server does, for the unit tests of what talks to it
(shared/api/client.py's client and the services built on it): replies queued per path, every request
recorded. The `api_server` fixture (tests/unit/conftest.py) starts one."""

from __future__ import annotations

import asyncio
import gzip
import json


class FakeApiServer:
    """Answers with whatever the test queued for a path; records every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict, bytes]] = []
        self.header_lines: list[list[tuple[str, str]]] = []  # each request's, repeated names kept
        self.replies: dict[str, tuple[int, list[bytes] | bytes]] = {}
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _handle(self, reader, writer) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        method, target, _ = lines[0].split(" ")
        pairs = [(k.lower(), v) for k, v in (line.split(": ", 1) for line in lines[1:] if ": " in line)]
        self.header_lines.append(pairs)
        headers = dict(pairs)
        body = await reader.readexactly(int(headers.get("content-length", 0)))
        self.requests.append((method, target, headers, body))
        status, reply = self.replies.get(target.split("?")[0], (404, json.dumps(
            {"kind": "Status", "reason": "NotFound", "message": f"{target} not found"}).encode()))
        if isinstance(reply, list):  # a watch: one event per line, then the server ends it
            # As the API server 1.37 does for a client that accepts gzip: each flushed event a
            # gzip member of its own, the members one after the other in the body.
            gzipped = "gzip" in headers.get("accept-encoding", "")
            encoding = "Content-Encoding: gzip\r\n" if gzipped else ""
            writer.write(f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n{encoding}"
                         "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode())
            for line in reply:
                chunk = gzip.compress(line + b"\n") if gzipped else line + b"\n"
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(reply)}"
                         "\r\nConnection: close\r\n\r\n".encode() + reply)
        await writer.drain()
        writer.close()

    def kubeconfig(self, tmp_path):
        f = tmp_path / "kubeconfig"
        f.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{self.port}"}}}}]
users: [{{name: u, user: {{token: secret-token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
        return f
