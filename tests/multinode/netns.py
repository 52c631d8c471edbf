"""Network namespaces for nodes that share one machine: each node gets its own loopback,
ports, pod bridge and routes, and reaches the control plane over a host bridge."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

BRIDGE = "pkmn0"
HOST_IP = "172.30.0.1"


def _ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")


def create_bridge() -> None:
    delete_bridge()
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{HOST_IP}/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def delete_bridge() -> None:
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, timeout=30)


@dataclass
class NodeNetwork:
    index: int

    @property
    def netns(self) -> str:
        return f"pkmn{self.index}"

    @property
    def address(self) -> str:
        return f"172.30.0.{10 + self.index}"

    @property
    def wrap(self) -> tuple[str, ...]:
        """Runs a command in this network namespace only (the mounts stay the machine's, so a
        restarted node sees what the previous one mounted)."""
        return ("nsenter", f"--net=/var/run/netns/{self.netns}")

    def create(self) -> None:
        self.delete()
        veth = f"pkmnv{self.index}"
        _ip("netns", "add", self.netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        _ip("link", "set", veth, "master", BRIDGE, "up")
        _ip("-n", self.netns, "addr", "add", f"{self.address}/24", "dev", "eth0")
        _ip("-n", self.netns, "link", "set", "eth0", "up")
        _ip("-n", self.netns, "link", "set", "lo", "up")
        _ip("-n", self.netns, "route", "add", "default", "via", HOST_IP)

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "delete", self.netns], capture_output=True, timeout=30)
