"""`make bench`: run the benchmarks, print a table, save bench/results/<date>.json.

Benchmarks measure; they assert nothing about timings."""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from bench import churn, cluster, eviction, imports, standalone
from bench.containerd2 import put_first_on_path
from shared.host.mounts import MountError, remove_tree
from tests.cluster.harness import KUBELET_LABEL

RESULTS = Path(__file__).resolve().parent / "results"


def _fmt(s: dict | None) -> str:
    return f"{s['p50']:.3f} / {s['p90']:.3f} / {s['p99']:.3f}" if s else "-"


def _ratio(a: dict | None, b: dict | None) -> str:
    return f"{a['p50'] / b['p50']:.2f}x" if a and b and b["p50"] else "-"


def _startup_table(title: str, py: dict, kube: dict, floor: dict) -> list[str]:
    lines = [f"  {title}",
             f"    {'workload':<16} {'pykubelet':<22} {KUBELET_LABEL:<22} {'CRI floor':<22} "
             f"{'p50 vs kubelet':>14} {'vs floor':>8}   delete all (pykubelet / kubelet)"]
    for label in py:
        p, k, f = py[label]["startup"], kube.get(label, {}).get("startup"), floor.get(label)
        lines.append(f"    {label:<16} {_fmt(p):<22} {_fmt(k):<22} {_fmt(f):<22} {_ratio(p, k):>14} "
                     f"{_ratio(p, f):>8}   {py[label]['delete_all_seconds']:.1f}s / "
                     f"{kube.get(label, {}).get('delete_all_seconds', float('nan')):.1f}s")
    return lines


def _node_api_table(py: dict, kube: dict) -> list[str]:
    def logs(r: dict | None) -> str:
        if not r:
            return "-"
        return f"{r['best_mb_per_s']:.1f} / {r['median_mb_per_s']:.1f}" + ("" if r["complete"] else " (short!)")

    def lat(r: dict | None) -> str:
        if not r or not r["n"]:
            return "-"
        return f"{r['p50']:.3f} / {r['p99']:.3f}" + (f" ({r['failures']} failed)" if r.get("failures") else "")

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}x" if a and b else "-"

    stats = sorted({k for k in [*py, *kube] if k.startswith("stats_summary_")},
                   key=lambda k: int(k.removeprefix("stats_summary_").removesuffix("_pods")))
    pl, kl = py.get("logs"), kube.get("logs")
    pe, ke = py.get("exec"), kube.get("exec")
    rows = [
        ("kubectl logs, 50 MiB log: MB/s, best / median", logs(pl), logs(kl),
         ratio(pl and pl["median_mb_per_s"], kl and kl["median_mb_per_s"])),
        ("kubectl exec POD -- true: s, p50 / p99", lat(pe), lat(ke), ratio(pe and pe["p50"], ke and ke["p50"])),
    ]
    for key in stats:
        ps, ks = py.get(key), kube.get(key)
        pods = key.removeprefix("stats_summary_").removesuffix("_pods")
        rows.append((f"stats/summary, {pods} pods: s, p50 / p99", lat(ps), lat(ks),
                     ratio(ps and ps["p50"], ks and ks["p50"])))
    lines = ["", "Kubelet API, cluster mode (logs and exec through the API server with kubectl; stats/summary "
                 "straight to the node with the API server's client certificate)",
             f"  {'':<46} {'pykubelet':<22} {KUBELET_LABEL:<22} {'pykubelet / kubelet':>20}"]
    lines += [f"  {label:<46} {p:<22} {k:<22} {r:>20}" for label, p, k, r in rows]
    return lines


def _steady_tables(py: dict, exec_: dict, kube: dict, py_probe: dict | None, kube_probe: dict | None) -> list[str]:
    nan = float("nan")
    lines = ["", "Steady state, cluster mode (pykubelet: all its processes + NATS, `pykubelet up` forking its services "
                 "from one process, as the systemd units do from pykubelet-preload.service; exec layout: every "
                 "service an interpreter of its own; kubelet: its "
                 "process; containerd excluded for all)",
             f"  {'running pods':<13} {'CPU pykubelet':>14} {'CPU kubelet':>12} {'PSS pykubelet':>14} "
             f"{'PSS kubelet':>12} {'PSS exec layout':>19} {'CPU exec layout':>19}"]
    for count, r in py.items():
        k, e = kube.get(count, {}), exec_.get(count, {})
        lines.append(f"  {count:<13} {r['cpu_cores']:>11.3f} c {k.get('cpu_cores', nan):>9.3f} c "
                     f"{r['pss_mib']:>10.1f} MiB {k.get('pss_mib', nan):>8.1f} MiB {e.get('pss_mib', nan):>15.1f} MiB "
                     f"{e.get('cpu_cores', nan):>17.3f} c")
    # Per process: where the figures above come from.
    windows = {f"{n} pods": r for n, r in py.items()}
    if py_probe:
        windows["probe load"] = py_probe
    names = list(next(iter(windows.values()))["per_process"])
    lines += ["", "  pykubelet per process, PSS MiB / CPU cores"
                  + ("  (the kubelet: one process, figures above)" if kube or kube_probe else ""),
              "    " + f"{'process':<16}" + "".join(f"{w:>20}" for w in windows)]
    for name in names:
        cells = []
        for r in windows.values():
            pp = r["per_process"].get(name)
            cells.append(f"{pp['pss_mib']:>9.1f} / {pp['cpu_cores']:.3f}" if pp else "-")
        lines.append("    " + f"{name:<16}" + "".join(f"{c:>20}" for c in cells))
    return lines


def _api_requests_lines(py: dict, kube: dict) -> list[str]:
    def cell(r: dict | None) -> str:
        if not r:
            return "-"
        return f"{r['requests']} in {r['seconds']:.0f}s = {r['per_second']:.1f}/s, wait p99 {r['limiter_wait_p99_s']:.3f}s"
    return [f"  API requests while {label} started (kubeAPIQPS 50, burst 100 for both): pykubelet "
            f"{cell(r['api_requests'])}; kubelet {cell(kube.get(label, {}).get('api_requests'))}"
            for label, r in py.items() if r.get("api_requests")]


def _probe_load_table(py: dict, kube: dict | None) -> list[str]:
    lines = ["", "Probe load, cluster mode (100 host-network pods x 3 containers, readiness httpGet + liveness "
                 "tcpSocket every 1s each)",
             f"  {'agent':<10} {'probes/s':>9} {'CPU':>8} {'PSS':>10} {'spurious failures':>18} "
             f"{'TIME-WAIT left':>15} {'delete all':>11}"]
    for name, r in (("pykubelet", py), ("kubelet", kube)):
        if r:
            lines.append(f"  {name:<10} {r['probes_per_second']:>9.1f} {r['cpu_cores']:>6.3f} c "
                         f"{r['pss_mib']:>6.1f} MiB {r['spurious_failures']:>18} {r['time_wait_sockets']:>15} "
                         f"{r['delete_all_seconds']:>10.1f}s")
    return lines


def _bus_store_table(bs: dict) -> list[str]:
    lines = ["", f"Bus and store during the 100-pod startup (pykubelet, {bs['seconds']:.0f}s; "
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
    return lines


def render(out: dict) -> str:
    lines: list[str] = [f"pykubelet on {out['python']}"] if out.get("python") else []
    if out.get("containerd"):
        lines.append(f"both agents on {out['containerd']}")
    c, s = out.get("cluster", {}), out.get("standalone", {})
    py, kube = c.get("pykubelet", {}), c.get("kubelet", {})
    floor = {label: r.get("cri_floor") for label, r in py.get("startup", {}).items()}
    if py.get("startup") or s:
        lines.append("Pod startup, warm image (seconds, p50 / p90 / p99)")
    if py.get("startup"):
        lines += _startup_table("cluster mode: pod created -> a watch sees it Running", py["startup"],
                                kube.get("startup", {}), floor)
    if s:
        lines += _startup_table("standalone: static pod file written -> the agent reports it Running",
                                s.get("pykubelet", {}), s.get("kubelet", {}), floor)
    lines += _api_requests_lines(py.get("startup", {}), kube.get("startup", {}))
    if py.get("steady"):
        lines += _steady_tables(py["steady"], c.get("pykubelet-exec", {}).get("steady", {}), kube.get("steady", {}),
                                py.get("probe_load"), kube.get("probe_load"))
    if py.get("probe_load"):
        lines += _probe_load_table(py["probe_load"], kube.get("probe_load"))
    if py.get("node_api") or kube.get("node_api"):
        lines += _node_api_table(py.get("node_api", {}), kube.get("node_api", {}))
    if out.get("eviction"):
        lines += eviction.table(out["eviction"])
    if out.get("imports"):
        lines += imports.table(out["imports"])
    if out.get("churn"):
        lines += churn.table(out["churn"])
    if py.get("bus_store_100_pods"):
        lines += _bus_store_table(py["bus_store_100_pods"])
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="make bench")
    p.add_argument("--steady-seconds", type=float, default=60, help="steady-state window per pod count")
    p.add_argument("--probe-seconds", type=float, default=60, help="probe load window")
    p.add_argument("--skip", action="append", default=[], choices=["cluster", "standalone", "eviction", "imports"])
    p.add_argument("--churn-pods", type=int, default=5000, help="pods the churn benchmark creates and deletes")
    p.add_argument("--churn-wave", type=int, default=50, help="pods per churn wave")
    p.add_argument("--only", choices=["node-api", "eviction", "footprint", "churn", "scale"],
                   help="node-api: only the kubelet API figures (cluster mode, both agents; a few minutes); "
                        "eviction: only the eviction reaction time (both agents; a few minutes); "
                        "footprint: only steady-state CPU and memory, the probe load and the import cost per service "
                        "(cluster mode; ~15 minutes); "
                        "scale: only 250 pods at 10/s, the steady state and stats/summary with them "
                        "(cluster mode, both agents); "
                        "churn: only the churn benchmark (both agents; `make bench-churn`), which the others leave out")
    args = p.parse_args()
    if args.only in ("node-api", "scale"):
        args.skip = [*args.skip, "standalone", "eviction", "imports"]
    elif args.only == "footprint":  # the import cost explains part of the footprint
        args.skip = [*args.skip, "standalone", "eviction"]
    elif args.only == "eviction":
        args.skip = [*args.skip, "standalone", "cluster", "imports"]
    elif args.only == "churn":
        args.skip = [*args.skip, "standalone", "cluster", "eviction", "imports"]
    started = time.time()
    # The interpreter decides part of the footprint (services/supervisor/immortal.py).
    out: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "python": f"{platform.python_implementation()} {platform.python_version()}"}
    if args.only:
        out["only"] = args.only
    # Both agents on the same containerd 2.x: the kubelet of today refuses containerd 1.x.
    out["containerd"] = put_first_on_path()
    root = Path(tempfile.mkdtemp(prefix="pykubelet-bench-"))

    def progress(message: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {message}", flush=True)

    try:
        if "imports" not in args.skip:  # first, while nothing else runs on the machine
            out["imports"] = imports.run(progress)
        if "cluster" not in args.skip:
            out["cluster"] = cluster.run(root / "cluster", args.steady_seconds, args.probe_seconds, progress,
                                         only=args.only)
        if "standalone" not in args.skip:
            out["standalone"] = standalone.run(root / "standalone", progress)
        if "eviction" not in args.skip:
            out["eviction"] = eviction.run(root / "eviction", progress)
        if args.only == "churn":
            out["churn"] = churn.run(root / "churn", args.churn_pods, args.churn_wave, progress)
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
