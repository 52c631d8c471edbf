import asyncio
import logging
import re

import pytest

from shared.tasks.retry import Backoff, keep_running, until_done


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_first_failure_restarts_at_once_then_doubles_to_cap():
    clock = Clock()
    b = Backoff(10, 40, clock)
    assert b.remaining("k", clock.t) == 0
    delays = []
    for _ in range(5):
        b.next("k", clock.t)
        delays.append(b.current("k"))
    assert delays == [10, 20, 40, 40, 40]
    assert b.remaining("k", clock.t) == 40
    clock.t += 15
    assert b.remaining("k", clock.t - 15) == 25


def test_entry_expires_after_twice_the_cap():
    clock = Clock()
    b = Backoff(10, 40, clock)
    b.next("k", clock.t)
    b.next("k", clock.t)
    clock.t += 81
    b.next("k", clock.t)
    assert b.current("k") == 10


def test_forget_by_prefix():
    b = Backoff(10, 40)
    b.next("pod1/a", 1)
    b.next("pod2/a", 1)
    b.forget("pod1/")
    assert b.current("pod1/a") == 0 and b.current("pod2/a") == 10


async def test_until_done_retries_with_growing_capped_delays_and_says_so(caplog):

    calls = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 5:
            raise ConnectionError("refused")
        return "up"

    with caplog.at_level(logging.WARNING):
        assert await until_done("connecting to the thing", flaky, logging.getLogger("t"),
                                initial=0.01, cap=0.03) == "up"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4 and all(line.startswith("connecting to the thing failed: refused; retrying in ")
                                   for line in lines)
    delays = [float(re.search(r"retrying in ([\d.]+)s", line).group(1)) for line in lines]
    assert delays[0] < 0.02 and max(delays) <= 0.03


async def test_until_done_gives_up_at_its_timeout_and_never_retries_other_errors():

    async def down() -> None:
        raise ConnectionError("still down")

    with pytest.raises(ConnectionError, match="still down"):
        await until_done("x", down, logging.getLogger("t"), initial=0.01, cap=0.02, timeout=0.1)

    calls = []

    async def broken() -> None:
        calls.append(1)
        raise ValueError("a defect")

    with pytest.raises(ValueError):
        await until_done("x", broken, logging.getLogger("t"), initial=0.01, retry_on=(ConnectionError,))
    assert calls == [1]


async def test_keep_running_backs_off_on_failures_and_starts_over_after_a_healthy_run(caplog):

    runs: list[float] = []

    async def watch() -> None:
        runs.append(asyncio.get_running_loop().time())
        if len(runs) == 4:
            await asyncio.sleep(1.0)  # ran well this time
        if len(runs) == 6:
            await asyncio.Event().wait()
        raise OSError("stream reset")

    task = asyncio.create_task(keep_running("watching pods", watch, logging.getLogger("t"),
                                            initial=0.1, cap=5.0, healthy_after=0.75))
    while len(runs) < 6:
        await asyncio.sleep(0.01)
    task.cancel()
    # Delays of 0.1, 0.2 and 0.4 s, then 0.1 again: a loaded machine's jitter of up to 0.3 s
    # cannot turn the comparisons round.
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    assert gaps[0] < gaps[2], f"back-off grows: {gaps}"
    assert gaps[4] < gaps[2], f"and starts over after a healthy run: {gaps}"
    assert "watching pods failed after running 1s: stream reset; starting it again" in caplog.text


def test_an_api_error_is_described_with_its_message_in_one_line():
    from shared.api.client import ApiError
    from shared.tasks.retry import describe

    exc = ApiError(404, "NotFound", "Node n1 does not exist and registerNode is false: create it, or set "
                                    "registerNode to true\nmore lines of body")
    assert describe(exc) == ("404 NotFound: Node n1 does not exist and registerNode is false: create it, or set "
                             "registerNode to true")
    assert describe(ApiError(500, "InternalError")) == "500 InternalError"
    assert len(describe(ApiError(409, "Conflict", "x" * 5000))) < 400
