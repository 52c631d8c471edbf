"""`kubeadm join`, `kubeadm upgrade node` and `kubeadm reset` with the kubelet 1.37 as the baseline
and with pykubelet, each started as systemd runs kubelet.service with kubeadm's drop-in
(tests/bootstrap/unit_command.py), on containerd 2.x (the kubelet 1.36 and newer needs it), in a
private host (tests/bootstrap/private_host.py) against the tests' control plane. Each agent must
join through the TLS bootstrap, run a Deployment's pod with `kubectl logs` working, take the
cluster's new kubelet config after `kubeadm upgrade node` and a restart with its pod running
through, and be reset. The time of each step is printed side by side. `make join-baseline`
builds the kubelet, kubeadm and containerd 2.x it needs (cached)."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bench.containerd2 import Containerd2Missing, put_first_on_path
from services.cli.as_kubelet import drop_in
from services.network.cni_config import conflist
from shared.host.cni import CONFLIST_NAME, cni_conf_dir, cni_ipam_dir
from shared.process.admin import SERVICES
from tests.bootstrap.host_runtime import HostRuntime
from tests.bootstrap.private_host import PrivateHost
from tests.bootstrap.unit_command import shell_command
from tests.cluster.harness import KUBE_BIN, ControlPlane, ensure_kube_binaries
from tests.integration.conftest import NODE_NAME, PYKUBELET, REPO, free_port, free_port_range, stop_process, wait_for
from tests.kubeadm_control_plane import APISERVER_ARGS, join_argv, kubeadm_config, prepare_control_plane, signing_args

KUBELET_ROOT = "/var/lib/kubelet"
KUBELET_PATH = "/usr/local/bin/kubelet"
UNITS = "/etc/systemd/system"
POD_CIDR = "10.88.0.0/24"
JOIN_TIMEOUT = 360
STEPS = ("kubeadm join", "node Ready", "Deployment pod running", "Ready again after upgrade + restart",
         "kubeadm reset")
FIGURES: dict[str, dict[str, float]] = {}
CONFIGZ: dict[str, dict] = {}  # agent -> its /configz for the config.yaml kubeadm wrote


@pytest.fixture(scope="module", autouse=True)
def containerd2():
    try:
        line = put_first_on_path()
    except Containerd2Missing as exc:
        pytest.fail(str(exc))
    for binary in ("kubelet", "kubeadm"):
        if not (KUBE_BIN / binary).exists():
            ensure_kube_binaries(binary)
    yield line
    print(f"\n{line}\n{'step (seconds since kubeadm join started)':<46}" +
          "".join(f"{agent:>12}" for agent in FIGURES))
    for step in STEPS:
        print(f"{step:<46}" + "".join(f"{FIGURES[a].get(step, float('nan')):>12.1f}" for a in FIGURES))


@dataclass
class Host:
    """The private host with its runtime and the agent installed as the kubelet."""

    work: Path
    host: PrivateHost
    runtime: HostRuntime
    agent: str
    proc: subprocess.Popen | None = None

    def install(self) -> None:
        """The kubelet binary and kubelet.service with kubeadm's drop-in, as each is installed."""
        if self.agent == "pykubelet":
            res = subprocess.run([*self.host.enter(), *PYKUBELET, "install", "--as-kubelet", "--kubelet-path",
                                  KUBELET_PATH], capture_output=True, text=True, timeout=60, cwd=REPO)
            assert res.returncode == 0, f"pykubelet install --as-kubelet: {res.stdout}{res.stderr}"
            # Its bus and admin ports free here, where a user adds flags.
            extra = f"--nats-url=nats://127.0.0.1:{free_port()} --admin-port-base={free_port_range(len(SERVICES))}"
        else:
            # Written from inside: the merged view of a mounted overlay need not see a file put in
            # its upper directory from outside.
            network = cni_conf_dir(Path(KUBELET_ROOT)) / CONFLIST_NAME
            self.inside(f"install -D -m 0755 {KUBE_BIN / 'kubelet'} {KUBELET_PATH}")
            self.write(f"{UNITS}/kubelet.service", f"[Service]\nExecStart={KUBELET_PATH}\n")
            self.write(f"{UNITS}/kubelet.service.d/10-kubeadm.conf", drop_in(KUBELET_PATH))
            # The kubelet has no network service: the pod network's config is there before it
            # starts, as a CNI DaemonSet would leave it (pykubelet's own, so both get one network).
            self.write(str(network), json.dumps(conflist(POD_CIDR, cni_ipam_dir(Path(KUBELET_ROOT)))))
            extra = ""
        self.write("/etc/default/kubelet", f'KUBELET_EXTRA_ARGS="{extra}"\n')

    def inside(self, script: str, stdin: str | None = None) -> None:
        res = subprocess.run([*self.host.enter(), "sh", "-c", script], input=stdin, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, f"on the private host, {script}: {res.stderr}"

    def write(self, path: str, content: str) -> None:
        self.inside(f"mkdir -p {shlex.quote(str(Path(path).parent))} && cat > {shlex.quote(path)}", content)

    def start(self) -> None:
        """systemctl start kubelet, as the tests are its init system."""
        units = self.host.path(UNITS)
        command = shell_command((units / "kubelet.service").read_text(),
                                (units / "kubelet.service.d" / "10-kubeadm.conf").read_text())
        with open(self.work / "kubelet.log", "a") as out:
            self.proc = subprocess.Popen([*self.host.enter(), "sh", "-c", command], stdout=out,
                                         stderr=subprocess.STDOUT, cwd=REPO)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=150)
            except subprocess.TimeoutExpired:
                stop_process(self.proc)
            self.proc = None

    def kubeadm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([*self.host.enter(), str(KUBE_BIN / "kubeadm"), *args], capture_output=True,
                              text=True, timeout=timeout)

    def log_tail(self) -> str:
        return (self.work / "kubelet.log").read_text(errors="replace")[-3000:]


def _node(cp: ControlPlane) -> dict | None:
    res = cp.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else None


def _ready(cp: ControlPlane) -> bool:
    conds = ((_node(cp) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _deployment_pod(cp: ControlPlane) -> dict | None:
    pods = json.loads(cp.kubectl("get", "pods", "-l", "app=hello", "-o", "json").stdout)["items"]
    statuses = pods[0]["status"].get("containerStatuses") or [] if pods else []
    return pods[0] if statuses and "running" in statuses[0]["state"] else None


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("agent", ["kubelet", "pykubelet"])
def test_kubeadm_join_upgrade_node_and_reset(agent, tmp_path):
    cp = ControlPlane(tmp_path / "control-plane", NODE_NAME, apiserver_extra=APISERVER_ARGS)
    private = PrivateHost(tmp_path / "host")
    node: Host | None = None
    join = None
    figures = FIGURES.setdefault(agent, {})
    try:
        cp.start()
        cp.start_controllers(signing_args(cp, 3600))
        (tmp_path / "host").mkdir()
        private.start()
        runtime = HostRuntime(tmp_path / "runtime", Path(KUBELET_ROOT), wrap=tuple(private.enter()))
        node = Host(tmp_path, private, runtime, agent)
        runtime.start()
        # The kubelet 1.35 and newer refuses cgroup v1 unless told (pykubelet's default allows it).
        prepare_control_plane(cp, tmp_path, kubeadm_config(
            cp, runtime.endpoint, free_port(), free_port(), failCgroupV1=False,
            podLogsDir=str(tmp_path / "pod-logs")))
        node.install()

        started = time.monotonic()
        with open(tmp_path / "kubeadm-join.log", "w") as out:
            join = subprocess.Popen([*private.enter(), *join_argv(cp, tmp_path, runtime.endpoint, NODE_NAME)],
                                    stdout=out, stderr=subprocess.STDOUT)
        flags = private.path(f"{KUBELET_ROOT}/kubeadm-flags.env")
        wait_for(lambda: flags.exists() or join.poll() is not None, 120, "kubeadm join to write kubeadm-flags.env")
        node.start()  # what kubeadm's `systemctl restart kubelet` does where systemd runs
        code = join.wait(timeout=JOIN_TIMEOUT)
        join_log = (tmp_path / "kubeadm-join.log").read_text()
        assert code == 0, f"{agent}: kubeadm join exited with {code}:\n{join_log[-3000:]}\n{node.log_tail()}"
        figures["kubeadm join"] = time.monotonic() - started
        wait_for(lambda: _ready(cp), 120, f"{agent}: the node Ready")
        figures["node Ready"] = time.monotonic() - started
        CONFIGZ[agent] = json.loads(cp.kubectl("get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/configz").stdout)

        image = f"{runtime.registry}/pykubelet/busybox:1.36"
        cp.kubectl("apply", "-f", "-", input_text=json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hello", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "hello"}},
                     "template": {"metadata": {"labels": {"app": "hello"}},
                                  "spec": {"terminationGracePeriodSeconds": 2, "containers": [{
                                      "name": "hello", "image": image,
                                      "command": ["sh", "-c", "echo hello; exec sleep 100000"]}]}}}}))
        pod = wait_for(lambda: _deployment_pod(cp), 120, f"{agent}: the Deployment's pod running")
        figures["Deployment pod running"] = time.monotonic() - started
        name, container_id = pod["metadata"]["name"], pod["status"]["containerStatuses"][0]["containerID"]
        logs = wait_for(lambda: cp.kubectl("logs", name, check=False).stdout.strip(), 30, f"{agent}: kubectl logs")
        assert logs == "hello"

        cm = json.loads(cp.kubectl("get", "configmap", "kubelet-config", "-n", "kube-system", "-o", "json").stdout)
        config = yaml.safe_load(cm["data"]["kubelet"])
        config["maxPods"] = 103
        cm["data"]["kubelet"] = yaml.safe_dump(config)
        cp.kubectl("replace", "-f", "-", input_text=json.dumps(cm))
        upgrade = node.kubeadm("upgrade", "node", "--ignore-preflight-errors=all")
        assert upgrade.returncode == 0, f"{agent}: kubeadm upgrade node: {upgrade.stdout[-2000:]}{upgrade.stderr[-2000:]}"
        restart = time.monotonic()
        node.stop()
        node.start()
        wait_for(lambda: (_node(cp) or {}).get("status", {}).get("capacity", {}).get("pods") == "103", 120,
                 f"{agent}: the node's pod capacity from the upgraded config")
        wait_for(lambda: _ready(cp), 120, f"{agent}: the node Ready after the restart")
        figures["Ready again after upgrade + restart"] = time.monotonic() - restart
        after = _deployment_pod(cp)
        assert after is not None and after["status"]["containerStatuses"][0]["containerID"] == container_id, \
            f"{agent}: the pod did not run through the restart"

        node.stop()
        reset_started = time.monotonic()
        reset = node.kubeadm("reset", "--force", f"--cri-socket={runtime.endpoint}")
        assert reset.returncode == 0, f"{agent}: kubeadm reset: {reset.stdout[-2000:]}{reset.stderr[-2000:]}"
        figures["kubeadm reset"] = time.monotonic() - reset_started
        runtime.start_again()
        left: list = []

        def none_left() -> bool:
            left[:] = [runtime.call(lambda cri: cri.list_pod_sandbox())]
            return left[0] == []
        try:
            wait_for(none_left, 60, f"{agent}: no pod left in the runtime after the reset")
        except AssertionError:
            raise AssertionError(f"{agent}: after kubeadm reset the runtime has {left[0]!r}\n{reset.stdout[-3000:]}"
                                 f"{reset.stderr[-3000:]}") from None
        assert not private.path("/etc/kubernetes/kubelet.conf").exists()
    finally:
        if join is not None:
            stop_process(join, timeout=5)
        if node is not None:
            node.stop()
            node.runtime.stop(str(tmp_path / "pod-logs"))
        private.stop()
        cp.stop()


def _zero(value: object) -> bool:
    """What Go's encoding/json leaves out of a field marked omitempty: absent is the zero value."""
    return value is None or value in ("", 0, False) or value == [] or value == {}


def _differences(want: object, got: object, path: str = "") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        return [d for k in sorted(set(want) | set(got)) for d in _differences(want.get(k), got.get(k), f"{path}.{k}")]
    if want == got or (_zero(want) and _zero(got)):
        return []
    return [f"{path.lstrip('.')}: kubelet {want!r}, pykubelet {got!r}"]


def test_configz_is_the_kubelets_for_the_config_kubeadm_wrote():
    """Every effective value of the config.yaml kubeadm wrote, as each agent's /configz reports it
    (through the API server's node proxy): pykubelet's defaulting is the kubelet's."""
    assert set(CONFIGZ) == {"kubelet", "pykubelet"}, "both joins must have run first"
    kubelet, pykubelet = CONFIGZ["kubelet"]["kubeletconfig"], CONFIGZ["pykubelet"]["kubeletconfig"]
    # Each run's own: free ports, its runtime's socket and pod log dir.
    for per_run in ("port", "healthzPort", "containerRuntimeEndpoint", "podLogsDir"):
        kubelet.pop(per_run, None)
        pykubelet.pop(per_run, None)
    differences = _differences(kubelet, pykubelet)
    assert differences == [
        # pykubelet's own: the first crash-loop back-off step can be tuned (the kubelet's is 10 s).
        "crashLoopBackOff.initialContainerRestartPeriod: kubelet None, pykubelet '10s'",
        # pykubelet pulls images in parallel by default (5 at a time); the kubelet one at a time.
        "maxParallelImagePulls: kubelet None, pykubelet 5",
        # pykubelet's network service runs the pod network on a CIDR of its own unless the
        # config or the Node gives one.
        "podCIDR: kubelet None, pykubelet '10.88.0.0/24'",
        "serializeImagePulls: kubelet True, pykubelet False",
    ], "\n".join(differences)
