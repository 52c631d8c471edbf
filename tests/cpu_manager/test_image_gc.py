"""Image garbage collection on this package's node (tests/cpu_manager/conftest.py), whose image
filesystem is a small tmpfs of its own: past imageGCHighThresholdPercent, unused images go until
the filesystem is down to imageGCLowThresholdPercent, and an image no one has used for
imageMaximumGCAge goes whatever the disk."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Callable

from services.pod_sync.disk_gc import gc_period
from tests.cpu_manager.conftest import GC_HIGH, GC_LOW, MAX_IMAGE_AGE
from tests.integration.conftest import wait_for
from tests.integration.slow_registry import distinct_images

GC_EVERY = gc_period(MAX_IMAGE_AGE)
PADDING = 3 * 2**20  # bytes of random data in each image the threshold test fills the disk with
REMOVED = re.compile(r"image GC \((?P<trigger>[^)]+)\): removed (?P<name>\S+) \((?P<size>\d+) bytes\)")
FREEING = re.compile(r"image filesystem \d+% full \(imageGCHighThresholdPercent \d+\): freeing (?P<goal>\d+) bytes")


def images(node) -> dict[str, int]:
    """Each tag the runtime lists, with its image's size as image GC counts it."""
    return {tag: img.size for img in node.runtime(lambda cri: cri.list_images()) for tag in img.repo_tags}


def image_tags(node) -> list[list[str]]:
    return [list(img.repo_tags) for img in node.runtime(lambda cri: cri.list_images())]


def pod_sync_log(node) -> Callable[[], list[str]]:
    """A function giving the messages pod-sync (logging JSON) logged after this call."""
    path = node.root / "logs" / "pod-sync.log"
    start = path.stat().st_size

    def since() -> list[str]:
        messages = []
        for line in path.read_bytes()[start:].decode(errors="replace").splitlines():
            try:
                messages.append(json.loads(line)["msg"])
            except ValueError:
                continue  # the line being written
        return messages
    return since


def removed_by(messages: list[str], trigger: str) -> dict[str, int]:
    return {m["name"]: int(m["size"]) for m in map(REMOVED.search, messages) if m and m["trigger"] == trigger}


def sleeper(image: str) -> dict:
    return {"containers": [{"name": "app", "image": image, "command": ["sleep", "3600"]}]}


def test_an_image_unused_for_image_maximum_gc_age_is_removed_whatever_the_disk(pods):
    """imageMaximumGCAge 20 s on a disk far below the high threshold: the image of a deleted pod
    goes about that long after the pod, not sooner; the image of a running pod stays."""
    kept, gone = (f"{pods.registry}/{repo}:1.0" for repo in distinct_images(pods.registry, "aged", 2))
    pods.write_pod("aged-kept", sleeper(kept))
    path = pods.write_pod("aged-gone", sleeper(gone))
    pods.wait_running("aged-kept")
    pods.wait_running("aged-gone")
    logged = pod_sync_log(pods)
    path.unlink()
    wait_for(lambda: pods.pod("aged-gone") is None, 60, "the deleted pod gone")
    unused = time.monotonic()
    # Image GC last saw it in use at most one round before the pod went.
    time.sleep(MAX_IMAGE_AGE - GC_EVERY - 2)
    assert gone in images(pods), f"{gone} went before it was unused for imageMaximumGCAge"
    wait_for(lambda: gone not in images(pods), MAX_IMAGE_AGE + 2 * GC_EVERY + 20, f"{gone} removed")
    took = time.monotonic() - unused
    assert took <= MAX_IMAGE_AGE + 2 * GC_EVERY + 5, f"removed {took:.0f}s after its pod went"
    assert gone in removed_by(logged(), "image max age"), logged()[-20:]
    assert kept in images(pods), "the running pod's image was removed"


def test_past_the_high_threshold_unused_images_go_until_the_low_one(pods):
    """Thresholds 41% and 40% of a 256 MiB image filesystem: three unused images of ~4 MB sit
    there while it is 20-30% full, and stay. A file then fills it to a little more than 41%:
    image GC frees (by the images' sizes, least recently used first) what is over 40% and stops
    there, so one of the three is left; the running pod's image and the sandbox image stay."""
    running = f"{pods.registry}/{distinct_images(pods.registry, 'gc-used', 1)[0]}:1.0"
    pods.write_pod("gc-used", sleeper(running))
    pods.wait_running("gc-used")
    # Earlier tests' images go once unused for imageMaximumGCAge. Then nothing but the three
    # frees the disk while the test measures it.
    wait_for(lambda: all(running in tags or any("pause" in t for t in tags) for tags in image_tags(pods)),
             MAX_IMAGE_AGE + 2 * GC_EVERY + 20, "only the running pod's and the sandbox image left")
    unused = [f"{pods.registry}/{repo}:1.0" for repo in distinct_images(pods.registry, "gc-unused", 3, PADDING)]
    for ref in unused:
        pods.runtime(lambda cri, r=ref: cri.pull_image(r))
    logged = pod_sync_log(pods)
    time.sleep(GC_EVERY + 1)  # image GC has seen them, and they are older than imageMinimumGCAge
    sizes = images(pods)
    imagefs = pods.root / "containerd"
    st = os.statvfs(imagefs)
    capacity, used = st.f_blocks * st.f_frsize, (st.f_blocks - st.f_bavail) * st.f_frsize
    assert used < capacity * GC_HIGH // 100, f"the image filesystem is {used * 100 / capacity:.0f}% full already"
    assert not removed_by(logged(), "image GC"), "image GC removed images below its high threshold"

    # The goal: one and a half of the unused images, which is more than the 1% between the thresholds.
    goal = min(sizes[r] for r in unused) * 3 // 2
    assert goal > capacity // 100, (goal, capacity)
    filler = imagefs / "filler"
    try:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, capacity * GC_LOW // 100 + goal - used)
        finally:
            os.close(fd)
        wanted = int(wait_for(lambda: next((m["goal"] for m in map(FREEING.search, logged()) if m), None),
                              GC_EVERY * 2 + 10, "image GC to start past the high threshold"))
        wait_for(lambda: sum(removed_by(logged(), "image GC").values()) >= wanted
                 or any(m.startswith("image GC: freed") for m in logged()), 30, "image GC to finish")
        removed = removed_by(logged(), "image GC")
        present = images(pods)
        st = os.statvfs(imagefs)
        after = (st.f_blocks - st.f_bavail) * st.f_frsize
    finally:
        filler.unlink(missing_ok=True)
    assert abs(wanted - goal) < 2**20, f"image GC wanted {wanted} bytes freed; the disk was filled for {goal}"
    # Least recently used first, one at a time until the goal is met: the last one removed
    # reached it, so without the largest of them it was not yet reached.
    assert sum(removed.values()) >= wanted > sum(removed.values()) - max(removed.values()), (wanted, removed)
    assert set(removed) < set(unused), f"removed {sorted(removed)}; unused were {unused}"
    assert after <= capacity * GC_LOW // 100, f"still {after * 100 / capacity:.1f}% full after image GC"
    assert not set(removed) & set(present), f"logged as removed but still there: {set(removed) & set(present)}"
    assert running in present, "the running pod's image was removed"
    assert any("pause" in tag for tag in present), f"the sandbox image was removed: {sorted(present)}"
