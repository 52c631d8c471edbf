"""What the VM tests share: reading the guest's cgroups and units, spinner pods, and pykubelet and
the kubelet 1.37 run one after the other on the same pods in one guest (compare_with_kubelet),
on cgroup v2 (test_production_host.py) and v1 (test_cgroup_v1_systemd.py)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import yaml

from bench.containerd2 import BIN as CONTAINERD_BIN
from bench.containerd2 import TOOLS as CONTAINERD_TOOLS
from tests.cluster.harness import KUBE_BIN
from tests.guest_node import MANIFESTS, PY, REGISTRY, REPO, web_spec, write_static_pod
from tests.integration.conftest import wait_for

UNITS = ["pykubelet-bus.service", "pykubelet-containerd.service", "pykubelet-eviction.service",
         "pykubelet-network.service", "pykubelet-node-api.service", "pykubelet-pod-sync.service",
         "pykubelet-preload.service", "pykubelet-probe.service", "pykubelet-status-reporter.service",
         "pykubelet-volume.service"]
BUSYBOX = "127.0.0.1:5000/pykubelet/busybox:1.36"
POD_PIDS_LIMIT = 4096  # install's config.yaml (the CIS benchmark's setting)
# Under emulation a pod takes about a minute from manifest to running.
POD_TIMEOUT = 420
NODE = "pykubelet-vm"
DRIVER = ("import asyncio; from shared.runtime.cri import CRIClient; "
          "print(asyncio.run(CRIClient('unix:///var/lib/pykubelet/containerd/containerd.sock').cgroup_driver()))")

# A node log query (enableSystemLogQuery) for a pykubelet unit, answered as node-api answers
# `GET /logs/?query=pykubelet-pod-sync&pattern=...`: from the journal, by journalctl.
LOG_QUERY = ("import asyncio; from services.node_api.http import Request; "
             "from services.node_api.log_query import NodeLogQuery; "
             "from services.node_api.system_logs import NODE_LOG_DIR, SystemLogs\n"
             "async def main():\n"
             "    logs = SystemLogs(query=NodeLogQuery(NODE_LOG_DIR))\n"
             "    r = await logs.serve(Request('GET', '/logs/', {'query': ['pykubelet-pod-sync'], "
             "'pattern': ['pod-sync running']}, {}, [], None))\n"
             "    print(b''.join([c async for c in r.body]).decode())\n"
             "asyncio.run(main())")

# Whether the runtime's default handler makes user namespaces (containerd asks the kernel: ID-mapped
# mounts on every filesystem a pod uses, tmpfs included, need Linux 6.3).
USERNS = ("import asyncio; from shared.runtime.cri import CRIClient; "
          "s = asyncio.run(CRIClient('unix:///var/lib/pykubelet/containerd/containerd.sock').status()); "
          "print(any(h.name == '' and h.features.user_namespaces for h in s.runtime_handlers))")


def pod_name(pod: dict) -> str:
    """The pod's cgroup by its cgroupfs name, from `pykubelet status`'s pod."""
    tier = {"Guaranteed": "", "Burstable": "/burstable", "BestEffort": "/besteffort"}[pod["status"]["qosClass"]]
    return f"/kubepods{tier}/pod{pod['uid']}"


def read(vm, path: str) -> str:
    return vm.run("cat", path).stdout.strip()


def unit_property(vm, unit: str, name: str) -> str:
    return vm.run("systemctl", "show", "-p", name, "--value", unit).stdout.strip()


def service_pid(vm, unit: str) -> str:
    """The pid of the service a pykubelet unit runs: the process in the unit beside its main
    process (the launcher, which stays while the service it had forked runs), or the main process
    itself when it runs the service (no fork server)."""
    main = unit_property(vm, unit, "MainPID")
    group = unit_property(vm, unit, "ControlGroup")
    procs = vm.run("sh", "-c", f"cat /sys/fs/cgroup{group}/cgroup.procs 2>/dev/null || "
                               f"cat /sys/fs/cgroup/systemd{group}/cgroup.procs", check=False).stdout.split()
    others = [pid for pid in procs if pid != main]
    return others[0] if len(others) == 1 else main


def units_active(vm) -> list[str]:
    """The node's units that are not active."""
    states = vm.run("systemctl", "is-active", *UNITS, check=False).stdout.split()
    return [u for u, state in zip(UNITS, states, strict=True) if state != "active"]


def spin(name: str, loops: int, **resources) -> dict:
    """A container that keeps `loops` CPUs busy."""
    script = " & ".join(["while :; do :; done"] * loops)
    return {"name": name, "image": BUSYBOX, "command": ["sh", "-c", script], **resources}


def pod_slices(vm) -> int:
    """How many pod slices there are under kubepods.slice (v2's tree, or v1's cpu tree)."""
    found = vm.run("find", "/sys/fs/cgroup/kubepods.slice", "/sys/fs/cgroup/cpu/kubepods.slice", "-name",
                   "*-pod*.slice", check=False).stdout
    return len(found.split())


def no_pod_slices(vm) -> bool:
    return pod_slices(vm) == 0


# Both agents serve /stats/summary and /metrics/cadvisor here while they are compared.
READ_ONLY_PORT = 10255


def read_only(vm, path: str) -> str:
    """GET path on the node agent's read-only port."""
    return vm.run("busybox", "wget", "-qO-", f"http://127.0.0.1:{READ_ONLY_PORT}{path}").stdout


def summary_shape(summary: dict, pods: list[str]) -> set[str]:
    """The field paths of a Summary (/stats/summary) for the node and the named pods: lists of
    named things by name ("pods[cmp-burstable].containers[app].cpu.psi.some.total"), other lists
    as "[]", so two agents' summaries compare by the fields they fill, not their values."""
    def walk(value: object, at: str) -> set[str]:
        if isinstance(value, dict):
            out = {at}
            for key, inner in value.items():
                out |= walk(inner, f"{at}.{key}")
            return out
        if isinstance(value, list):
            out = {at}
            for item in value:
                name = item.get("name") if isinstance(item, dict) else None
                if at.endswith("interfaces"):
                    name = None  # the host's interfaces are not the agents'
                out |= walk(item, f"{at}[{name}]" if isinstance(name, str) else f"{at}[]")
            return out
        return {at}
    shapes = walk(summary.get("node", {}), "node")
    static = {f"{name}-{NODE}": name for name in pods}  # a static pod's name ends in the node's
    for pod in summary.get("pods", []):
        name = pod.get("podRef", {}).get("name", "")
        if name in static:
            shapes |= walk(pod, f"pods[{static[name]}]")
    return shapes


def metric_families(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


# The kubelet 1.37 beside pykubelet in the guest: its own containerd 2.x (the kubelet 1.36+ needs
# one), root dir and static pod directory; the same node name, so the static pods have the same names.
BASELINE = "/var/lib/kubelet-baseline"
BASELINE_BIN = "/usr/local/lib/kubelet-baseline"
BASELINE_MANIFESTS = "/etc/kubelet-baseline/manifests"
BASELINE_ENDPOINT = f"unix://{BASELINE}/containerd/containerd.sock"
COMPARED_QOS = {"cmp-guaranteed": "Guaranteed", "cmp-burstable": "Burstable", "cmp-besteffort": "BestEffort"}
# pykubelet's install config where it differs from the kubelet's defaults and matters here; the
# kubelet serves nothing the test needs, and reads the same manifests from its own directory.
BASELINE_CONFIG = f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: {BASELINE_MANIFESTS}
containerRuntimeEndpoint: {BASELINE_ENDPOINT}
cgroupDriver: systemd
podPidsLimit: {POD_PIDS_LIMIT}
seccompDefault: true
failSwapOn: false
readOnlyPort: {READ_ONLY_PORT}
authentication: {{anonymous: {{enabled: false}}, webhook: {{enabled: false}}}}
authorization: {{mode: AlwaysAllow}}
"""
WRITE_CONTAINERD_CONFIG = f"""
from pathlib import Path
from services.supervisor.containerd_config import ContainerdLayout, write_config
write_config(ContainerdLayout(Path("{BASELINE}/containerd")), cni_conf_dir=Path("{BASELINE}/cni"),
             cni_bin_dir="/usr/lib/cni", sandbox_image="{REGISTRY}/pykubelet/pause:3.9", registry="{REGISTRY}",
             restrict_oom=False, systemd_cgroup=True)
"""


def compared_pods() -> dict[str, dict]:
    """One pod of each QoS class; on the host's network, so the kubelet needs no CNI config."""
    host = {"hostNetwork": True, "terminationGracePeriodSeconds": 0}
    return {
        "cmp-guaranteed": {**host, "containers": [{"name": "app", "image": BUSYBOX, "command": ["sleep", "3600"],
                                                   "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}}}]},
        "cmp-burstable": {**host, "containers": [spin("app", 2, resources={
            "requests": {"cpu": "1500m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}})]},
        "cmp-besteffort": {**host, "containers": [spin("app", 2)]},
    }


def _figures(vm, endpoint: str) -> dict:
    cmd = (f"cd {REPO} && {PY} -m tests.vm.cgroup_figures {endpoint} {NODE} "
           + " ".join(f"{name}={qos}" for name, qos in COMPARED_QOS.items()))

    def ready() -> dict | None:
        res = vm.run("sh", "-c", cmd, check=False, timeout=300)
        return json.loads(res.stdout) if res.returncode == 0 else None
    return wait_for(ready, POD_TIMEOUT, f"the compared pods running on {endpoint}", interval=10)


def _cpu_used_ns(vm, cgroup_dir: str) -> int:
    """The CPU time a cgroup used: cpu.stat's usage_usec (v2), cpuacct.usage (v1)."""
    res = vm.run("cat", f"{cgroup_dir}/cpu.stat", check=False)
    stat = dict(line.split() for line in res.stdout.splitlines()) if res.returncode == 0 else {}
    if "usage_usec" in stat:
        return int(stat["usage_usec"]) * 1000
    return int(read(vm, f"{cgroup_dir}/cpuacct.usage"))


def burstable_share(vm, paths: dict[str, str]) -> float:
    """The Burstable spinner's part of the CPU both spinners used over 15 s."""
    before = {n: _cpu_used_ns(vm, paths[n]) for n in ("cmp-burstable", "cmp-besteffort")}
    time.sleep(15)
    used = {n: _cpu_used_ns(vm, paths[n]) - before[n] for n in before}
    return used["cmp-burstable"] / max(1, sum(used.values()))


@dataclass
class Measured:
    figures: dict
    share: float
    summary: set[str]   # summary_shape of its /stats/summary
    cadvisor: set[str]  # the families of its /metrics/cadvisor


def _measure(vm, manifests: str, endpoint: str) -> Measured:
    for name, spec in compared_pods().items():
        manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        vm.run("sh", "-c", f"cat > {manifests}/{name}.yaml", input=yaml.safe_dump(manifest))
    try:
        got = _figures(vm, endpoint)
        share = burstable_share(vm, got.pop("paths"))  # 15 s: both agents have sampled twice since
        return Measured(got, share, summary_shape(json.loads(read_only(vm, "/stats/summary")), list(COMPARED_QOS)),
                        metric_families(read_only(vm, "/metrics/cadvisor")))
    finally:
        vm.run("sh", "-c", f"rm -f {manifests}/cmp-*.yaml")
        wait_for(lambda: no_pod_slices(vm), POD_TIMEOUT, f"the compared pods' slices gone ({endpoint})", interval=5)


@dataclass
class Comparison:
    ours: dict
    theirs: dict
    our_share: float
    their_share: float
    our_summary: set[str]
    their_summary: set[str]
    our_cadvisor: set[str]
    their_cadvisor: set[str]

    def summary_fields_only_ours(self) -> set[str]:
        """The /stats/summary fields pykubelet fills and the kubelet 1.37 does not, but for the
        pods' process_stats: pykubelet takes them from the runtime's sandbox stats, as the
        kubelet's CRI stats provider does; its cAdvisor provider counts no processes."""
        return {f for f in self.our_summary - self.their_summary if ".process_stats" not in f}

    def shapes(self) -> str:
        """Where the agents' /stats/summary fields and /metrics/cadvisor families differ."""
        lines = []
        for what, ours, theirs in (("/stats/summary fields", self.our_summary, self.their_summary),
                                   ("/metrics/cadvisor families", self.our_cadvisor, self.their_cadvisor)):
            lines.append(f"{what}: {len(ours & theirs)} in both")
            lines += [f"  only the kubelet 1.37: {p}" for p in sorted(theirs - ours)]
            lines += [f"  only pykubelet: {p}" for p in sorted(ours - theirs)]
        return "\n".join(lines)

    def differ(self) -> dict:
        return {k: (self.ours[k], self.theirs.get(k)) for k in self.ours if self.ours[k] != self.theirs.get(k)}

    def table(self) -> str:
        width = max(map(len, self.ours))
        lines = [f"\n{'':{width}}  {'pykubelet':>22}  {'kubelet 1.37':>22}"]
        for key in sorted(self.ours):
            mark = "" if self.ours[key] == self.theirs.get(key) else "  <-"
            lines.append(f"{key:{width}}  {self.ours[key]:>22}  {self.theirs.get(key, '-'):>22}{mark}")
        lines.append(f"{'Burstable spinner share of the CPU':{width}}  {self.our_share:>22.1%}  "
                     f"{self.their_share:>22.1%}")
        return "\n".join(lines)


def compare_with_kubelet(vm, config: str = "", baseline_config: str = "") -> Comparison:
    """The compared pods under pykubelet, then under the kubelet 1.37, both on one containerd 2.x
    (runc converts a container's cpu shares to cpu.weight, so both agents drive the same build),
    `config` added to both agents' config files and `baseline_config` to the kubelet's alone;
    pykubelet's node is as it was afterwards, running the web pod."""
    binaries = [KUBE_BIN / "kubelet", *(CONTAINERD_BIN / t for t in CONTAINERD_TOOLS)]
    missing = [str(p) for p in binaries if not p.exists()]
    assert not missing, (f"the baseline is not built ({', '.join(missing)}): `make test-vm` builds it with "
                         "deploy/build-kube.sh kubelet and deploy/build-containerd.sh")
    # Only the compared pods on each agent (and the kubelet would take another's slice for an orphan).
    vm.run("rm", "-f", f"{MANIFESTS}/web.yaml")
    wait_for(lambda: no_pod_slices(vm), POD_TIMEOUT, "pykubelet's pods gone", interval=5)
    vm.run("mkdir", "-p", BASELINE_BIN, BASELINE_MANIFESTS)
    for path in binaries:
        vm.copy_in(path, f"{BASELINE_BIN}/{path.name}")
    vm.run(PY, "-c", WRITE_CONTAINERD_CONFIG)
    vm.run("sh", "-c", f"cat > {BASELINE}/config.yaml", input=BASELINE_CONFIG + config + baseline_config)
    env = f"PATH={BASELINE_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    flags, config_file = "/etc/pykubelet/flags.env", "/etc/pykubelet/config.yaml"
    for path in (flags, config_file):
        vm.run("cp", path, f"{path}.before-baseline")
    try:
        vm.run("systemd-run", "--unit=baseline-containerd", f"--setenv={env}", f"{BASELINE_BIN}/containerd",
               "--config", f"{BASELINE}/containerd/config.toml")
        # pykubelet's services on that containerd: a later flag wins over the unit's own.
        vm.run("sed", "-i", f"s#^\\(PYKUBELET_ARGS=.*\\)'$#\\1 --container-runtime-endpoint {BASELINE_ENDPOINT}'#",
               flags)
        assert BASELINE_ENDPOINT in read(vm, flags), read(vm, flags)
        if config:
            vm.run("sh", "-c", f"cat >> {config_file}", input=config)
        vm.run("sed", "-i", f"s/^readOnlyPort: 0$/readOnlyPort: {READ_ONLY_PORT}/", config_file)
        assert f"readOnlyPort: {READ_ONLY_PORT}" in read(vm, config_file)
        vm.run("systemctl", "restart", "pykubelet.target", timeout=900)
        ours = _measure(vm, MANIFESTS, BASELINE_ENDPOINT)
        vm.run("systemctl", "stop", "pykubelet.target", timeout=900)

        vm.run("systemd-run", "--unit=baseline-kubelet", f"--setenv={env}", f"{BASELINE_BIN}/kubelet",
               f"--config={BASELINE}/config.yaml", f"--root-dir={BASELINE}/root", f"--hostname-override={NODE}",
               "--v=2")
        try:
            theirs = _measure(vm, BASELINE_MANIFESTS, BASELINE_ENDPOINT)
        except AssertionError as exc:
            journal = vm.run("journalctl", "-u", "baseline-kubelet", "--no-pager", "-n", "80", check=False).stdout
            raise AssertionError(f"{exc}\nthe kubelet's journal:\n{journal}") from None
    finally:
        vm.run("systemctl", "stop", "baseline-kubelet.service", "baseline-containerd.service", check=False,
               timeout=300)
        vm.run("systemctl", "reset-failed", check=False)
        for path in (flags, config_file):
            vm.run("mv", f"{path}.before-baseline", path)
        vm.run("systemctl", "restart", "pykubelet.target", timeout=900)
        write_static_pod(vm, "web", web_spec())
    return Comparison(ours.figures, theirs.figures, ours.share, theirs.share, ours.summary, theirs.summary,
                      ours.cadvisor, theirs.cadvisor)
