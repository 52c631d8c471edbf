"""`pykubelet status`: every pod on the node and, when it is not running, why.

What it shows comes from the store, written by the services; when a service that owns part of
it is not running or has not reconciled since it started, that part is the last recorded
state, and `status` says so instead of passing it off as current (pods show phase Unknown with
what was last recorded). Exit codes for scripts: 0 all current, 1 no readable state,
3 node not running, 4 node running but some of what is shown is not current yet.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from sqlalchemy import select
from sqlalchemy.exc import DatabaseError

from shared.store import DesiredPod, ManifestError, NetworkStatus, PodStatusRecord, Store
from shared.store.pressure_report import human, pressure_report
from shared.store.service_state import ServiceView, at, node_view, not_current, owners_of, read_states

DEFAULT_ROOT = os.environ.get("PYKUBELET_ROOT_DIR", "/var/lib/pykubelet")

EXIT_CURRENT, EXIT_NO_STATE, EXIT_NOT_RUNNING, EXIT_NOT_CURRENT = 0, 1, 3, 4
WAIT_POLL = 0.5  # seconds between looks at the store with --wait

# Who owns each part of the output; producers first (pod status is derived from pod-sync's rows).
# Pressure is the eviction service's own observation of the node, whatever pod-sync's state.
OWNERS = {"pods": owners_of("status-reporter"), "network": owners_of("network"), "pressure": ["eviction"]}


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def _service(v: ServiceView, now: datetime) -> dict[str, Any]:
    return {"alive": v.alive(now), "startedAt": _iso(v.started_at), "lastHeartbeat": _iso(v.heartbeat_at),
            "reconciledAt": _iso(v.reconciled_at), "stoppedAt": _iso(v.stopped_at)}


def collect(store: Store, now: datetime | None = None) -> dict[str, Any]:
    now = now or datetime.now(timezone.utc)
    states = read_states(store)
    node = node_view(states, now)
    stale = {part: not_current(states, owners, now) for part, owners in OWNERS.items()}
    with store.session() as s:
        desired = {d.uid: d for d in s.scalars(select(DesiredPod))}
        statuses = {r.uid: r for r in s.scalars(select(PodStatusRecord))}
        errors = [{"file": e.source_path, "error": e.error} for e in s.scalars(select(ManifestError))]
        net = s.get(NetworkStatus, 1)
    pods = []
    for uid, d in sorted(desired.items(), key=lambda kv: (kv[1].namespace, kv[1].name)):
        rec = statuses.get(uid)
        status = rec.status if rec else {}
        containers = []
        init_names = {st["name"] for st in status.get("initContainerStatuses", [])}
        for st in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
            state: Mapping[str, Any] = st.get("state") or {"waiting": {}}
            state_name, detail = next(iter(state.items()))
            last = st.get("lastState", {}).get("terminated")
            containers.append({
                "name": st["name"], "init": st["name"] in init_names, "state": state_name, "reason": detail.get("reason", ""),
                "ready": st.get("ready", False), "restartCount": st.get("restartCount", 0),
                "lastExitCode": last.get("exitCode") if last else
                (detail.get("exitCode") if state_name == "terminated" else None),
                "containerID": st.get("containerID", ""),
            })
        phase, ip = (rec.phase, rec.pod_ip) if rec else ("Pending", "")
        pod = {
            "namespace": d.namespace, "name": d.name, "uid": uid, "source": d.source,
            "sourcePath": d.source_path, "phase": phase, "podIP": ip,
            "why": rec.summary if rec else "not synced yet",
            "deleting": d.deleting, "containers": containers, "status": status, "current": not stale["pods"],
        }
        if stale["pods"]:
            # As the API shows pods of a node that stopped reporting: phase Unknown.
            pod.update(phase="Unknown", podIP="", recordedPhase=phase, recordedPodIP=ip,
                       recordedAt=_iso(rec.updated_at.replace(tzinfo=timezone.utc) if rec else None))
            for c in containers:
                c.update(state="unknown", recordedState=c["state"], ready=False)
        pods.append(pod)
    network = {"ready": net.ready, "podCIDR": net.pod_cidr, "message": net.message,
               "current": not stale["network"]} if net else None
    return {
        "node": {"running": node.running, "state": node.describe(now), "lastHeard": _iso(node.last_heard),
                 "services": {name: _service(v, now) for name, v in sorted(states.items())}},
        "current": node.running and not any(stale.values()),
        "notCurrent": {part: reasons for part, reasons in stale.items() if reasons},
        "pods": pods, "manifestErrors": errors, "network": network, "pressure": pressure_report(store, 5),
    }


def exit_code(data: dict[str, Any]) -> int:
    if not data["node"]["running"]:
        return EXIT_NOT_RUNNING
    return EXIT_CURRENT if data["current"] else EXIT_NOT_CURRENT


def render_pressure(report: dict[str, Any]) -> list[str]:
    """The pressure conditions, each signal against its thresholds, and the last evictions."""
    if not report["signals"]:
        return []
    under = [c for c in report["conditions"] if c["status"]]
    lines = ["pressure: " + ("; ".join(f"{c['type']} ({c['detail'] or 'held for the transition period'})"
                                       for c in under) if under else "none")]
    for sig in report["signals"]:
        name = sig["signal"]
        parts = [f"{human(sig['available'], name)} of {human(sig['capacity'], name)} available"]
        for kind in ("hard", "soft"):
            t = sig.get(kind)
            if t:
                state = "MET" if t["met"] else f"{human(t['headroom'], name)} to go"
                parts.append(f"{kind} < {t['threshold']}: {state}")
        lines.append(f"    {name:<28} " + ", ".join(parts))
    shutdown = report.get("shutdown")
    if shutdown and shutdown["inProgress"]:
        stopped = f", pods stopped at {shutdown['podsStoppedAt']}" if shutdown["podsStoppedAt"] else ""
        lines.append(f"    the node is shutting down since {shutdown['startedAt']}{stopped}: no pod is admitted")
    for e in report["evictions"]:
        verb = "stopped for the node shutdown" if e["reason"] == "Terminated" else "evicted"
        lines.append(f"    {verb} {e['pod']} at {e['at']} ({e['signal']}): {e['message'].strip()}")
    return lines


def render_node(data: dict[str, Any]) -> list[str]:
    lines = [f"node: {data['node']['state']}"]
    if data["notCurrent"] and data["node"]["running"]:
        for part, reasons in data["notCurrent"].items():
            lines.append(f"    {part} not current: {'; '.join(reasons)}")
    elif not data["node"]["running"] and data["pods"]:
        lines.append("    what follows is the last recorded state, not what runs now")
    return lines


def render_table(data: dict[str, Any]) -> str:
    lines = render_node(data)
    net = data["network"]
    if net is not None:
        state = "ready" if net["ready"] else f"NOT READY: {net['message']}"
        if net["current"]:
            lines.append(f"network: {net['podCIDR'] or '-'} {state}")
        else:
            lines.append(f"network: unknown (last recorded {net['podCIDR'] or '-'} {state})")
    pressure = render_pressure(data["pressure"])
    if pressure and "pressure" in data["notCurrent"]:
        pressure[0] = pressure[0].replace("pressure:", "pressure (last recorded, not current):", 1)
    lines.extend(pressure)
    header = f"{'NAMESPACE/NAME':<44} {'SOURCE':<6} {'PHASE':<10} {'POD IP':<15}"
    lines.append(header)
    for p in data["pods"]:
        lines.append(f"{p['namespace'] + '/' + p['name']:<44} {p['source']:<6} {p['phase']:<10} "
                     f"{p['podIP'] or '-':<15}")
        for c in p["containers"]:
            state = ("init: " if c["init"] else "") + c["state"] + (f" ({c['reason']})" if c["reason"] else "")
            if "recordedState" in c:
                state += f" (last recorded {c['recordedState']})"
            last = f", last exit {c['lastExitCode']}" if c["lastExitCode"] is not None else ""
            lines.append(f"    {c['name']:<20} {state:<34} restarts {c['restartCount']}{last}")
        if p["why"]:
            lines.append(f"    why: {p['why']}")
        if not p["current"]:
            when = f" at {at(datetime.fromisoformat(p['recordedAt']))}" if p.get("recordedAt") else ""
            lines.append(f"    last recorded{when}: {p['recordedPhase']} {p['recordedPodIP'] or '-'}")
    if not data["pods"]:
        lines.append("(no pods)")
    if data["manifestErrors"]:
        lines.append("")
        lines.append("manifests that could not be used:")
        for e in data["manifestErrors"]:
            lines.append(f"  {e['file']}: {e['error']}")
    return "\n".join(lines)


def settled(data: dict[str, Any]) -> bool:
    """Every pod has started or failed to (none Pending), as seen by current state."""
    return bool(data["current"]) and all(p["phase"] != "Pending" for p in data["pods"])


def collect_when_settled(store: Store, wait: float) -> dict[str, Any]:
    """collect(), once the pods have settled or after `wait` seconds, whichever comes first."""
    deadline = time.monotonic() + wait
    while True:
        data = collect(store)
        if settled(data) or time.monotonic() >= deadline:
            return data
        time.sleep(WAIT_POLL)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="pykubelet status", description="Show the node's pods.",
        epilog="exit codes: 0 all shown is current; 1 no readable node state; 3 node not running "
               "(the last recorded state is shown); 4 node running, part of it not current yet "
               "(a service down or not reconciled since it started)")
    p.add_argument("--root-dir", default=DEFAULT_ROOT)
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="first wait up to SECONDS until no pod is Pending any more and the state is current")
    args = p.parse_args(argv)
    if not 0 <= args.wait < float("inf"):  # also refuses nan, which no deadline is ever past
        p.error("--wait must be 0 or more seconds")
    db = Path(args.root_dir) / "state.db"
    if not db.exists():
        print(f"no node state in {args.root_dir} (no {db}); is a node running? Try `pykubelet up`.",
              file=sys.stderr)
        return EXIT_NO_STATE
    store = Store(db, writer=None)
    try:
        data = collect_when_settled(store, args.wait)
    except DatabaseError as exc:  # locked for too long, or damaged (the services rebuild it)
        print(f"cannot read {db}: {exc.orig}", file=sys.stderr)
        return EXIT_NO_STATE
    finally:
        store.close()
    print(json.dumps(data, indent=2) if args.output == "json" else render_table(data))
    return exit_code(data)
