"""`make bench`: run the benchmarks, print a table, save bench/results/<date>.json.

Benchmarks measure; they assert nothing about timings."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench import pod_startup, probe_load, steady_state

RESULTS = Path(__file__).resolve().parent / "results"


def _fmt(s: dict) -> str:
    return f"{s['p50']:.3f} / {s['p90']:.3f} / {s['p99']:.3f}"


def main() -> int:
    p = argparse.ArgumentParser(prog="make bench")
    p.add_argument("--probe-targets", type=int, default=300)
    p.add_argument("--probe-seconds", type=float, default=120)
    p.add_argument("--steady-seconds", type=float, default=60)
    p.add_argument("--skip", action="append", default=[], choices=["probes", "startup", "steady"])
    args = p.parse_args()
    started = time.time()
    out: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if "startup" not in args.skip:
        out["pod_startup"] = pod_startup.run(progress=lambda m: print(m, flush=True))
    if "steady" not in args.skip:
        out["steady_state"] = steady_state.run(seconds=args.steady_seconds,
                                               progress=lambda m: print(m, flush=True))
    if "probes" not in args.skip:
        out["probe_load"] = probe_load.run(args.probe_targets, args.probe_seconds,
                                           progress=lambda m: print(m, flush=True))
    out["wall_seconds"] = round(time.time() - started, 1)
    print()
    if "pod_startup" in out:
        print("Pod startup, warm image, create -> watch sees Running (seconds, p50 / p90 / p99)")
        print(f"  {'workload':<16} {'pykubelet':<22} {'kubelet 1.20':<22} {'CRI floor':<22} "
              f"{'p50 vs kubelet':>14} {'vs floor':>8}  delete all (pykubelet / kubelet)")
        for label, r in out["pod_startup"].items():
            kubelet = r.get("kubelet")
            vs_floor = r["pykubelet"]["p50"] / r["cri_floor"]["p50"] if r["cri_floor"]["p50"] else float("nan")
            vs_kubelet = r["pykubelet"]["p50"] / kubelet["p50"] if kubelet and kubelet["p50"] else float("nan")
            print(f"  {label:<16} {_fmt(r['pykubelet']):<22} {_fmt(kubelet) if kubelet else '-':<22} "
                  f"{_fmt(r['cri_floor']):<22} {vs_kubelet:>13.2f}x {vs_floor:>7.1f}x  "
                  f"{r['delete_all_seconds']:.1f}s / {r.get('kubelet_delete_all_seconds', float('nan')):.1f}s")
    if "steady_state" in out:
        print("\nSteady state, all pykubelet processes + NATS (containerd excluded)")
        print(f"  {'running pods':<14} {'CPU (cores)':>12} {'PSS (MiB)':>10}")
        for count, r in out["steady_state"].items():
            print(f"  {count:<14} {r['cpu_cores']:>12.3f} {r['pss_mib']:>10.1f}")
    if "probe_load" in out:
        r = out["probe_load"]
        print(f"\nProbe load: {r['targets']} targets, {r['probes_per_second']} probes/s over {r['seconds']}s")
        print(f"  probe-service CPU         {r['probe_service_cpu_cores']} cores")
        print(f"  probe latency p99         <= {r['probe_latency_p99_seconds_upper_bound']} s (histogram bucket)")
        print(f"  spurious failures         {r['spurious_failures']}")
        print(f"  TIME-WAIT sockets left    {r['time_wait_sockets']}   (baseline TCP prober with normal close: "
              f"{r['baseline_plain_prober_time_wait_sockets']})")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{time.strftime('%Y-%m-%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"\nresults: {path}  ({out['wall_seconds']:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
