"""localStorageCapacityIsolation false on a node of its own: the node has no ephemeral-storage to
give (a pod requesting some is rejected OutOfephemeral-storage, capacity 0, as by the kubelet),
and no local storage limit is enforced: a pod past its emptyDir sizeLimit keeps running through
an eviction cycle that would have evicted it (tests/eviction/test_pressure.py shows the default)."""

from __future__ import annotations

import time

from services.eviction.manager import MONITORING_PERIOD
from tests.integration.conftest import launch_node, stop_node, wait_for


def test_without_local_storage_isolation_nothing_requests_or_limits_local_storage(tmp_path):
    (tmp_path / "node").mkdir()
    node = launch_node(tmp_path / "node", extra_config="localStorageCapacityIsolation: false\n")
    try:
        busybox = node.image("busybox")
        node.write_pod("asks-disk", {"containers": [{"name": "app", "image": busybox, "command": ["sleep", "3600"],
                                                     "resources": {"requests": {"ephemeral-storage": "1Mi"}}}]})
        rejected = node.wait_pod("asks-disk", lambda p: p["phase"] == "Failed", 30, "the rejection")
        assert rejected["status"]["reason"] == "OutOfephemeral-storage"
        assert rejected["status"]["message"] == ("Pod was rejected: Node didn't have enough resource: "
                                                 f"ephemeral-storage, requested: {2**20}, used: 0, capacity: 0")

        node.write_pod("fills-dir", {
            "containers": [{"name": "app", "image": busybox, "command": ["sh", "-c",
                            "dd if=/dev/zero of=/scratch/fill bs=1M count=4 && sleep 3600"],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}]})
        uid = node.wait_running("fills-dir")["uid"]

        def over_its_limit():
            return next((v for v in node.admin_get("volume", "/volumes", timeout=5).json()
                         if v["podUID"] == uid and v["name"] == "scratch" and v["usedBytes"] >= 4 * 2**20), None)
        wait_for(over_its_limit, 30, "the volume service to measure the 4 MiB in the 1 MiB emptyDir")
        log = node.root / "logs" / "eviction.log"
        assert "localStorageCapacityIsolation false: emptyDir sizeLimit and ephemeral-storage limits are not " \
               "enforced" in log.read_text()
        # A whole eviction cycle with the usage known: with the field true, the first such cycle
        # evicts the pod (tests/eviction/test_pressure.py).
        time.sleep(1.5 * MONITORING_PERIOD)
        pod = node.pod("fills-dir")
        assert pod is not None and pod["phase"] == "Running", pod
        assert "Usage of EmptyDir volume" not in log.read_text()
    finally:
        stop_node(node)
