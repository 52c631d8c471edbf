"""`make profile`: where pykubelet's CPU goes, per service, under a chosen load.

Starts a standalone node, runs `--pods` static pods (with `--probes`, the probe-load pods:
3 containers with an httpGet readiness and a tcpSocket liveness probe every second each),
samples every service with py-spy for `--seconds`, and prints each service's CPU and the
pykubelet functions its samples were in (inclusive). Raw stacks are kept in bench/results/ for a
flame graph (e.g. with inferno or speedscope).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from bench.cluster import pod_manifest
from bench.probe_load import Targets, probe_pod
from bench.steady_state import CpuWindow
from tests.integration.conftest import SERVICES, launch_node, stop_node, wait_for

RESULTS = Path(__file__).resolve().parent / "results"


def top_frames(raw: Path, n: int) -> tuple[int, list[tuple[str, int]]]:
    """Samples in total, and the pykubelet frames most often on the stack."""
    frames: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for frame in set(stack.split(";")):
            if ("services/" in frame or "shared/" in frame) and "<module>" not in frame \
                    and "service_main" not in frame:
                frames[frame] += int(count)
    return total, frames.most_common(n)


def main() -> int:
    p = argparse.ArgumentParser(prog="make profile")
    p.add_argument("--pods", type=int, default=100)
    p.add_argument("--probes", action="store_true", help="use the probe-load pods (600 probes/s at 100 pods)")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--top", type=int, default=8)
    args = p.parse_args()
    if shutil.which("py-spy") is None and not (Path(".venv/bin/py-spy")).exists():
        raise SystemExit("py-spy is missing: run `make deps` (it installs the bench extra)")
    spy = shutil.which("py-spy") or ".venv/bin/py-spy"
    root = Path(tempfile.mkdtemp(prefix="pykubelet-profile-"))
    print("starting a standalone node ...", flush=True)
    node = launch_node(root, watch_loops=False)  # no watchdog thread in the profiles
    targets = Targets() if args.probes else None
    try:
        image = node.image("busybox")
        for i in range(args.pods):
            pod = probe_pod(i, image, None, targets) if targets else pod_manifest(f"prof-{i}", image, None)
            pod["spec"].pop("nodeName", None)
            node.write(f"prof-{i}.yaml", yaml.safe_dump(pod))
        print(f"waiting for {args.pods} pods to run ...", flush=True)
        wait_for(lambda: sum(x["phase"] == "Running" for x in node.status()["pods"]) == args.pods, 600,
                 f"{args.pods} pods Running", interval=2)
        time.sleep(10)  # let the start-up work drain
        pids = {s: node.service_pid(s) for s in SERVICES}
        print(f"sampling every service with py-spy for {args.seconds:.0f}s ...", flush=True)
        RESULTS.mkdir(exist_ok=True)
        stamp = time.strftime("%Y-%m-%d-%H%M%S")
        window = CpuWindow(pids)
        spies = {s: subprocess.Popen([spy, "record", "-r", "100", "-d", str(int(args.seconds)), "-f", "raw",
                                      "-o", str(RESULTS / f"profile-{stamp}-{s}.txt"), "-p", str(pid)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for s, pid in pids.items()}
        for proc in spies.values():
            proc.wait(timeout=args.seconds + 60)
        cost = window.stop()
        for s in SERVICES:
            total, frames = top_frames(RESULTS / f"profile-{stamp}-{s}.txt", args.top)
            print(f"\n{s}: {cost['per_process'][s]['cpu_cores']:.3f} cores, {total} samples")
            for frame, count in frames:
                print(f"  {100 * count / max(total, 1):5.1f}%  {frame}")
        print(f"\nraw stacks: {RESULTS}/profile-{stamp}-*.txt")
    finally:
        for i in range(args.pods):
            node.remove(f"prof-{i}.yaml")
        try:
            wait_for(lambda: not node.status()["pods"], 300, "the pods to be removed", interval=2)
        finally:
            stop_node(node)
            if targets:
                targets.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
