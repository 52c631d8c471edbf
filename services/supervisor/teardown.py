"""Removing every pod pykubelet created, straight through CRI (used when a local node stops)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from pathlib import Path

from cri_api.v1 import api_pb2 as cri

from shared.host.cni import BRIDGE, CONFLIST_NAME, cni_conf_dir
from shared.host.mounts import unmount_all_under
from shared.host.propagation import release_rshared
from shared.host.safe_paths import UnsafePath, beneath
from shared.runtime.cri import CRIClient, CRIError
from shared.runtime.cri.labels import MANAGED_BY, pod_log_dir

log = logging.getLogger(__name__)

MANAGED_LABEL = {MANAGED_BY: "true"}


async def remove_all_pods(endpoint: str, grace: int = 10, labels: dict[str, str] | None = None,
                          pod_logs_dir: str | None = None) -> int:
    """labels: which pods (default: the ones pykubelet created); pod_logs_dir: remove their
    container logs there too, as removing a pod does."""
    labels = MANAGED_LABEL if labels is None else labels
    cri = CRIClient(endpoint, timeout=30)
    try:
        containers = await cri.list_containers(labels)
        await asyncio.gather(*(cri.stop_container(c.id, grace) for c in containers if c.state == 1),
                             return_exceptions=True)
        sandboxes = await cri.list_pod_sandbox(labels)
        for sb in sandboxes:
            try:
                await cri.stop_pod_sandbox(sb.id)
                await cri.remove_pod_sandbox(sb.id)
                if pod_logs_dir:
                    _remove_logs(pod_logs_dir, sb.metadata)
            except CRIError as exc:
                log.warning("could not remove sandbox %s: %s", sb.id[:13], exc)
        return len(sandboxes)
    finally:
        await cri.close()


def _remove_logs(pod_logs_dir: str, md: cri.PodSandboxMetadata) -> None:
    try:
        shutil.rmtree(beneath(Path(pod_logs_dir), Path(pod_log_dir("", md.namespace, md.name, md.uid)).name),
                      ignore_errors=True)
    except UnsafePath as exc:
        log.warning("not removing the logs of sandbox %s: %s", md.name, exc)


def remove_bridge(name: str) -> None:
    """The pod bridge outlives its pods; remove it so the next node starts from a clean host."""
    if subprocess.run(["ip", "link", "show", name], capture_output=True, timeout=10).returncode == 0:
        subprocess.run(["ip", "link", "delete", name], capture_output=True, timeout=10)


async def teardown_node(root: Path, endpoint: str, pod_logs_dir: str, timeout: float = 120.0) -> None:
    """What stopping a node removes: every pod it created (with their logs), whatever is still
    mounted under its pod and plugin directories, the root dir's shared bind mount
    (shared/host/propagation.py) and the pod bridge of pykubelet's own network. Problems are logged; the
    stop goes on."""
    try:
        n = await asyncio.wait_for(remove_all_pods(endpoint, pod_logs_dir=pod_logs_dir), timeout)
        log.info("removed %d pod sandbox(es)", n)
    except Exception as exc:
        log.warning("could not remove the pods: %s", exc)
    for problem in unmount_all_under(root / "pods") + unmount_all_under(root / "plugins"):
        log.warning("could not unmount %s", problem)
    release_rshared(root)
    if (cni_conf_dir(root) / CONFLIST_NAME).exists():  # not when the pods had a CNI agent's network
        remove_bridge(BRIDGE)
