"""`make bench`: run the benchmarks, print a table, save bench/results/<date>.json.

Benchmarks measure; they assert nothing about timings."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench import cluster, standalone
from shared.mounts import MountError, remove_tree

RESULTS = Path(__file__).resolve().parent / "results"


def _fmt(s: dict | None) -> str:
    return f"{s['p50']:.3f} / {s['p90']:.3f} / {s['p99']:.3f}" if s else "-"


def _ratio(a: dict | None, b: dict | None) -> str:
    return f"{a['p50'] / b['p50']:.2f}x" if a and b and b["p50"] else "-"


def _startup_table(title: str, py: dict, kube: dict, floor: dict) -> list[str]:
    lines = [f"  {title}",
             f"    {'workload':<16} {'pykubelet':<22} {'kubelet 1.20':<22} {'CRI floor':<22} "
             f"{'p50 vs kubelet':>14} {'vs floor':>8}   delete all (pykubelet / kubelet)"]
    for label in py:
        p, k, f = py[label]["startup"], kube.get(label, {}).get("startup"), floor.get(label)
        lines.append(f"    {label:<16} {_fmt(p):<22} {_fmt(k):<22} {_fmt(f):<22} {_ratio(p, k):>14} "
                     f"{_ratio(p, f):>8}   {py[label]['delete_all_seconds']:.1f}s / "
                     f"{kube.get(label, {}).get('delete_all_seconds', float('nan')):.1f}s")
    return lines


def render(out: dict) -> str:
    lines: list[str] = []
    c, s = out.get("cluster", {}), out.get("standalone", {})
    py, kube = c.get("pykubelet", {}), c.get("kubelet", {})
    floor = {label: r.get("cri_floor") for label, r in py.get("startup", {}).items()}
    if py or s:
        lines.append("Pod startup, warm image (seconds, p50 / p90 / p99)")
    if py:
        lines += _startup_table("cluster mode: pod created -> a watch sees it Running", py["startup"],
                                kube.get("startup", {}), floor)
    if s:
        lines += _startup_table("standalone: static pod file written -> the agent reports it Running",
                                s.get("pykubelet", {}), s.get("kubelet", {}), floor)
    if py:
        lines += ["", "Steady state, cluster mode (pykubelet: all its processes + NATS; kubelet: its process; "
                      "containerd excluded for both)",
                  f"  {'running pods':<13} {'CPU pykubelet':>14} {'CPU kubelet':>12} {'PSS pykubelet':>14} "
                  f"{'PSS kubelet':>12}"]
        for count, r in py["steady"].items():
            k = kube.get("steady", {}).get(count, {})
            lines.append(f"  {count:<13} {r['cpu_cores']:>11.3f} c {k.get('cpu_cores', float('nan')):>9.3f} c "
                         f"{r['pss_mib']:>10.1f} MiB {k.get('pss_mib', float('nan')):>8.1f} MiB")
        lines += ["", "Probe load, cluster mode (100 host-network pods x 3 containers, readiness httpGet + liveness "
                      "tcpSocket every 1s each)",
                  f"  {'agent':<10} {'probes/s':>9} {'CPU':>8} {'PSS':>10} {'spurious failures':>18} "
                  f"{'TIME-WAIT left':>15} {'delete all':>11}"]
        for name, r in (("pykubelet", py.get("probe_load")), ("kubelet", kube.get("probe_load"))):
            if r:
                lines.append(f"  {name:<10} {r['probes_per_second']:>9.1f} {r['cpu_cores']:>6.3f} c "
                             f"{r['pss_mib']:>6.1f} MiB {r['spurious_failures']:>18} {r['time_wait_sockets']:>15} "
                             f"{r['delete_all_seconds']:>10.1f}s")
    bs = py.get("bus_store_100_pods")
    if bs:
        lines += ["", f"Bus and store during the 100-pod startup (pykubelet, {bs['seconds']:.0f}s; "
                      "latencies are histogram bucket upper bounds)",
                  f"  {'event':<18} {'deliveries':>10} {'publish->handler p50 / p99':>28} {'handler p99':>12}"
                  f"  slowest subscriber (p99)"]
        for subject, r in bs["bus"].items():
            slow = r["slowest_subscriber"]
            lines.append(f"  {subject:<18} {r['deliveries']:>10} {r['delivery_p50_s'] * 1000:>15.1f} / "
                         f"{r['delivery_p99_s'] * 1000:>6.1f} ms {r['handler_p99_s'] * 1000:>9.1f} ms"
                         f"  {slow} ({r['per_subscriber'][slow]['delivery_p99_s'] * 1000:.1f} ms)")
        lines.append(f"  {'store writer':<18} {'commits':>10} {'commits/s':>10} {'commit p50 / p99':>22}")
        for svc, r in bs["store"].items():
            lines.append(f"  {svc:<18} {r['writes']:>10} {r['writes_per_second']:>10.1f} "
                         f"{r['commit_p50_s'] * 1000:>11.1f} / {r['commit_p99_s'] * 1000:>5.1f} ms")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="make bench")
    p.add_argument("--steady-seconds", type=float, default=60, help="steady-state window per pod count")
    p.add_argument("--probe-seconds", type=float, default=60, help="probe load window")
    p.add_argument("--skip", action="append", default=[], choices=["cluster", "standalone"])
    args = p.parse_args()
    started = time.time()
    out: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    root = Path(tempfile.mkdtemp(prefix="pykubelet-bench-"))

    def progress(message: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {message}", flush=True)

    try:
        if "cluster" not in args.skip:
            out["cluster"] = cluster.run(root / "cluster", args.steady_seconds, args.probe_seconds, progress)
        if "standalone" not in args.skip:
            out["standalone"] = standalone.run(root / "standalone", progress)
    finally:
        try:
            remove_tree(root)  # refuses (and says so) if anything is still mounted below it
        except MountError as exc:
            print(f"bench: {exc}")
    out["wall_seconds"] = round(time.time() - started, 1)
    print()
    print(render(out))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{time.strftime('%Y-%m-%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"\nresults: {path}  ({out['wall_seconds']:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
