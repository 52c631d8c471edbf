"""configMapAndSecretChangeDetectionStrategy on three nodes of one cluster, one pod each reading
the same configMap as a volume: node-1 watches it (the default), node-2 reads it at every resync
(Get), node-3 keeps what it read for the TTL its Node's node.alpha.kubernetes.io/ttl annotation
gives (Cache), except for a pod it sees for the first time, which reads it afresh."""

from __future__ import annotations

import json
import time

from services.volume.api_objects import NODE_TTL_ANNOTATION
from tests.integration.conftest import wait_for
from tests.multinode.conftest import CHANGE_DETECTION

RESYNC = 10  # the volume service's resync period (services/volume/__main__.py)


def reader(name: str, node: str, image: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": image, "command": ["sleep", "3600"],
                                     "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
                     "volumes": [{"name": "cfg", "configMap": {"name": "detected"}}]}}


def test_each_node_finds_a_config_map_change_its_own_way(cluster):
    assert CHANGE_DETECTION == {"node-2": "Get", "node-3": "Cache"}
    image = next(iter(cluster.nodes.values())).image("busybox")
    cluster.kubectl("annotate", "node", "node-3", f"{NODE_TTL_ANNOTATION}=3600", "--overwrite")
    cluster.kubectl("create", "configmap", "detected", "--from-literal=greeting=one")
    pods = {"watch": "node-1", "get": "node-2", "cache": "node-3"}
    try:
        for name, node in pods.items():
            cluster.kubectl("apply", "-f", "-", input_text=json.dumps(reader(name, node, image)))

        def greeting(name: str) -> str:
            pod = cluster.get("pod", name)
            code, out = cluster.nodes[pods.get(name, "node-3")].exec(pod["metadata"]["uid"], "app",
                                                                    ["cat", "/cfg/greeting"])
            assert code == 0, out
            return out

        for name in pods:
            wait_for(lambda name=name: cluster.get("pod", name).get("status", {}).get("phase") == "Running", 120,
                     f"pod {name} Running")
            assert greeting(name) == "one"

        cluster.kubectl("patch", "configmap", "detected", "-p", '{"data":{"greeting":"two"}}')
        changed = time.monotonic()
        wait_for(lambda: greeting("watch") == "two", 20, "the watched change on node-1")
        wait_for(lambda: greeting("get") == "two", RESYNC * 2 + 10, "the change read at a resync on node-2")
        # node-3 keeps what it read for an hour: a resync later, still the old value.
        time.sleep(max(0.0, changed + RESYNC + 2 - time.monotonic()))
        assert greeting("cache") == "one", "read again within the Node's TTL"

        # A pod node-3 has not seen reads the configMap afresh, and the pod before it follows.
        pods["cache-new"] = "node-3"
        cluster.kubectl("apply", "-f", "-", input_text=json.dumps(reader("cache-new", "node-3", image)))
        wait_for(lambda: cluster.get("pod", "cache-new").get("status", {}).get("phase") == "Running", 120,
                 "pod cache-new Running")
        assert greeting("cache-new") == "two"
        wait_for(lambda: greeting("cache") == "two", RESYNC * 2 + 10, "the older pod on node-3 to follow")
    finally:
        cluster.kubectl("delete", "pod", *pods, "--wait=true", "--ignore-not-found", timeout=90)
        cluster.kubectl("delete", "configmap", "detected", "--ignore-not-found")
        cluster.kubectl("annotate", "node", "node-3", f"{NODE_TTL_ANNOTATION}-")
