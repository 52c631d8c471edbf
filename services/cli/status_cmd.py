"""`pykubelet status`: every pod on the node and, when it is not running, why."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from shared.pressure_report import human, pressure_report
from shared.store import DesiredPod, ManifestError, NetworkStatus, PodStatusRecord, Store

DEFAULT_ROOT = os.environ.get("PYKUBELET_ROOT_DIR", "/var/lib/pykubelet")


def collect(store: Store) -> dict[str, Any]:
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
            state_name, detail = next(iter(st.get("state", {"waiting": {}}).items()))
            last = st.get("lastState", {}).get("terminated")
            containers.append({
                "name": st["name"], "init": st["name"] in init_names, "state": state_name, "reason": detail.get("reason", ""),
                "ready": st.get("ready", False), "restartCount": st.get("restartCount", 0),
                "lastExitCode": last.get("exitCode") if last else
                (detail.get("exitCode") if state_name == "terminated" else None),
                "containerID": st.get("containerID", ""),
            })
        pods.append({
            "namespace": d.namespace, "name": d.name, "uid": uid, "source": d.source,
            "sourcePath": d.source_path, "phase": rec.phase if rec else "Pending",
            "podIP": rec.pod_ip if rec else "", "why": rec.summary if rec else "not synced yet",
            "deleting": d.deleting, "containers": containers, "status": status,
        })
    network = {"ready": net.ready, "podCIDR": net.pod_cidr, "message": net.message} if net else None
    return {"pods": pods, "manifestErrors": errors, "network": network, "pressure": pressure_report(store, 5)}


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
    for e in report["evictions"]:
        lines.append(f"    evicted {e['pod']} at {e['at']} ({e['signal']}): {e['message'].strip()}")
    return lines


def render_table(data: dict[str, Any]) -> str:
    lines = []
    net = data["network"]
    if net is not None:
        state = "ready" if net["ready"] else f"NOT READY: {net['message']}"
        lines.append(f"network: {net['podCIDR'] or '-'} {state}")
    lines.extend(render_pressure(data["pressure"]))
    header = f"{'NAMESPACE/NAME':<44} {'SOURCE':<6} {'PHASE':<10} {'POD IP':<15}"
    lines.append(header)
    for p in data["pods"]:
        lines.append(f"{p['namespace'] + '/' + p['name']:<44} {p['source']:<6} {p['phase']:<10} "
                     f"{p['podIP'] or '-':<15}")
        for c in p["containers"]:
            state = ("init: " if c["init"] else "") + c["state"] + (f" ({c['reason']})" if c["reason"] else "")
            last = f", last exit {c['lastExitCode']}" if c["lastExitCode"] is not None else ""
            lines.append(f"    {c['name']:<20} {state:<34} restarts {c['restartCount']}{last}")
        if p["why"]:
            lines.append(f"    why: {p['why']}")
    if not data["pods"]:
        lines.append("(no pods)")
    if data["manifestErrors"]:
        lines.append("")
        lines.append("manifests that could not be used:")
        for e in data["manifestErrors"]:
            lines.append(f"  {e['file']}: {e['error']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pykubelet status", description="Show the node's pods.")
    p.add_argument("--root-dir", default=DEFAULT_ROOT)
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = p.parse_args(argv)
    db = Path(args.root_dir) / "state.db"
    if not db.exists():
        print(f"no node state in {args.root_dir} (no {db}); is a node running? Try `pykubelet up`.",
              file=sys.stderr)
        return 1
    store = Store(db, writer=None)
    try:
        data = collect(store)
    except OperationalError as exc:
        print(f"cannot read {db}: {exc.orig}", file=sys.stderr)
        return 1
    finally:
        store.close()
    print(json.dumps(data, indent=2) if args.output == "json" else render_table(data))
    return 0
