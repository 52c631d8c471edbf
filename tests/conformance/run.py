"""`make conformance`: the upstream e2e [NodeConformance] specs of e2e.test 1.37 on pykubelet and
on the real kubelet 1.37, each on a fresh cluster of its own on this machine, and their results
side by side, in two suites: the [NodeConformance] specs that are also [Conformance], then every
other [NodeConformance] spec. Two more suites run [Conformance] specs of the node that upstream
does not label [NodeConformance]: `resize`, the in-place pod resize specs, and `image-volume`,
the image volume spec; `userns` runs the hostUsers specs (labelled Feature:UserNamespacesSupport);
`pod-certificate` the podCertificate projection specs of sig-auth.

Each run: etcd + kube-apiserver (Node,RBAC, ServiceAccount admission) + kube-scheduler +
kube-controller-manager, one node agent with its own containerd (2.x, both agents the same
build) and local registry, the specs' images pushed there (images.py), then
`ginkgo --nodes=N e2e.test` with KUBE_TEST_REPO_LIST pointing every image registry at the local
one. Results (JUnit, logs, a JSON summary per suite) go to
tests/conformance/results/<time>-<agent>/<suite>/; a single-agent run is compared with the latest
saved run of the other agent.

    python -m tests.conformance.run [--agent pykubelet|kubelet|both] [--suite conformance|node|resize|image-volume|userns|pod-certificate|both|all[,...]]
                                    [--focus REGEX] [--nodes 3]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.agents import Kubelet, Pykubelet
from bench.cluster import k8s, wait_node_ready
from bench.containerd2 import Containerd2Missing, put_first_on_path
from shared.host.mounts import MountError, remove_tree
from tests.cluster.harness import KUBE_BIN, ControlPlane, HarnessError
from tests.conformance.images import push_all, write_repo_list
from tests.conformance.report import Result, parse_junit, side_by_side, without_setup
from tests.integration.conftest import NODE_NAME

RESULTS = Path(__file__).parent / "results"
# The e2e framework labels each spec as its name's tags say (framework.WithNodeConformance,
# ConformanceIt): suites are label filters.
SUITES = {"conformance": "NodeConformance && Conformance",
          "node": "NodeConformance && !Conformance",
          # In-place pod resize: [Conformance] specs of the node that are not labelled
          # NodeConformance upstream (test/e2e/common/node/pod_resize.go).
          "resize": "Conformance && !NodeConformance",
          # Image volumes: the same (test/e2e/common/node/image_volume.go).
          "image-volume": "Conformance && !NodeConformance",
          # Pod certificates: the podCertificate projection specs of sig-auth whose pods need no
          # Service (test/e2e/auth/projected_podcertificate.go), with e2e.test's own signer.
          "pod-certificate": "Conformance && !NodeConformance",
          # User namespaces: the hostUsers specs, labelled Feature:UserNamespacesSupport upstream
          # (test/e2e/common/node/security_context.go); chosen by their focus alone.
          "userns": ""}
# A suite's own focus within its label filter (--focus replaces it).
SUITE_FOCUS = {"resize": r"Pod InPlace Resize Container", "image-volume": r"\[sig-node\] ImageVolume ",
               "userns": r"\[sig-node\] Security Context When creating a pod with HostUsers ",
               "pod-certificate": r"\[sig-auth\] Projected PodCertificate .*(should honor UserAnnotations|MaxExpirationSeconds)"}
# Each suite of each agent stops here.
SUITE_TIMEOUT_MIN = int(os.environ.get("CONFORMANCE_SUITE_MINUTES", "40"))
PROGRESS_EVERY = 60.0
# pykubelet with the kubelet's defaults, not the integration tests' short back-off and tiny logs
# (the later keys override launch_node's; PyYAML keeps the last).
PYKUBELET_DEFAULTS = """crashLoopBackOff:
  initialContainerRestartPeriod: 10s
  maxContainerRestartPeriod: 300s
containerLogMaxSize: 10Mi
volumeStatsAggPeriod: 1m
"""


# ginkgo runs in its own session (its e2e.test workers with it): a stop request ends them first,
# then the run tears its cluster and node down as after a normal end.
_GINKGO: set[subprocess.Popen] = set()
_STOP = threading.Event()


def _on_stop(signum: int, _frame) -> None:
    _STOP.set()
    if _GINKGO:
        for proc in list(_GINKGO):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return
    raise KeyboardInterrupt(f"signal {signum}")


def _log(msg: str, t0: float) -> None:
    print(f"[{time.monotonic() - t0:6.0f}s] {msg}", flush=True)


# ginkgo v2 prints a "•" for each finished spec: alone among the "S" of skipped ones when it
# passed, as "• [FAILED]" ("[PANICKED]", "[TIMEDOUT]") opening its report when not.
_FINISHED = re.compile(r"•( \[(FAILED|PANICKED|TIMEDOUT|INTERRUPTED)\])?")


def count_finished(text: str) -> tuple[int, int]:
    """(finished, failed) specs in ginkgo's output so far."""
    finished = failed = 0
    for m in _FINISHED.finditer(text):
        finished += 1
        failed += bool(m.group(1))
    return finished, failed


class Progress(threading.Thread):
    """Prints how far ginkgo got, from its output file."""

    def __init__(self, path: Path, agent: str, t0: float) -> None:
        super().__init__(name=f"conformance-progress-{agent}", daemon=True)
        self.path, self.agent, self.t0 = path, agent, t0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(PROGRESS_EVERY):
            try:
                text = self.path.read_text(errors="replace")
            except OSError:
                continue
            finished, failed = count_finished(text)
            _log(f"{self.agent}: {finished} specs finished so far, {failed} failed", self.t0)


def _ginkgo(cp: ControlPlane, out: Path, repo_list: Path, label_filter: str, focus: str | None, nodes: int,
            t0: float, agent: str) -> tuple[int, str]:
    report = out / "junit"
    report.mkdir(parents=True, exist_ok=True)
    argv = [str(KUBE_BIN / "ginkgo"), f"--nodes={nodes}", "--no-color", f"--timeout={SUITE_TIMEOUT_MIN}m",
            f"--label-filter={label_filter}", *([f"--focus={focus}"] if focus else []), "--flake-attempts=1",
            str(KUBE_BIN / "e2e.test"), "--",
            "--provider=skeleton", f"--kubeconfig={cp.admin_kubeconfig}", f"--report-dir={report}",
            "--allowed-not-ready-nodes=0", "--system-pods-startup-timeout=1m"]
    env = {**os.environ, "KUBE_TEST_REPO_LIST": str(repo_list), "KUBECONFIG": str(cp.admin_kubeconfig)}
    log = out / "ginkgo.log"
    progress = Progress(log, agent, t0)
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=out,
                                start_new_session=True)
        _GINKGO.add(proc)
        progress.start()
        try:
            code = proc.wait(timeout=(SUITE_TIMEOUT_MIN + 5) * 60)
            why = ""
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            why = f"ginkgo did not stop within {SUITE_TIMEOUT_MIN + 5} minutes and was killed"
        finally:
            _GINKGO.discard(proc)
            progress.done.set()
    if _STOP.is_set():
        why = "stopped on request (SIGINT/SIGTERM); the specs finished so far are counted"
    tail = log.read_text(errors="replace")[-3000:]
    if not why and not list(report.glob("junit*.xml")):
        why = f"ginkgo wrote no report; the end of {log}:\n{tail[-1500:]}"
    if not why and "timeout" in tail.lower() and "interrupted by timeout" in tail.lower():
        why = f"the suite hit its {SUITE_TIMEOUT_MIN}-minute timeout; unfinished specs are not counted"
    return code, why


# Each run's cluster and node (logs, etcd, containerd's root) are kept for reading; only the
# newest few per agent, they take 100-200 MB each.
KEEP_WORK_DIRS = 3
WORK_ROOT = Path("/var/tmp")


def _prune_work_dirs(kind: str) -> None:
    dirs = sorted(WORK_ROOT.glob(f"conformance-{kind}-*"), key=lambda p: p.stat().st_mtime)
    for old in dirs[:max(0, len(dirs) - (KEEP_WORK_DIRS - 1))]:
        try:
            remove_tree(old)  # never through a mount a crashed run left behind
        except (MountError, OSError) as exc:
            print(f"conformance: keeping {old}: {exc}", file=sys.stderr)


async def run_agent(kind: str, out: Path, suites: list[str], focus: str | None, nodes: int,
                    t0: float) -> dict[str, Result]:
    """Every suite in `suites` on one fresh cluster and node of `kind`; a Result per suite."""
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    _prune_work_dirs(kind)
    work = Path(tempfile.mkdtemp(prefix=f"conformance-{kind}-", dir=WORK_ROOT))
    # Others may pass through (not list): the node's containerd keeps its state below, and the
    # root of a user-namespaced pod is an unprivileged ID that must reach its rootfs there.
    work.chmod(0o711)
    cp = ControlPlane(work / "cp", NODE_NAME, full=True, verify_kubelets=False)
    (work / "cp").mkdir()
    agent = None
    results: dict[str, Result] = {}
    # The control plane starts in a thread of its own; a stop request while it runs waits for it
    # (a thread cannot be stopped) so that the stop below finds every process it started.
    starting = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{kind}-control-plane-start")
    try:
        _log(f"{kind}: starting etcd, kube-apiserver, kube-scheduler, kube-controller-manager ...", t0)
        await asyncio.wrap_future(starting.submit(cp.start))
        await asyncio.wrap_future(starting.submit(cp.start_controllers))
        _log(f"{kind}: starting the node ...", t0)
        agent = Pykubelet(work / "node", cp, PYKUBELET_DEFAULTS) if kind == "pykubelet" else Kubelet(work / "node", cp)
        await agent.start()
        api = await k8s(cp.admin_kubeconfig)
        try:
            await wait_node_ready(api, agent.node_name, timeout=180)
        finally:
            await api.close()
        registry = agent.registry
        _log(f"{kind}: node {agent.node_name} Ready; pushing the specs' images to {registry} ...", t0)
        await asyncio.to_thread(push_all, registry)
        repo_list = write_repo_list(out / "repo-list.yaml", registry)
        for suite in suites:
            if _STOP.is_set():
                break
            suite_out = out / suite
            suite_out.mkdir(parents=True, exist_ok=True)
            begin = time.monotonic()
            _log(f"{kind}: suite {suite} ({SUITES[suite] or SUITE_FOCUS[suite]}; {nodes} specs in parallel, at most "
                 f"{SUITE_TIMEOUT_MIN} minutes) ...", t0)
            code, why = await asyncio.to_thread(_ginkgo, cp, suite_out, repo_list, SUITES[suite],
                                                focus or SUITE_FOCUS.get(suite), nodes,
                                                t0, kind)
            res = parse_junit(suite_out / "junit", kind)
            res.incomplete, res.seconds, res.started = why, time.monotonic() - begin, started
            _log(f"{kind}: suite {suite}: ginkgo exited {code}: {len(without_setup(res.passed))} passed, {len(res.failed)} failed",
                 t0)
            (suite_out / "result.json").write_text(res.to_json())
            results[suite] = res
    except (HarnessError, TimeoutError, OSError, RuntimeError) as exc:
        _log(f"{kind}: could not run: {exc}", t0)
        for suite in suites:
            if suite not in results:
                results[suite] = Result(kind, incomplete=f"{type(exc).__name__}: {exc}", started=started)
                (out / suite).mkdir(parents=True, exist_ok=True)
                (out / suite / "result.json").write_text(results[suite].to_json())
    finally:
        _log(f"{kind}: stopping (logs of the control plane and node kept in {work}) ...", t0)
        starting.shutdown(wait=True)
        if agent is not None:
            await agent.stop()
        await asyncio.to_thread(cp.stop)
    return results


def _suites(value: str) -> list[str]:
    """--suite: a suite, both, all, or suites separated by commas."""
    named = {"both": ["conformance", "node"], "all": list(SUITES)}
    suites = [s for part in value.split(",") for s in named.get(part.strip(), [part.strip()])]
    unknown = [s for s in suites if s not in SUITES]
    if unknown or not suites:
        raise argparse.ArgumentTypeError(f"unknown suite {', '.join(unknown) or value!r}: choose from "
                                         f"{', '.join([*SUITES, 'both', 'all'])}")
    return list(dict.fromkeys(suites))


def latest(agent: str, suite: str) -> Result | None:
    runs = sorted(RESULTS.glob(f"*-{agent}/{suite}/result.json"))
    return Result.load(runs[-1]) if runs else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make conformance", description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", choices=["pykubelet", "kubelet", "both"],
                   default=os.environ.get("CONFORMANCE_AGENT", "both"))
    p.add_argument("--suite", type=_suites, default="both",
                   help="conformance: [NodeConformance] specs that are [Conformance]; node: the other "
                        "[NodeConformance] specs; resize: the [Conformance] in-place resize specs; "
                        "image-volume: the [Conformance] image volume spec; userns: the hostUsers specs; "
                        "both: conformance and node (the default); all: every suite; several: "
                        "comma-separated (resize,userns)")
    p.add_argument("--focus", default=None, help="ginkgo focus regex within the suites' specs")
    p.add_argument("--nodes", type=int, default=3, help="ginkgo parallel nodes (default: %(default)s)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("conformance: runs containers and a node agent: run as root", file=sys.stderr)
        return 2
    missing = [b for b in ("e2e.test", "ginkgo", "agnhost", "kube-scheduler", "kube-controller-manager",
                           "kube-apiserver", "kubelet", "kubectl", "etcd") if not (KUBE_BIN / b).exists()]
    if missing:
        print(f"conformance: missing {', '.join(missing)} in {KUBE_BIN}: run `make kube`, "
              f"`deploy/build-kube.sh kubelet` and `deploy/build-kube.sh e2e` (make conformance does all)",
              file=sys.stderr)
        return 2
    try:
        containerd = put_first_on_path()
    except Containerd2Missing as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2
    print(f"conformance: both agents on {containerd}", flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    t0 = time.monotonic()
    agents = ["pykubelet", "kubelet"] if args.agent == "both" else [args.agent]
    suites = args.suite
    runs: dict[str, dict[str, Result]] = {}
    signal.signal(signal.SIGTERM, _on_stop)
    signal.signal(signal.SIGINT, _on_stop)
    for kind in agents:
        if _STOP.is_set():
            break
        out = RESULTS / f"{stamp}-{kind}"
        out.mkdir(parents=True)
        try:
            runs[kind] = asyncio.run(run_agent(kind, out, suites, args.focus, args.nodes, t0))
        except KeyboardInterrupt:  # the agent's cluster and node are stopped (run_agent's finally)
            print(f"conformance: stopped; the {kind} run's results are incomplete", file=sys.stderr)
            return 130
    complete = True
    for suite in suites:
        results = [runs[k][suite] for k in agents if k in runs and suite in runs[k]]
        complete &= len(results) == len(agents) and all(not r.incomplete for r in results)
        if len(agents) == 1:
            other = latest("kubelet" if agents[0] == "pykubelet" else "pykubelet", suite)
            if other is not None:
                other.agent = f"{other.agent} ({other.started})"
                results = [*results, other] if agents[0] == "pykubelet" else [other, *results]
        print(f"\n== suite {suite}: {SUITES[suite] or SUITE_FOCUS[suite]}")
        print(side_by_side(results))
    print(f"\nresults: {RESULTS}/{stamp}-*")
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
