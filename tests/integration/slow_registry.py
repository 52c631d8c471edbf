"""A registry in front of a node's registry that answers every blob request `delay` seconds
late, and records when each request ran: image pulls through it last long enough to see whether
the node runs them one at a time (serializeImagePulls) or how many at once
(maxParallelImagePulls). Images pushed with distinct_images share no layer, so each pull fetches
its own blobs.

It listens on 127.0.0.1, which containerd reaches over plain HTTP as it does the node's registry."""

from __future__ import annotations

import http.client
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shared.runtime.images.build import ImageSpec, build_image
from shared.runtime.images.registry import push_image

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "host"}
BLOB_DELAY = 1.5  # seconds: an image's config and layer make a pull of 3 s or more


@dataclass
class Request:
    path: str
    start: float  # time.monotonic()
    end: float


class SlowRegistry:
    def __init__(self, upstream: str, delay: float) -> None:
        self.upstream = upstream
        self.delay = delay
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                start = time.monotonic()
                if "/blobs/" in self.path:
                    time.sleep(registry.delay)
                conn = http.client.HTTPConnection(registry.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                    conn.request(self.command, self.path, headers=headers)
                    resp = conn.getresponse()
                    body = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    # A HEAD answer's length is the upstream's (of the body it did not send).
                    if k.lower() not in HOP_HEADERS and (k.lower() != "content-length" or self.command == "HEAD"):
                        self.send_header(k, v)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                with registry._lock:
                    registry.requests.append(Request(self.path, start, time.monotonic()))

            do_GET = do_HEAD = _forward  # noqa: N815 (http.server's names)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="slow-registry", daemon=True)

    def __enter__(self) -> SlowRegistry:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    def span(self, repository: str) -> tuple[float, float]:
        """From the first request for the repository's manifests or blobs to the end of the last."""
        with self._lock:
            mine = [r for r in self.requests if r.path.startswith(f"/v2/{repository}/")]
        assert mine, f"nothing of {repository} was fetched through the slow registry"
        return min(r.start for r in mine), max(r.end for r in mine)


def distinct_images(registry: str, prefix: str, count: int, padding: int = 0) -> list[str]:
    """Push `count` busybox images with a layer of their own each; their repositories.
    padding: bytes of random data each image carries too (it compresses to about three quarters)."""
    repos = []
    for i in range(count):
        files = {"id": secrets.token_hex(16), **({"padding": secrets.token_urlsafe(padding)[:padding]} if padding else {})}
        spec = ImageSpec(f"pykubelet/{prefix}-{i}", "1.0", ["sh"], files=files)
        push_image(registry, build_image(spec))
        repos.append(spec.repository)
    return repos


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of spans under way at one moment."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def pull_spans(node, prefix: str, count: int) -> list[tuple[float, float]]:
    """Static pods of `count` new images written at once, their images pulled through a slow
    registry: each image's pull span, once every pod runs."""
    repos = distinct_images(node.registry, prefix, count)
    with SlowRegistry(node.registry, BLOB_DELAY) as slow:
        for i, repo in enumerate(repos):
            node.write_pod(f"{prefix}-{i}", {"containers": [
                {"name": "app", "image": f"{slow.address}/{repo}:1.0", "command": ["sleep", "3600"]}]})
        for i in range(count):
            node.wait_running(f"{prefix}-{i}", 90)
        return [slow.span(repo) for repo in repos]
