"""A node that defends itself: memory, disk and local-storage limits, on real containerd with
real pressure, seen through kubectl as a user sees it."""

from __future__ import annotations

import time
from datetime import datetime

import yaml
from sqlalchemy import select

from shared.runtime.images.build import ImageSpec, build_image
from shared.runtime.images.registry import push_image
from shared.store import DiskReclaim, PodEviction
from tests.eviction.conftest import (
    DISK_THRESHOLD_MIB,
    MAX_POD_GRACE,
    MEMORY_MIN_RECLAIM,
    MIB,
    SOFT_GRACE,
    TRANSITION_SECONDS,
    memory_available,
    pids_available,
    pod_json,
)
from tests.integration.conftest import NODE_NAME, POD_PIDS_LIMIT, wait_for

STEP_MIB = 50


def hog_command(total_mib: int) -> list[str]:
    """Grow by STEP_MIB every 0.2 s up to total_mib and hold it: each dd keeps its buffer while it
    waits to write into a pipe nobody reads."""
    steps = max(1, total_mib // STEP_MIB)
    return ["sh", "-c", f"i=0; while [ $i -lt {steps} ]; do dd if=/dev/zero bs={STEP_MIB}M count=1 2>/dev/null "
                        f"| sleep 3600 & i=$((i+1)); sleep 0.2; done; sleep 3600"]


def ki(quantity: str) -> int:
    """Bytes of a Node quantity the kubelet writes in Ki."""
    return int(quantity.removesuffix("Ki")) * 1024


def phase(pod: dict | None) -> str:
    return (pod or {}).get("status", {}).get("phase", "")


def wait_evicted(cluster, name: str, condition: str, what: str) -> tuple[dict, bool]:
    """Wait for the pod to be Failed; (the pod, whether the Node showed the condition meanwhile)."""
    seen = []

    def evicted():
        if cluster.condition(condition)["status"] == "True":
            seen.append(True)
        p = cluster.pod(name)
        return phase(p) == "Failed" and p
    return wait_for(evicted, 180, what), bool(seen)


def wait_condition(cluster, ctype: str, status: str, timeout: float) -> dict:
    return wait_for(lambda: (c := cluster.condition(ctype))["status"] == status and c, timeout,
                    f"the Node's {ctype} condition to be {status}")


def test_memory_hog_is_evicted_and_guaranteed_pod_untouched(pressure_cluster):
    c = pressure_cluster
    busybox = c.node.image("busybox")
    c.create_pod("steady", {"containers": [{"name": "app", "image": busybox, "command": ["sleep", "3600"],
                                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                          "limits": {"cpu": "100m", "memory": "64Mi"}}}]})
    c.wait_pod("steady", lambda p: phase(p) == "Running", 60)
    assert c.condition("MemoryPressure")["status"] == "False"
    # Allocatable keeps the hard thresholds out, as the kubelet reports it.
    status = c.node_obj()["status"]
    assert ki(status["capacity"]["memory"]) - ki(status["allocatable"]["memory"]) in range(
        c.memory_threshold - 1024, c.memory_threshold + 1024)
    assert ki(status["capacity"]["ephemeral-storage"]) - int(status["allocatable"]["ephemeral-storage"]) in range(
        DISK_THRESHOLD_MIB * MIB - 1024, DISK_THRESHOLD_MIB * MIB + 1024)
    hog_mib = (memory_available() - c.memory_threshold) // MIB + 300
    c.create_pod("hog", {"containers": [{"name": "hog", "image": busybox, "command": hog_command(hog_mib)}]})
    hog, seen_pressure = wait_evicted(c, "hog", "MemoryPressure", f"the hog ({hog_mib}Mi) to be evicted")
    st = hog["status"]
    assert st["reason"] == "Evicted", pod_json(c, "hog")
    assert st["message"].startswith("The node was low on resource: memory. Container hog was using "), st["message"]
    assert st["message"].endswith(", which exceeds its request of 0. "), st["message"]
    assert all("terminated" in cs["state"] for cs in st["containerStatuses"])
    wait_for(lambda: any(e["reason"] == "Evicted" and e["type"] == "Warning" for e in c.events_of("hog")), 30,
             "an Evicted event on the hog")
    steady = c.pod("steady")["status"]
    assert phase({"status": steady}) == "Running" and steady["containerStatuses"][0]["restartCount"] == 0

    cond = c.condition("MemoryPressure")
    assert seen_pressure or cond["status"] == "True", "MemoryPressure never showed"
    wait_condition(c, "MemoryPressure", "False", TRANSITION_SECONDS + 60)
    # Held for evictionPressureTransitionPeriod after the hog's memory was back (the hog is
    # killed at once: a hard threshold gives no grace).
    cleared = next(x for x in c.eviction_view()["conditions"] if x["type"] == "MemoryPressure")
    hog_end = max(at(cs["state"]["terminated"]["finishedAt"]) for cs in st["containerStatuses"])
    held = (at(cleared["since"]) - hog_end).total_seconds()
    assert held >= TRANSITION_SECONDS - 2, f"MemoryPressure cleared {held:.0f}s after the hog ended"
    node_events = {e["reason"] for e in c.get("events", "--field-selector", "involvedObject.kind=Node")["items"]}
    assert {"NodeHasInsufficientMemory", "NodeHasSufficientMemory"} <= node_events
    assert any(e["pod"] == "default/hog" for e in c.eviction_view()["evictions"])
    # kernelMemcgNotification: the kernel signalled the crossing of the hard memory threshold
    eviction_log = (c.node.root / "logs" / "eviction.log").read_text()
    assert "eviction manager: hard memory eviction threshold crossed" in eviction_log
    status = c.node.status_output()
    assert "memory.available" in status and "evicted default/hog" in status
    c.delete_pods("steady", "hog")


def test_static_pod_is_never_evicted_and_admission_refuses_besteffort_under_memory_pressure(pressure_cluster):
    c = pressure_cluster
    busybox = c.node.image("busybox")
    hog_mib = (memory_available() - c.memory_threshold) // MIB + 300
    c.node.write("static-hog.yaml", yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "static-hog"},
        "spec": {"terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "hog", "image": busybox, "command": hog_command(hog_mib)}]}}))
    try:
        wait_condition(c, "MemoryPressure", "True", 120)
        assert c.condition("MemoryPressure")["reason"] == "KubeletHasInsufficientMemory"
        time.sleep(12)  # more than one housekeeping cycle under pressure
        mirror = c.pod(f"static-hog-{NODE_NAME}")
        assert phase(mirror) == "Running", "a static pod is critical: never evicted"

        c.create_pod("late", {"containers": [{"name": "app", "image": busybox, "command": ["sleep", "3600"]}]})
        late = c.wait_pod("late", lambda p: phase(p) == "Failed", 60, "the BestEffort pod to be refused")
        assert (late["status"]["reason"], late["status"]["message"]) == (
            "Evicted", "The node had condition: [MemoryPressure]. ")
        # A Burstable pod is admitted. With the static hog out of reach it is then the only pod
        # eviction may take, so it may go on to be evicted, as with the kubelet: either way it
        # ran, which a refused pod never does.
        c.create_pod("welcome", {"containers": [{"name": "app", "image": busybox, "command": ["sleep", "3600"],
                                                 "resources": {"requests": {"memory": "16Mi"}}}]})
        welcome = c.wait_pod("welcome", lambda p: any(
            "running" in cs["state"] or "terminated" in cs["state"]
            for cs in p.get("status", {}).get("containerStatuses") or []), 60,
            "a Burstable pod admitted and started under MemoryPressure")
        assert welcome["status"].get("message", "") != "The node had condition: [MemoryPressure]. "
    finally:
        c.node.remove("static-hog.yaml")
    wait_condition(c, "MemoryPressure", "False", TRANSITION_SECONDS + 90)
    c.delete_pods("late", "welcome")


def at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def test_after_a_memory_eviction_the_node_evicts_on_until_the_minimum_reclaim_is_back(pressure_cluster):
    """evictionMinimumReclaim (tests/eviction/conftest.py): a Burstable pod within its request
    holds memory, a BestEffort hog pushes past the threshold. The hog goes first (it exceeds its
    request of 0); what it frees brings memory.available back above the threshold but not
    MEMORY_MIN_RECLAIM above it, so the node evicts the Burstable pod too, as the kubelet does.
    Without a minimum reclaim it would stay."""
    c = pressure_cluster
    busybox = c.node.image("busybox")
    start = memory_available()
    room = start - c.memory_threshold
    hold_mib = (room - MEMORY_MIN_RECLAIM) // MIB + 400  # the hog gone: 400Mi short of the reclaim
    assert room - hold_mib * MIB > 500 * MIB, "the holder alone must not cross the threshold"
    c.create_pod("holder", {"containers": [{"name": "hold", "image": busybox, "command": hog_command(hold_mib),
                                            "resources": {"requests": {"memory": f"{hold_mib + 200}Mi"}}}]})
    c.wait_pod("holder", lambda p: phase(p) == "Running", 60)
    wait_for(lambda: memory_available() < start - (hold_mib - 100) * MIB, 60, f"the holder to hold {hold_mib}Mi")
    hog_mib = (memory_available() - c.memory_threshold) // MIB + 300
    c.create_pod("pusher", {"containers": [{"name": "hog", "image": busybox, "command": hog_command(hog_mib)}]})
    pusher, _ = wait_evicted(c, "pusher", "MemoryPressure", "the BestEffort hog to be evicted first")
    assert pusher["status"]["reason"] == "Evicted"
    holder = c.pod("holder")
    assert phase(holder) in ("Running", "Failed"), pod_json(c, "holder")
    holder, _ = wait_evicted(c, "holder", "MemoryPressure", "the Burstable pod to be evicted for the minimum reclaim")
    assert holder["status"]["reason"] == "Evicted"
    assert holder["status"]["message"].startswith("The node was low on resource: memory."), holder["status"]
    gone = [e for e in c.eviction_view()["evictions"] if e["pod"] in ("default/holder", "default/pusher")]
    assert [e["pod"] for e in sorted(gone, key=lambda e: e["at"])] == ["default/pusher", "default/holder"], gone
    wait_condition(c, "MemoryPressure", "False", TRANSITION_SECONDS + 60)
    c.delete_pods("holder", "pusher")


def test_a_soft_threshold_evicts_after_its_grace_period_giving_at_most_the_max_pod_grace(pressure_cluster):
    """evictionSoft, evictionSoftGracePeriod and evictionMaxPodGracePeriod (tests/eviction/
    conftest.py) on pid.available: two pods start enough processes to cross the soft threshold.
    PIDPressure shows at once; a pod is evicted only once the threshold has been met for the
    grace period, and is given MAX_POD_GRACE seconds, not its own 120 (its first process ignores
    SIGTERM, so it runs until the kill)."""
    c = pressure_cluster
    busybox = c.node.image("busybox")
    # Each pod 70% of the way to the threshold: one does not cross it, two do.
    forks = (pids_available() - c.pid_soft_threshold) * 7 // 10
    assert 200 < forks < POD_PIDS_LIMIT - 10, f"{forks} processes per pod (the node's threads changed a lot)"
    spawner = f"trap '' TERM; i=0; while [ $i -lt {forks} ]; do sleep 3600 & i=$((i+1)); done; wait"
    names = ("forker-a", "forker-b")
    for name in names:
        c.create_pod(name, {"terminationGracePeriodSeconds": 120, "containers": [
            {"name": "f", "image": busybox, "command": ["sh", "-c", spawner]}]})
    try:
        pressure_since: list[str] = []

        def one_evicted():
            view = c.eviction_view()
            cond = next((x for x in view["conditions"] if x["type"] == "PIDPressure"), None)
            if cond is not None and cond["status"] in (True, "True") and not pressure_since:
                pressure_since.append(cond["since"])
            done = [p for p in map(c.pod, names) if phase(p) == "Failed"]
            return done[0] if done else None
        victim = wait_for(one_evicted, 180, "a forker to be evicted for pid.available")
        assert pressure_since, "PIDPressure never showed before the eviction"
        st = victim["status"]
        assert (st["reason"], st["message"]) == ("Evicted", "The node was low on resource: pids. "), st
        name = victim["metadata"]["name"]
        decided = at(next(e["at"] for e in c.eviction_view()["evictions"] if e["pod"] == f"default/{name}"))
        waited = (decided - at(pressure_since[0])).total_seconds()
        assert waited >= SOFT_GRACE - 1, f"evicted {waited:.0f}s after the soft threshold was met"
        finished = at(st["containerStatuses"][0]["state"]["terminated"]["finishedAt"])
        given = (finished - decided).total_seconds()
        assert given <= MAX_POD_GRACE + 10, f"the pod ran {given:.0f}s after its eviction"
        # One pod's processes were enough: the other runs on.
        other = c.pod(next(n for n in names if n != name))
        assert phase(other) == "Running", pod_json(c, other["metadata"]["name"])
    finally:
        c.kubectl("delete", "pod", *names, "--grace-period=1", "--wait=false", "--ignore-not-found")
        wait_for(lambda: not any(c.pod(n) for n in names), 90, "the forkers to be deleted")
    wait_condition(c, "PIDPressure", "False", TRANSITION_SECONDS + 60)


def nodefs_available(c) -> int:
    """What the node's filesystem has free now (the eviction view's figure may be a cycle old)."""
    import os

    st = os.statvfs(c.node.root)
    return st.f_bavail * st.f_frsize


def _pushed_bulky_image(c) -> str:
    """An image of about 100 MiB of incompressible data, pushed to the node's registry."""
    import os
    import tempfile

    with tempfile.NamedTemporaryFile(delete=False) as f:
        for _ in range(100):
            f.write(os.urandom(MIB))
    try:
        built = build_image(ImageSpec("pykubelet/bulky", "1.0", ["sh"], binaries={"data/bulk": f.name},
                                      modes={"data/bulk": 0o644}), applets=[])
        return push_image(c.node.registry, built)
    finally:
        os.unlink(f.name)


def test_disk_pressure_collects_unused_images_first_then_evicts(pressure_cluster):
    c = pressure_cluster
    ref = _pushed_bulky_image(c)
    # Pulled by the node for a pod that is then gone: an unused image, older than
    # imageMinimumGCAge (1s here) by the time the disk fills.
    c.create_pod("bulky-user", {"restartPolicy": "Never", "containers": [
        {"name": "once", "image": ref, "command": ["/bin/busybox", "true"]}]})  # no applet links in it
    c.wait_pod("bulky-user", lambda p: p.get("status", {}).get("phase") == "Succeeded", 120, "the bulky pod to run")
    c.delete_pods("bulky-user")
    time.sleep(2)
    images = c.node.runtime(lambda cri: cri.list_images())
    bulky = next(i for i in images if any("bulky" in t for t in i.repo_tags))
    available = nodefs_available(c)
    # Past the threshold by more than the unused image gives back: reclaim is not enough.
    fill_mib = (available // MIB) - DISK_THRESHOLD_MIB + 2 * bulky.size // MIB + 150
    c.create_pod("filler", {"volumes": [{"name": "scratch", "emptyDir": {}}], "containers": [{
        "name": "filler", "image": c.node.image("busybox"), "volumeMounts": [{"name": "scratch", "mountPath": "/d"}],
        "command": ["sh", "-c", f"dd if=/dev/zero of=/d/fill bs=1M count={fill_mib}; sync; sleep 3600"]}]})
    filler, seen_pressure = wait_evicted(c, "filler", "DiskPressure", f"the filler ({fill_mib}Mi) to be evicted")
    assert filler["status"]["reason"] == "Evicted"
    assert filler["status"]["message"].startswith("The node was low on resource: ephemeral-storage. ")
    left = [t for i in c.node.runtime(lambda cri: cri.list_images()) for t in i.repo_tags]
    assert not any("bulky" in t for t in left), f"the unused image is still there: {left}"
    store = c.store()
    try:
        with store.session() as s:
            reclaim = s.get(DiskReclaim, 1)
            decision = s.scalars(select(PodEviction).where(PodEviction.name == "filler")).one()
        assert any("bulky" in name for name in reclaim.images_removed) or reclaim.answered_sequence > 0
        assert reclaim.finished_at <= decision.decided_at, "images are collected before anyone is evicted"
    finally:
        store.close()
    assert seen_pressure or c.condition("DiskPressure")["status"] == "True", "DiskPressure never showed"
    # The evicted pod's emptyDir is removed (it stays Failed): the disk comes back.
    wait_condition(c, "DiskPressure", "False", TRANSITION_SECONDS + 90)
    assert nodefs_available(c) > DISK_THRESHOLD_MIB * MIB
    assert c.signal("nodefs.available")["hard"]["threshold"] == f"{DISK_THRESHOLD_MIB}Mi"
    c.delete_pods("filler")


def test_local_storage_limits_evict_with_the_kubelets_message(pressure_cluster):
    c = pressure_cluster
    busybox = c.node.image("busybox")
    scratch = [{"name": "scratch", "emptyDir": {"sizeLimit": "20Mi"}}]
    mount = [{"name": "scratch", "mountPath": "/d"}]
    c.create_pod("over-dir", {"volumes": scratch, "containers": [{
        "name": "app", "image": busybox, "volumeMounts": mount,
        "command": ["sh", "-c", "dd if=/dev/zero of=/d/f bs=1M count=30; sleep 3600"]}]})
    c.create_pod("under-dir", {"volumes": scratch, "containers": [{
        "name": "app", "image": busybox, "volumeMounts": mount,
        "command": ["sh", "-c", "dd if=/dev/zero of=/d/f bs=1M count=5; sleep 3600"]}]})
    c.create_pod("over-container", {"containers": [
        {"name": "writer", "image": busybox, "resources": {"limits": {"ephemeral-storage": "20Mi"}},
         "command": ["sh", "-c", "dd if=/dev/zero of=/tmp/f bs=1M count=30; sleep 3600"]},
        {"name": "idle", "image": busybox, "resources": {"limits": {"ephemeral-storage": "100Mi"}},
         "command": ["sleep", "3600"]}]})
    over = c.wait_pod("over-dir", lambda p: phase(p) == "Failed", 90, "the pod past its emptyDir sizeLimit evicted")
    assert (over["status"]["reason"], over["status"]["message"]) == (
        "Evicted", 'Usage of EmptyDir volume "scratch" exceeds the limit "20Mi". ')
    writer = c.wait_pod("over-container", lambda p: phase(p) == "Failed", 90,
                        "the pod past a container's ephemeral-storage limit evicted")
    assert (writer["status"]["reason"], writer["status"]["message"]) == (
        "Evicted", 'Container writer exceeded its local ephemeral storage limit "20Mi". ')
    assert phase(c.pod("under-dir")) == "Running"
    c.delete_pods("over-dir", "under-dir", "over-container")
