"""Any process of a node can die or hang, and the pods never notice.

A fleet of 30 pods (readiness and liveness probes, an emptyDir and a downward API volume each)
runs through every fault. After each one: the same containers (IDs, attempts) and sandboxes,
nothing added or left over, and `pykubelet status` current again. The recovery times are printed.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from shared.runtime.cri.labels import MANAGED_BY
from tests.integration.conftest import relaunch_node, wait_for
from tests.resilience.leftovers import consistent

FLEET = 30
SERVICES = ["pod-sync", "probe", "volume", "network", "eviction", "status-reporter", "node-api"]
STOP_SECONDS = 60


def fleet_pod(node, i: int) -> dict:
    return {"containers": [{
        "name": "web", "image": node.image("web"),
        "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 10, "failureThreshold": 3},
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}, {"name": "info", "mountPath": "/info"}],
    }], "volumes": [
        {"name": "scratch", "emptyDir": {}},
        {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
    ]}


def ready(p: dict) -> bool:
    return p["phase"] == "Running" and bool(p["podIP"]) and all(
        c["type"] != "Ready" or c["status"] == "True" for c in p["status"].get("conditions", []))


def snapshot(node) -> tuple[dict, list]:
    """Every container pykubelet runs (ID -> name, attempt, state) and every ready sandbox."""
    async def go(cri):
        containers = await cri.list_containers({MANAGED_BY: "true"})
        sandboxes = await cri.list_pod_sandbox({MANAGED_BY: "true"})
        return ({c.id: (c.metadata.name, c.metadata.attempt, c.state) for c in containers},
                sorted(sb.id for sb in sandboxes if sb.state == 0))
    return node.runtime(go)


def status_current(node) -> bool:
    res = node.cli("status", "-o", "json", check=False)
    return res.returncode == 0


def fleet_ready(node) -> bool:
    pods = [p for p in node.status()["pods"] if p["name"].startswith("fleet-")]
    return len(pods) == FLEET and all(ready(p) for p in pods)


@pytest.fixture(scope="module")
def fleet(node):
    for i in range(FLEET):
        node.write_pod(f"fleet-{i}", fleet_pod(node, i), labels={"app": "fleet", "index": str(i)})
    wait_for(lambda: fleet_ready(node), 240, f"{FLEET} fleet pods Running and Ready")
    wait_for(lambda: status_current(node), 30, "status current")
    yield node
    for i in range(FLEET):
        node.remove(f"fleet-{i}.yaml")
    wait_for(lambda: not [p for p in node.status()["pods"] if p["name"].startswith("fleet-")], 180,
             "fleet pods removed")


def wait_recovered(node, before: tuple[dict, list], what: str, started: float) -> float:
    """Until status is current and the fleet ready again; then nothing may have changed."""
    wait_for(lambda: status_current(node) and fleet_ready(node) and consistent(node), 90,
             f"the node to recover from {what}")
    took = time.monotonic() - started
    after = snapshot(node)
    assert after[0] == before[0], f"containers changed by {what}: " \
        f"gone {set(before[0]) - set(after[0])}, new {set(after[0]) - set(before[0])}"
    assert after[1] == before[1], f"sandboxes changed by {what}"
    return took


def pid_of(node, name: str) -> int:
    return int((node.root / "run" / f"{name}.pid").read_text())


def parent_of(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def admin_healthy(node, service: str) -> bool:
    try:
        return node.admin_get(service, "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("victim", [*SERVICES, "nats", "containerd"])
def test_sigkill_touches_no_pod(fleet, victim):
    before = snapshot(fleet)
    old = pid_of(fleet, victim)
    started = time.monotonic()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: pid_of(fleet, victim) != old, 60, f"the supervisor to restart {victim}")
    if victim in SERVICES:
        wait_for(lambda: admin_healthy(fleet, victim), 60, f"{victim} healthy again")
        pid = pid_of(fleet, victim)
        assert parent_of(pid) == fleet.proc.pid and cmdline(pid).startswith(f"pykubelet {victim} "), \
            "forked again by the supervisor, sharing its pages"
    back = time.monotonic() - started
    current = wait_recovered(fleet, before, f"SIGKILL of {victim}", started)
    print(f"\nSIGKILL {victim:<16} back in {back:5.1f}s, status current after {current:5.1f}s")


def test_pod_cgroups_a_crashed_run_left_are_removed_at_the_next_start(fleet):
    """A pod cgroup of no pod (a run killed between making it and its sandbox, or a pod removed
    while pod-sync was down) goes at pod-sync's next start, once it is older than a pod cgroup
    can be before its sandbox runs; the fleet's own cgroups stay."""
    from services.pod_sync.pod_cgroup import ORPHAN_MIN_AGE

    root = Path("/sys/fs/cgroup")
    orphan = [root / c / "kubepods/besteffort/pod0badc0de-0000-4000-8000-00000000dead" for c in ("cpu", "memory")]
    for d in orphan:
        d.mkdir(parents=True)
    try:
        time.sleep(ORPHAN_MIN_AGE + 1)
        before, started = snapshot(fleet), time.monotonic()
        os.kill(pid_of(fleet, "pod-sync"), signal.SIGKILL)
        wait_for(lambda: not any(d.exists() for d in orphan), 90, "the orphaned pod cgroup removed")
        wait_recovered(fleet, before, "pod-sync's restart", started)
        uids = [p["uid"] for p in fleet.status()["pods"] if p["name"].startswith("fleet-")]
        assert all((root / "cpu/kubepods/besteffort" / f"pod{uid}").is_dir() for uid in uids)
    finally:
        for d in orphan:
            if d.exists():
                d.rmdir()


def test_all_services_and_nats_stopped_for_a_minute(fleet):
    """SIGSTOP of every service and NATS for 60 s, while a pod is added and another removed:
    status says the node is not running meanwhile; after SIGCONT it converges."""
    fleet.write_pod("doomed", fleet_pod(fleet, 0))
    fleet.wait_pod("doomed", ready, 60, "doomed Ready")
    wait_for(lambda: status_current(fleet), 30, "status current")
    before = snapshot(fleet)
    doomed_ids = {c.id for c in fleet.containers_of(fleet.pod("doomed")["uid"])}

    frozen = [pid_of(fleet, name) for name in [*SERVICES, "nats"]]
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        fleet.remove("doomed.yaml")
        fleet.write_pod("latecomer", fleet_pod(fleet, 0))
        # Silent services for longer than three heartbeats: the node is not running as far as
        # anyone can tell, and status says so (exit 3) instead of showing the last rows.
        time.sleep(STOP_SECONDS)
        res = fleet.cli("status", check=False)
        assert res.returncode == 3 and res.stdout.startswith("node: not running"), res.stdout[:500]
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    started = time.monotonic()
    fleet.wait_pod("latecomer", ready, 60, "latecomer Ready")
    wait_for(lambda: fleet.pod("doomed") is None, 60, "doomed gone")
    converged = time.monotonic() - started
    wait_for(lambda: status_current(fleet) and fleet_ready(fleet), 60, "status current after SIGCONT")
    current = time.monotonic() - started
    after = snapshot(fleet)
    assert not doomed_ids & set(after[0]), "the removed pod's containers are gone"
    kept = {cid: v for cid, v in before[0].items() if cid not in doomed_ids}
    assert {cid: v for cid, v in after[0].items() if cid in kept} == kept, "fleet containers unchanged"
    assert [pid_of(fleet, name) for name in [*SERVICES, "nats"]] == frozen, "no process restarted after the stop"
    print(f"\nSIGSTOP all {STOP_SECONDS}s: converged {converged:5.1f}s after SIGCONT, "
          f"status current after {current:5.1f}s")
    fleet.remove("latecomer.yaml")
    wait_for(lambda: fleet.pod("latecomer") is None, 60, "latecomer removed")




def test_a_minute_without_the_bus(fleet):
    """NATS down for a minute (killed; the supervisor, frozen meanwhile, restarts it after):
    events are lost, but state lives in the store and every service reconciles from it, so a
    pod written meanwhile still starts, becomes Ready and is reported as such before the bus
    is back."""
    before = snapshot(fleet)
    nats = pid_of(fleet, "nats")
    started = time.monotonic()
    fleet.proc.send_signal(signal.SIGSTOP)
    try:
        os.kill(nats, signal.SIGKILL)
        fleet.write_pod("busless", fleet_pod(fleet, 0))
        fleet.wait_pod("busless", ready, STOP_SECONDS - 5, "a pod started and Ready with the bus down")
        came_up = time.monotonic() - started
        time.sleep(max(0.0, STOP_SECONDS - (time.monotonic() - started)))
    finally:
        fleet.proc.send_signal(signal.SIGCONT)
    back = time.monotonic()
    wait_for(lambda: pid_of(fleet, "nats") != nats, 60, "the supervisor to restart NATS")
    wait_for(lambda: status_current(fleet) and fleet_ready(fleet) and consistent(fleet), 60,
             "status current with the bus back")
    current = time.monotonic() - back
    after = snapshot(fleet)
    assert {cid: after[0].get(cid) for cid in before[0]} == before[0], "fleet containers unchanged"
    print(f"\nbus down {STOP_SECONDS}s: a new pod Ready {came_up:5.1f}s into it, "
          f"status current {current:5.1f}s after the bus came back")
    fleet.remove("busless.yaml")
    wait_for(lambda: fleet.pod("busless") is None, 60, "busless removed")

def test_a_damaged_store_is_rebuilt_and_no_pod_restarts(fleet):
    """The node dies with it (supervisor and services SIGKILLed) and state.db is left
    overwritten, as by a crash mid-write: the next `up` moves it aside, starts an empty one,
    rebuilds everything from the static pod files and the runtime, and adopts every
    container instead of restarting it."""
    before = snapshot(fleet)
    services = [pid_of(fleet, name) for name in SERVICES]
    fleet.proc.send_signal(signal.SIGKILL)
    fleet.proc.wait(timeout=10)
    for pid in services:
        os.kill(pid, signal.SIGKILL)
    db = fleet.root / "state.db"
    with open(db, "r+b") as f:
        f.write(os.urandom(8192))
    for leftover in ("state.db-wal", "state.db-shm"):
        (fleet.root / leftover).unlink(missing_ok=True)

    started = time.monotonic()
    relaunch_node(fleet)
    assert list(fleet.root.glob("state.db.damaged-*")), "the damaged store was moved aside"
    # Found by whoever opens it first: `up` itself (its preload prepares the store before any
    # service starts) or a service.
    logs = fleet.log.read_text() + "".join(path.read_text() for path in (fleet.root / "logs").glob("*.log"))
    assert "the state store" in logs and "is damaged" in logs
    current = wait_recovered(fleet, before, "a damaged state.db", started)
    print(f"\ndamaged state.db: node back and status current after {current:5.1f}s")
