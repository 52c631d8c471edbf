"""An HTTP server for a node's staticPodURL: it answers GET /pods.yaml with what a test wrote
to its file (an empty file: no pods), and records the headers and the time of each request."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class ManifestServer:
    def __init__(self, file: Path) -> None:
        self.file = file
        self.file.write_text("")
        self.headers: list[dict[str, str]] = []
        self.times: list[float] = []  # time.monotonic() of each request
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.headers.append(dict(self.headers.items()))
                server.times.append(time.monotonic())
                body = server.file.read_bytes() if self.path == "/pods.yaml" else b""
                self.send_response(200 if self.path == "/pods.yaml" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/pods.yaml"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="manifest-server", daemon=True)

    def start(self) -> ManifestServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    def serve(self, text: str) -> None:
        tmp = self.file.with_name(self.file.name + ".tmp")
        tmp.write_text(text)
        tmp.rename(self.file)  # never half a manifest
