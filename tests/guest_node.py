"""A pykubelet node installed as systemd units in a guest (systemd-nspawn in tests/deploy, qemu in
tests/vm): the demo images pushed to the guest's own registry, static pods written into its
manifest directory, and what `pykubelet status` says of them. `machine` is anything with
run(*cmd, check=, timeout=, input=) that runs a command in the guest."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PY = f"{REPO}/.venv/bin/python" if (REPO / ".venv").exists() else sys.executable
REGISTRY = "127.0.0.1:5000"  # Debian's docker-registry, running in the guest
ROOT_DIR = "/var/lib/pykubelet"
MANIFESTS = "/etc/kubernetes/manifests"

PUSH = f"""
from shared.runtime.images.build import IMAGES, build_image, busybox_applets
from shared.runtime.images.registry import push_image, wait_for_registry
wait_for_registry("{REGISTRY}")
applets = busybox_applets()
for key in ("pause", "web", "busybox"):
    print(push_image("{REGISTRY}", build_image(IMAGES[key], applets)))
"""


def push_images(machine, timeout: float = 180) -> None:
    machine.run(PY, "-c", PUSH, timeout=timeout)


def install_args(hostname: str, node_ip: str, *extra: str) -> list[str]:
    return [PY, "-m", "services.cli.main", "install", "--python", PY, "--pod-cidr", "10.88.0.0/24",
            "--pod-infra-container-image", f"{REGISTRY}/pykubelet/pause:3.9",
            "--hostname-override", hostname, "--node-ip", node_ip, *extra]


def write_static_pod(machine, name: str, spec: dict) -> None:
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    machine.run("sh", "-c", f"cat > {MANIFESTS}/{name}.yaml", input=yaml.safe_dump(manifest))


def web_spec() -> dict:
    return {"terminationGracePeriodSeconds": 2,
            "containers": [{"name": "web", "image": f"{REGISTRY}/pykubelet/web:1.0"}]}


def status(machine) -> dict:
    res = machine.run(PY, "-m", "services.cli.main", "status", "--root-dir", ROOT_DIR, "-o", "json", check=False)
    assert res.returncode in (0, 3, 4), f"pykubelet status failed ({res.returncode}): {res.stderr}"
    return json.loads(res.stdout)


def running_pod(machine, name: str) -> dict | None:
    """The static pod `name` (its mirror name carries the node's) once it and all its containers run."""
    pods = [p for p in status(machine)["pods"] if p["name"].startswith(f"{name}-")]
    if pods and pods[0]["phase"] == "Running" and all(c["state"] == "running" for c in pods[0]["containers"]
                                                      if not c["init"]):
        return pods[0]
    return None
