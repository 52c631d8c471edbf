"""imageServiceEndpoint on a node of its own: the CRI ImageService's calls go to that endpoint (here
a relay in front of the node's containerd, which counts the connections made to it), the
RuntimeService's to containerRuntimeEndpoint. With the relay gone, a pod of a new image gets its
sandbox (runtime calls) while its container waits in ImageInspectError (the kubelet's reason when
the image service does not answer ImageStatus), the message naming the image service's endpoint;
with the relay back, the pod runs."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from tests.integration.conftest import launch_node, stop_node, wait_for
from tests.integration.slow_registry import distinct_images


class UnixRelay:
    """Accepts on `listen` and relays each connection's bytes to and from `target`."""

    def __init__(self, listen: Path, target: Path) -> None:
        self.listen, self.target = listen, target
        self.accepted = 0
        self._server: socket.socket | None = None
        self._open: list[socket.socket] = []

    def start(self) -> None:
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.listen))
        self._server.listen(16)
        threading.Thread(target=self._accept, args=(self._server,), name="relay-accept", daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self.listen.unlink(missing_ok=True)
        for s in self._open:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self._open.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(str(self.target))
            except OSError:
                client.close()
                continue
            self.accepted += 1
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), name="relay-pump", daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def _waiting(node, name: str) -> dict | None:
    pod = node.pod(name)
    if pod and pod["containers"][0]["reason"] == "ImageInspectError":
        return pod
    return None


def test_the_image_calls_go_to_the_image_service_endpoint(tmp_path):
    root = tmp_path / "node"
    root.mkdir()
    images = tmp_path / "images.sock"
    relay = UnixRelay(images, root / "containerd" / "containerd.sock")
    relay.start()
    node = launch_node(root, extra_config=f"imageServiceEndpoint: unix://{images}\n")
    try:
        # The node came up with its demo pod: its image went through the relay.
        assert relay.accepted >= 1, "no ImageService call reached imageServiceEndpoint"
        [repo] = distinct_images(node.registry, "imgsvc", 1)
        relay.stop()
        node.write_pod("imgsvc", {"containers": [{"name": "app", "image": f"{node.registry}/{repo}:1.0",
                                                   "command": ["sleep", "3600"]}]})
        pod = wait_for(lambda: _waiting(node, "imgsvc"), 90, "the pod's image failing without the image service")
        message = pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        assert f"is the image service running at unix://{images}?" in message, message
        assert pod["podIP"], "the sandbox (RuntimeService, containerRuntimeEndpoint) was made all the same"
        relay.start()
        node.wait_running("imgsvc", 120)  # pulled once the back-off is over and the service is back
    finally:
        relay.stop()
        stop_node(node)
