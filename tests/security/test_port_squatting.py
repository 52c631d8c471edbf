"""A local user who binds the node's registry or bus port first is refused, not served: the
registry would hand the node's pods the user's images, the bus would take every service's
credentials."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from shared.process.admin import SERVICES
from tests.integration.conftest import PYKUBELET, REPO, free_port, free_port_range, require_node_prerequisites

# An HTTP server run as nobody that answers 200 to everything, as a fake registry would.
SQUATTER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.fixture
def squatter():
    port = free_port()
    proc = subprocess.Popen(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                             "/usr/bin/python3", "-c", SQUATTER, str(port)])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the squatting server did not start")
                time.sleep(0.1)
        yield port
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("flag", ["--registry-port", "--nats-port"])
def test_a_squatted_port_stops_the_node_from_starting(tmp_path, squatter, flag):
    require_node_prerequisites()
    ports = {"--registry-port": str(free_port()), "--nats-port": str(free_port()), flag: str(squatter)}
    (tmp_path / "manifests").mkdir()
    argv = [*PYKUBELET, "up", "--root-dir", str(tmp_path / "root"), "--pod-manifest-path", str(tmp_path / "manifests"),
            "--admin-port-base", str(free_port_range(len(SERVICES))), "--hostname-override", "squatted",
            "--pod-cidr", "10.88.0.0/24", *[x for kv in ports.items() for x in kv]]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, _ = proc.communicate(timeout=120)
        pytest.fail(f"pykubelet up started beside a server squatting {flag} {squatter}:\n{out[-3000:]}")
    assert proc.returncode != 0, out[-3000:]
    assert f"port {squatter} is already in use" in out and flag in out, out[-3000:]
    assert not (tmp_path / "root" / "run" / "ready").exists()
