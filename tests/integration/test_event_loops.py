"""Work a pod makes the node do must not block a service's event loop (the loop watchdog's
records, tests/integration/event_loops.py; every test package's node is checked at teardown)."""

from __future__ import annotations

from tests.integration.conftest import wait_for
from tests.integration.event_loops import assert_loops_never_blocked, records

FILES = 20000  # removing them takes ~0.7 s here: long enough to show on a loop


def test_deleting_a_pod_that_filled_its_volume_with_files_blocks_no_loop(pods):
    since = len(records(pods.root))
    pods.write_pod("many-files", {
        "containers": [{
            "name": "app", "image": pods.image("busybox"),
            "command": ["sh", "-c", f"cd /data && seq 1 {FILES} | xargs touch && touch /data/done"
                                    " && exec sleep 3600"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"},
                             {"name": "data", "mountPath": "/sub", "subPath": "sub"}]}],
        "volumes": [{"name": "data", "emptyDir": {}}],
    })
    uid = pods.wait_running("many-files")["uid"]
    wait_for(lambda: pods.exec(uid, "app", ["test", "-e", "/data/done"])[0] == 0, 60,
             f"the pod to create {FILES} files in its emptyDir")
    pod_dir = pods.root / "pods" / uid
    pods.remove("many-files.yaml")
    wait_for(lambda: not pod_dir.exists(), 90, "the pod's directory (its volumes) to be removed")
    assert_loops_never_blocked(pods.root, since)
