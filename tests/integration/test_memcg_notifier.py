"""The kernel's side of kernelMemcgNotification (services/eviction/memcg_notifier.py): a
threshold registered on a real cgroup v1 memory cgroup is signalled when a process in it
allocates past it, and not before."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from services.eviction.memcg_notifier import MemcgNotifier, Target
from shared.host.cgroups import CgroupReader

MEMORY = Path("/sys/fs/cgroup/memory")
MIB = 2**20
# Allocates and touches n MiB when told to on stdin, then waits to be killed.
HOG = "import sys; sys.stdin.readline(); b = bytearray({mib} << 20); print('allocated', flush=True); sys.stdin.read()"


@pytest.fixture
def memcg():
    if not (MEMORY / "cgroup.event_control").exists():
        pytest.fail(f"{MEMORY} is not a cgroup v1 memory hierarchy with memory thresholds "
                    "(cgroup.event_control): kernelMemcgNotification cannot be tested on this host")
    d = MEMORY / f"pykubelet-test-memcg-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    try:
        yield d
    finally:
        for _ in range(50):
            try:
                d.rmdir()
                break
            except OSError:
                subprocess.run(["sleep", "0.1"])


async def test_the_kernel_signals_a_crossed_threshold(memcg):
    crossed = asyncio.Event()
    messages: list[str] = []

    def on_crossed(message: str) -> None:
        messages.append(message)
        crossed.set()

    notifier = MemcgNotifier(CgroupReader(), on_crossed)
    hog = subprocess.Popen([sys.executable, "-c", HOG.format(mib=48)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        (memcg / "cgroup.procs").write_text(str(hog.pid))
        notifier.refresh(lambda: [Target("hard memory eviction threshold", f"/{memcg.name}", 32 * MIB)])
        await asyncio.sleep(0.5)
        assert not crossed.is_set(), "signalled before the process allocated anything"
        assert hog.stdin is not None and hog.stdout is not None
        hog.stdin.write("go\n")
        hog.stdin.flush()
        assert await asyncio.to_thread(hog.stdout.readline) == "allocated\n"
        await asyncio.wait_for(crossed.wait(), 10)
        assert messages[0] == "eviction manager: hard memory eviction threshold crossed"
    finally:
        notifier.close()
        hog.kill()
        hog.wait(timeout=10)
