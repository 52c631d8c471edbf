import time

from services.probe import probers
from services.probe.worker import FAILURE, SUCCESS, UNKNOWN, ProbeKey, ProbeWorker, Target
from shared.model.podspec import validate_pod


def container(**probes):
    pod = validate_pod({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i:1", **probes}]}})
    return pod.spec.containers[0]


class Scripted:
    """Feeds a worker a scripted sequence of probe outcomes and records what it reports."""

    def __init__(self, kind, outcomes, startup_done=lambda: True, resumed=None, **probe):
        spec = {"exec": {"command": ["true"]}, "periodSeconds": 1, **probe}
        c = container(**{f"{kind}Probe": spec})
        self.reported = []
        self.worker = ProbeWorker(ProbeKey("u", "default", "p", "c", kind), c, c.probe(kind), None,
                                  self.sink, startup_done, resumed)
        self.outcomes = list(outcomes)

        async def fake(_t):
            return probers.Outcome(probers.SUCCESS if self.outcomes.pop(0) else probers.FAILURE, "boom")
        self.worker._run_probe = fake

    async def sink(self, key, cid, result, message):
        self.reported.append(result)

    async def run(self, n, target=None):
        self.worker.set_target(target or Target("c1", True, time.time() - 100, "10.0.0.1"))
        for _ in range(n):
            await self.worker.probe_once()


async def test_initial_results():
    for kind, initial in (("readiness", FAILURE), ("liveness", SUCCESS), ("startup", UNKNOWN)):
        assert Scripted(kind, []).worker.result == initial


async def test_failure_threshold_needs_consecutive_failures():
    s = Scripted("liveness", [False, False, True, False, False, False], failureThreshold=3)
    await s.run(6)
    assert s.reported == [FAILURE] and s.worker.on_hold


async def test_readiness_success_threshold_and_flapping():
    s = Scripted("readiness", [True, True, False, True, True], successThreshold=2, failureThreshold=1)
    await s.run(5)
    assert s.reported == [SUCCESS, FAILURE, SUCCESS]


async def test_liveness_waits_for_startup():
    started = {"done": False}
    s = Scripted("liveness", [False] * 5, startup_done=lambda: started["done"], failureThreshold=1)
    await s.run(3)
    assert s.reported == [] and len(s.outcomes) == 5  # not even probed
    started["done"] = True
    await s.run(1)
    assert s.reported == [FAILURE]


async def test_initial_delay():
    s = Scripted("liveness", [False], initialDelaySeconds=60, failureThreshold=1)
    await s.run(1, Target("c1", True, time.time(), "10.0.0.1"))
    assert s.reported == [] and s.outcomes == [False]


async def test_new_container_resets_and_readiness_fails_while_not_running():
    s = Scripted("readiness", [True, True])
    await s.run(1)
    assert s.worker.result == SUCCESS
    await s.run(1, Target("c1", False, 0, ""))
    assert s.worker.result == FAILURE
    await s.run(1, Target("c2", True, time.time() - 100, "10.0.0.1"))
    assert s.reported == [SUCCESS, FAILURE, SUCCESS]


async def test_resume_after_restart_keeps_the_stored_result():
    s = Scripted("readiness", [True], resumed=("c1", SUCCESS))
    s.worker.set_target(Target("c1", True, time.time() - 100, "10.0.0.1"))
    assert s.worker.result == SUCCESS  # no flap to Failure after a probe-service restart


async def test_a_stored_result_that_is_no_result_is_not_resumed():
    s = Scripted("readiness", [True], resumed=("c1", "Success; DROP TABLE"))
    s.worker.set_target(Target("c1", True, time.time() - 100, "10.0.0.1"))
    assert s.worker.result == FAILURE, "readiness starts from Failure, as with no stored result"


async def test_probes_due_in_the_same_slot_start_together_on_the_grid(monkeypatch):
    """Workers whose first runs fall due at different moments within one START_GRID slot wait
    for the same deadline, on the grid, so the loop runs them in one pass: few wake-ups under
    load. The deadlines asked for are checked, not the moments the loop woke (a busy machine
    wakes it late)."""
    import asyncio
    import itertools
    import math

    from services.probe import worker as w

    loop = asyncio.get_running_loop()
    # Five first runs due a little apart inside one slot well ahead (the jitter is the knob).
    slot_start = (math.ceil(loop.time() / w.START_GRID) + 5) * w.START_GRID
    offsets = itertools.count(1)
    monkeypatch.setattr(w.random, "uniform", lambda a, b: slot_start + next(offsets) * w.START_GRID / 8
                        - loop.time())
    deadlines: list[float] = []
    real_sleep_until = w._sleep_until

    async def recording_sleep_until(loop, when):
        deadlines.append(when)
        await real_sleep_until(loop, when)
    monkeypatch.setattr(w, "_sleep_until", recording_sleep_until)
    started = []
    tasks = []
    for _ in range(5):
        s = Scripted("readiness", [True] * 5)

        async def once(s=s):
            started.append(s)
        s.worker.probe_once = once
        tasks.append(asyncio.create_task(s.worker.run()))
    await asyncio.sleep(slot_start + 2 * w.START_GRID - loop.time())
    for t in tasks:
        t.cancel()
    assert len(started) == 5, "every worker ran its first probe"
    firsts = deadlines[:5]
    assert len(set(firsts)) == 1, f"one deadline for the slot, not five: {firsts}"
    assert math.isclose(firsts[0], slot_start + w.START_GRID), "the slot's end, on the grid"


async def test_a_probe_passed_with_a_warning_is_a_success_and_told_each_time():
    """The kubelet's ProbeWarning event (an HTTP redirect to another host is not followed)."""
    s = Scripted("liveness", [], failureThreshold=1)
    told = []
    s.worker.on_warning = lambda key, output: told.append((key.kind, output))

    async def warned(_t):
        return probers.Outcome(probers.WARNING, "Probe terminated redirects, Response body: <a>Found</a>.")
    s.worker._run_probe = warned
    await s.run(2)
    assert s.worker.result == SUCCESS and not s.worker.on_hold
    assert told == [("liveness", "Probe terminated redirects, Response body: <a>Found</a>.")] * 2


async def test_the_manager_tells_a_warning_as_the_kubelets_event():
    from services.probe.manager import ProbeManager

    class Events:
        def __init__(self):
            self.told = []

        def pod(self, *event):
            self.told.append(event)

    events = Events()
    manager = ProbeManager(store=None, bus=None, runtime=None, events=events)
    manager._warning(ProbeKey("u", "ns", "p", "c", "liveness"), "Probe terminated redirects, Response body: x.")
    assert events.told == [("ns", "p", "u", "Warning", "ProbeWarning",
                            "Liveness probe warning: Probe terminated redirects, Response body: x.")]
