"""The node's kube API budget holds across processes, not per process."""

from __future__ import annotations

import multiprocessing
import struct
import time

import pytest

from shared.api.budget import SharedTokenBucket

QPS, BURST, RUN_FOR, PROCESSES = 40.0, 10, 1.0, 4


def _take_all_you_can(path, results, begin: float) -> None:
    """From `begin` (CLOCK_MONOTONIC, the same in every process) for RUN_FOR seconds: one window
    for all, however late a loaded machine starts a process."""
    bucket = SharedTokenBucket(path, QPS, BURST)
    time.sleep(max(0.0, begin - time.monotonic()))
    taken, deadline = 0, begin + RUN_FOR
    while time.monotonic() < deadline:
        wait = bucket.try_take()
        if wait == 0:
            taken += 1
        else:
            time.sleep(min(wait, 0.005))
    results.put(taken)


def test_processes_share_one_budget(tmp_path):
    """Four processes, each asking as fast as it can: together they get the burst plus qps a
    second, as one kubelet would, not four times that."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    path = tmp_path / "run" / "kube-api-budget"
    SharedTokenBucket(path, QPS, BURST).close()
    begin = time.monotonic() + 1.0  # time for every process to start
    procs = [ctx.Process(target=_take_all_you_can, args=(path, results, begin)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=30)
    counts = [results.get(timeout=5) for _ in procs]
    allowed = BURST + QPS * RUN_FOR
    assert sum(counts) <= allowed + QPS * 0.2, f"{counts} exceed the node's budget of ~{allowed:.0f}"
    assert sum(counts) >= allowed * 0.7, f"{counts}: the budget is not used"
    assert all(c > 0 for c in counts), f"{counts}: a process was starved"


async def test_acquire_waits_for_a_token(tmp_path):
    bucket = SharedTokenBucket(tmp_path / "budget", qps=20, burst=2)
    start = time.monotonic()
    for _ in range(6):
        await bucket.acquire()
    # Two at once, then four at 20/s.
    assert time.monotonic() - start == pytest.approx(0.2, abs=0.08)


def test_a_nonsense_budget_is_refused(tmp_path):
    with pytest.raises(ValueError, match="qps > 0"):
        SharedTokenBucket(tmp_path / "budget", qps=0, burst=1)


@pytest.mark.parametrize("content", [b"", b"garbage", struct.pack("dd", float("nan"), 0.0),
                                     struct.pack("dd", float("inf"), float("inf")),
                                     struct.pack("dd", -1e300, 0.0), struct.pack("dd", 5.0, 1e300)])
def test_a_damaged_budget_file_starts_a_full_bucket(tmp_path, content):
    path = tmp_path / "budget"
    path.write_bytes(content)
    bucket = SharedTokenBucket(path, qps=10, burst=3)
    assert [bucket.try_take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert 0 < bucket.try_take() <= 0.1
