"""pykubelet on the production host of today: systemd as PID 1 and cgroup v2 only (a Debian
bookworm guest, tests/vm/conftest.py). `pykubelet install` brings the node up from
pykubelet.target with the systemd cgroup driver (install's choice on such a host, as kubeadm's);
the QoS tiers are slices that share the CPU as the kubelet's do; pod limits land in the pod's
slice and the container's scope; node allocatable on kubepods.slice; a reboot of the guest
brings the node and its pods back."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import yaml

from shared.host.process_sandbox import parse_status
from shared.model.cgroup_names import container_cgroup, on_host, slice_unit
from shared.process.admin import SERVICES
from tests.cluster.harness import KUBE_BIN, ControlPlane, ensure_kube_binaries
from tests.guest_node import (
    MANIFESTS,
    PY,
    ROOT_DIR,
    install_args,
    push_images,
    running_pod,
    status,
    web_spec,
    write_static_pod,
)
from tests.integration.conftest import wait_for
from tests.kubeadm_control_plane import (
    APISERVER_ARGS,
    TOKEN_ID,
    TOKEN_SECRET,
    discovery_file,
    kubeadm_config,
    prepare_control_plane,
    signing_args,
)
from tests.vm.guest import (
    BUSYBOX,
    DRIVER,
    LOG_QUERY,
    POD_PIDS_LIMIT,
    POD_TIMEOUT,
    READ_ONLY_PORT,
    USERNS,
    compare_with_kubelet,
    pod_name,
    pod_slices,
    read,
    read_only,
    service_pid,
    spin,
    unit_property,
    units_active,
)


def _pod_cgroup(pod: dict) -> str:
    return "/sys/fs/cgroup" + on_host(pod_name(pod), "systemd")


def _container_cgroup(pod: dict, index: int = 0) -> str:
    return container_cgroup(_pod_cgroup(pod), pod["containers"][index]["containerID"].removeprefix("containerd://"))


def test_install_brings_the_node_up_on_systemd_and_cgroup_v2(vm):
    assert vm.run("stat", "-fc", "%T", "/sys/fs/cgroup").stdout.strip() == "cgroup2fs"
    assert vm.run("ps", "-o", "comm=", "-p", "1").stdout.strip() == "systemd"

    push_images(vm, timeout=300)
    install = vm.run(*install_args("pykubelet-vm", "10.0.2.15", "--enable"), timeout=300)
    assert "wrote /etc/systemd/system/pykubelet.target" in install.stdout, install.stdout
    assert "cgroupDriver: systemd" in vm.run("cat", "/etc/pykubelet/config.yaml").stdout
    assert "SystemdCgroup = true" in vm.run("cat", "/var/lib/pykubelet/containerd/config.toml").stdout
    write_static_pod(vm, "web", web_spec())

    # Type=notify: start returns once every service says it is ready.
    vm.run("systemctl", "start", "pykubelet.target", timeout=900)
    assert not units_active(vm), vm.run("systemctl", "status", "--no-pager", "-n", "20", *units_active(vm),
                                         check=False).stdout
    pod = wait_for(lambda: running_pod(vm, "web"), POD_TIMEOUT, "the web pod Running", interval=5)
    page = vm.run("busybox", "wget", "-qO-", f"http://{pod['podIP']}/")
    assert "pykubelet" in page.stdout
    # containerd says the driver pod-sync checks against its own.
    assert vm.run(PY, "-c", DRIVER).stdout.strip() == "systemd"
    # The pod is a slice of systemd's, its container a scope in it.
    unit = slice_unit(pod_name(pod))
    assert unit_property(vm, unit, "ActiveState") == "active"
    assert vm.run("test", "-d", _container_cgroup(pod), check=False).returncode == 0, _container_cgroup(pod)
    # pykubelet's own processes in one slice of their own (containerd beside them, in system.slice).
    for service in SERVICES:
        assert unit_property(vm, f"pykubelet-{service}.service", "Slice") == "pykubelet.slice", service
    assert unit_property(vm, "pykubelet-containerd.service", "Slice") == "system.slice"
    # singleProcessOOMKill unset on cgroup v2: an OOM kill takes the container's every process.
    assert read(vm, f"{_container_cgroup(pod)}/memory.oom.group") == "1"
    # Node allocatable (enforceNodeAllocatable: pods, no reservations): the node's memory.
    mem_total = next(int(line.split()[1]) for line in vm.run("cat", "/proc/meminfo").stdout.splitlines()
                     if line.startswith("MemTotal:"))
    assert read(vm, "/sys/fs/cgroup/kubepods.slice/memory.max") == str(mem_total * 1024)
    assert unit_property(vm, "kubepods.slice", "MemoryMax") == str(mem_total * 1024)

    # oomScoreAdj and maxOpenFiles at the kubelet's defaults, given by the units (OOMScoreAdjust=,
    # LimitNOFILE=): the services themselves have no CAP_SYS_RESOURCE.
    for service in SERVICES:
        pid = service_pid(vm, f"pykubelet-{service}.service")
        assert read(vm, f"/proc/{pid}/oom_score_adj") == "-999", service
        files = next(line for line in read(vm, f"/proc/{pid}/limits").splitlines() if line.startswith("Max open files"))
        assert files.split()[3:5] == ["1000000", "1000000"], (service, files)

    # makeIPTablesUtilChains: the network unit's sandbox (CAP_NET_ADMIN, AF_NETLINK) lets it make
    # the kubelet's chains in the guest's iptables (nft).
    wait_for(lambda: vm.run("iptables", "-w", "5", "-t", "mangle", "-S", "KUBE-IPTABLES-HINT",
                            check=False).returncode == 0, 60, "the KUBE-IPTABLES-HINT chain", interval=2)
    assert "-A INPUT -j KUBE-FIREWALL" in vm.run("iptables", "-w", "5", "-S", "INPUT").stdout
    assert "block incoming localnet connections" in vm.run("iptables", "-w", "5", "-S", "KUBE-FIREWALL").stdout

    # What the README tells an operator to look at.
    target = vm.run("systemctl", "status", "--no-pager", "pykubelet.target", check=False).stdout
    assert "active" in target, target
    journal = vm.run("journalctl", "-u", "pykubelet-pod-sync.service", "--no-pager", "-o", "cat").stdout
    assert "pod-sync running" in journal, journal[-2000:]
    # ... and what a node log query (enableSystemLogQuery) answers for the unit: its journal.
    queried = vm.run(PY, "-c", LOG_QUERY, timeout=120).stdout
    lines = [line for line in queried.splitlines() if line and not line.startswith("--")]
    assert lines and all("pod-sync running" in line for line in lines), queried[-2000:]  # pattern: --grep


def _status(vm, pid: str) -> dict[str, str]:
    return parse_status(read(vm, f"/proc/{pid}/status"))


def _slice_pss_kib(vm) -> int:
    """PSS of every process in pykubelet.slice (the services, the preload, the bus)."""
    script = ("import glob\nt=0\nfor f in glob.glob('/sys/fs/cgroup/pykubelet.slice/**/cgroup.procs', recursive=True):\n"
              " for p in open(f).read().split():\n"
              "  try: t+=sum(int(l.split()[1]) for l in open(f'/proc/{p}/smaps_rollup') if l.startswith('Pss:'))\n"
              "  except OSError: pass\nprint(t)")
    return int(vm.run(PY, "-c", script).stdout.strip())


def _pss_kib(vm, pid: str) -> int:
    rollup = read(vm, f"/proc/{pid}/smaps_rollup")
    return next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))


def _forked_from_preload(vm) -> bool:
    preload = unit_property(vm, "pykubelet-preload.service", "MainPID")
    return all(_status(vm, service_pid(vm, f"pykubelet-{s}.service")).get("PPid") == preload for s in SERVICES)


def test_every_service_is_forked_from_the_preload_unit_in_its_own_units_sandbox(vm):
    """Each service unit's service is a child of pykubelet-preload.service (the imported code
    shared), in the unit's cgroup and sandbox, beside the unit's main process (its launcher, which
    systemd started): started, stopped, restarted and failed by systemd as its unit's."""
    preload = unit_property(vm, "pykubelet-preload.service", "MainPID")
    host_mnt = vm.run("readlink", "/proc/1/ns/mnt").stdout.strip()
    for service in SERVICES:
        unit = f"pykubelet-{service}.service"
        pid = service_pid(vm, unit)
        main = unit_property(vm, unit, "MainPID")
        status = _status(vm, pid)
        assert status["PPid"] == preload and pid != main, vm.run(
            "journalctl", "--no-pager", "-o", "cat", "-n", "60", "-u", unit, "-u", "pykubelet-preload.service").stdout
        assert _status(vm, main)["PPid"] == "1", service  # the launcher: systemd's own child
        # ... become the shell that waits for the service (services/supervisor/unit_waiter.sh).
        assert "unit_waiter.sh" in read(vm, f"/proc/{main}/cmdline"), service
        assert read(vm, f"/proc/{pid}/cgroup") == f"0::/pykubelet.slice/{unit}", service
        assert status["NoNewPrivs"] == "1", service
        mnt = vm.run("readlink", f"/proc/{pid}/ns/mnt").stdout.strip()
        # pod-sync's and volume's units have no mount namespace (their mounts must reach containerd);
        # the others do, and the forked service is in it.
        assert (mnt == host_mnt) == (service in ("pod-sync", "volume")), (service, mnt, host_mnt)
        if service not in ("pod-sync", "volume"):
            assert status["Seccomp"] == "2", service  # SystemCallFilter=@system-service
        # Its command line whole, as `ps` and kube-bench read it: the unit's flags, flags.env's last.
        args = vm.run("ps", "-o", "args=", "-p", pid).stdout.strip()
        assert args.startswith(f"pykubelet {service} --config") and args.endswith("--node-ip=10.0.2.15"), args
    assert int(_status(vm, service_pid(vm, "pykubelet-node-api.service"))["CapBnd"], 16) == 1 << 2
    assert int(_status(vm, service_pid(vm, "pykubelet-network.service"))["CapBnd"], 16) == 1 << 12
    journal = vm.run("journalctl", "-u", "pykubelet-probe.service", "--no-pager", "-o", "cat").stdout
    assert "not forked" not in journal, journal[-2000:]

    # systemd follows the forked service through its launcher: a stop waits for the service's own
    # clean stop, a restart forks a new one, a killed one is restarted (Restart=always), and the
    # unit is active again in both cases.
    probe = "pykubelet-probe.service"
    before = service_pid(vm, probe)
    since = vm.run("date", "+%Y-%m-%d %H:%M:%S").stdout.strip()
    vm.run("systemctl", "restart", probe, timeout=180)
    stopped = vm.run("journalctl", "-u", probe, "--since", since, "--no-pager", "-o", "cat").stdout
    assert "probe stopped" in stopped and "SIGKILL" not in stopped, stopped
    after = service_pid(vm, probe)
    assert after != before and _status(vm, after)["PPid"] == preload
    vm.run("kill", "-9", after)
    wait_for(lambda: service_pid(vm, probe) not in (after, unit_property(vm, probe, "MainPID"))
             and unit_property(vm, probe, "ActiveState") == "active", 180,
             "the killed probe restarted by systemd", interval=2)
    assert _status(vm, service_pid(vm, probe))["PPid"] == preload
    # A service that fails to start fails its unit's start at once, with its own exit code (2:
    # a configuration it cannot read), as an exec'd service would.
    dropin = "/run/systemd/system/pykubelet-probe.service.d/bad-config.conf"
    vm.run("mkdir", "-p", str(Path(dropin).parent))
    vm.run("sh", "-c", f"cat > {dropin}", input=f"[Service]\nRestart=no\nExecStart=\nExecStart={PY} -m "
                                                  "services.cli.main fork probe --config /no/such/config.yaml\n")
    try:
        vm.run("systemctl", "daemon-reload")
        began = time.monotonic()
        failed = vm.run("systemctl", "restart", probe, timeout=300, check=False)
        took = time.monotonic() - began
        assert failed.returncode != 0, failed.stdout
        assert (unit_property(vm, probe, "Result"), unit_property(vm, probe, "ExecMainStatus")) == ("exit-code", "2")
        print(f"\na failing start of the forked probe failed its unit in {took:.1f}s")
    finally:
        vm.run("rm", "-f", dropin)
        vm.run("systemctl", "daemon-reload")
        vm.run("systemctl", "restart", probe, timeout=180)

    # The footprint, with and without the preload, each 30 s after the services restarted (printed,
    # not asserted: make bench measures footprints).
    units = [f"pykubelet-{s}.service" for s in SERVICES]

    def restarted_pss() -> int:
        # ignore-dependencies: the units' Wants= would start a stopped preload unit again.
        vm.run("systemctl", "restart", "--job-mode=ignore-dependencies", *units, timeout=600)
        time.sleep(30)
        return _slice_pss_kib(vm)

    forked_pss = restarted_pss()
    assert _forked_from_preload(vm)
    waiters_pss = sum(_pss_kib(vm, unit_property(vm, unit, "MainPID")) for unit in units)
    vm.run("systemctl", "stop", "pykubelet-preload.service", timeout=120)
    exec_pss = restarted_pss()
    journal = vm.run("journalctl", "-u", "pykubelet-probe.service", "--no-pager", "-o", "cat", "-n", "50").stdout
    assert "not forked from the preloaded services: no fork server" in journal, journal[-2000:]
    assert units_active(vm) == ["pykubelet-preload.service"], units_active(vm)
    print()
    print(f"pykubelet.slice PSS: {forked_pss / 1024:.0f} MiB forked from the preload unit, "
          f"{exec_pss / 1024:.0f} MiB with every service an interpreter of its own; the seven units' main "
          f"processes (their waiters) {waiters_pss / 1024:.1f} MiB of the first")
    vm.run("systemctl", "start", "pykubelet-preload.service", timeout=180)
    vm.run("systemctl", "restart", *units, timeout=600)
    assert not units_active(vm), units_active(vm)
    assert _forked_from_preload(vm)
    wait_for(lambda: running_pod(vm, "web"), POD_TIMEOUT, "the web pod Running through the restarts", interval=5)


def test_a_unit_with_kubelet_cgroups_set_refuses_to_start_saying_to_use_slice(vm):
    """kubeletCgroups: a service moves itself there as the kubelet does, but a unit's sandbox
    (ProtectControlGroups) keeps /sys/fs/cgroup read-only: the service's start fails with its
    configuration's exit code and says what to do instead, rather than run where it was not asked."""
    probe, config = "pykubelet-probe.service", "/etc/pykubelet/config.yaml"
    dropin = "/run/systemd/system/pykubelet-probe.service.d/no-restart.conf"
    vm.run("cp", config, f"{config}.before-kubelet-cgroups")
    vm.run("mkdir", "-p", str(Path(dropin).parent))
    vm.run("sh", "-c", f"cat > {dropin}", input="[Service]\nRestart=no\n")
    try:
        vm.run("sh", "-c", f"cat >> {config}", input="kubeletCgroups: /kube.slice/kubelet.service\n")
        vm.run("systemctl", "daemon-reload")
        failed = vm.run("systemctl", "restart", probe, timeout=300, check=False)
        assert failed.returncode != 0, failed.stdout
        assert (unit_property(vm, probe, "Result"), unit_property(vm, probe, "ExecMainStatus")) == ("exit-code", "2")
        journal = vm.run("journalctl", "-u", probe, "--no-pager", "-o", "cat", "-n", "30").stdout
        assert "kubeletCgroups /kube.slice/kubelet.service: cannot move probe" in journal, journal[-2000:]
        assert "Read-only file system" in journal and "placed by their Slice=" in journal, journal[-2000:]
    finally:
        vm.run("mv", f"{config}.before-kubelet-cgroups", config)
        vm.run("rm", "-f", dropin)
        vm.run("systemctl", "daemon-reload")
        vm.run("systemctl", "restart", probe, timeout=300)
    assert not units_active(vm), units_active(vm)


def test_a_burstable_pod_gets_the_cpu_a_best_effort_pod_wants_too(vm):
    """Both pods spin on both CPUs; the Burstable one asked for 1500m. The kubelet's tiers give the
    BestEffort tier the minimum weight and the Burstable tier its pods' requests, so the Burstable
    pod takes at least 90% of the CPU they use together."""
    write_static_pod(vm, "burstable-spin", {"terminationGracePeriodSeconds": 0, "containers": [
        spin("app", 2, resources={"requests": {"cpu": "1500m"}})]})
    write_static_pod(vm, "besteffort-spin", {"terminationGracePeriodSeconds": 0, "containers": [spin("app", 2)]})
    b = wait_for(lambda: running_pod(vm, "burstable-spin"), POD_TIMEOUT, "the Burstable spinner", interval=5)
    e = wait_for(lambda: running_pod(vm, "besteffort-spin"), POD_TIMEOUT, "the BestEffort spinner", interval=5)
    assert (b["status"]["qosClass"], e["status"]["qosClass"]) == ("Burstable", "BestEffort")
    # cgroup v2 weights: shares 1536 -> 59, shares 2 -> 1 (the kubelet's conversion), as the
    # slices' properties, so systemd keeps them.
    burstable_weight = str(1 + ((1536 - 2) * 9999) // 262142)
    assert read(vm, "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/cpu.weight") == "1"
    assert read(vm, "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cpu.weight") == burstable_weight
    assert unit_property(vm, "kubepods-burstable.slice", "CPUWeight") == burstable_weight
    vm.run("systemctl", "daemon-reload")  # systemd writes every cgroup again from its units
    assert read(vm, "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cpu.weight") == burstable_weight

    def usage(pod: dict) -> int:
        stat = dict(line.split() for line in read(vm, f"{_pod_cgroup(pod)}/cpu.stat").splitlines())
        return int(stat["usage_usec"])
    before = usage(b), usage(e)
    time.sleep(15)
    got_b, got_e = usage(b) - before[0], usage(e) - before[1]
    share = got_b / (got_b + got_e)
    print(f"burstable {got_b / 1e6:.1f}s of CPU, best-effort {got_e / 1e6:.1f}s: {share:.1%}")
    assert share >= 0.9, f"burstable {got_b / 1e6:.1f}s of CPU, best-effort {got_e / 1e6:.1f}s ({share:.1%})"
    for name in ("burstable-spin", "besteffort-spin"):
        vm.run("rm", f"/etc/kubernetes/manifests/{name}.yaml")
    # Gone before the next test: spinners left behind would starve what it starts.
    for pod in (b, e):
        wait_for(lambda p=pod: vm.run("test", "-d", _pod_cgroup(p), check=False).returncode != 0, POD_TIMEOUT,
                 "the spinner's slice removed", interval=5)


def test_the_summary_and_cadvisor_metrics_show_pressure_stalls_on_cgroup_v2(vm):
    """The kubelet 1.37 reports pressure stall information (KubeletPSI, on and locked): two
    spinners of two loops each on the guest's two CPUs wait for the CPU, and /stats/summary shows
    it in the pod's and the container's cpu.psi (the kernel's cpu.pressure of their slice and
    scope), beside memory.psi and io.psi and the node's own; /metrics/cadvisor has the same as
    container_pressure_* counters. Read on the read-only port, turned on for the test."""
    config = "/etc/pykubelet/config.yaml"
    vm.run("cp", config, f"{config}.before-psi")
    try:
        vm.run("sed", "-i", f"s/^readOnlyPort: 0$/readOnlyPort: {READ_ONLY_PORT}/", config)
        assert f"readOnlyPort: {READ_ONLY_PORT}" in read(vm, config)
        vm.run("systemctl", "restart", "pykubelet-node-api.service", timeout=900)
        for name in ("spin-a", "spin-b"):
            write_static_pod(vm, name, {"terminationGracePeriodSeconds": 0, "containers": [spin("app", 2)]})
        pods = [wait_for(lambda n=name: running_pod(vm, n), POD_TIMEOUT, f"the spinner {name}", interval=5)
                for name in ("spin-a", "spin-b")]
        time.sleep(15)  # the kernel's 10-second average fills

        def waited(pod: dict) -> dict | None:
            summary = json.loads(read_only(vm, "/stats/summary"))
            found = [p for p in summary["pods"] if p["podRef"]["uid"] == pod["uid"]]
            return (summary | {"pod": found[0]}) if found and "psi" in found[0].get("cpu", {}) else None
        summary = wait_for(lambda: waited(pods[0]), 120, "the spinner's stats with PSI", interval=5)
        pod, node = summary["pod"], summary["node"]
        some = pod["cpu"]["psi"]["some"]
        print(f"spinner pod cpu.psi some: avg10 {some['avg10']}%, total {some['total']} us")
        assert some["total"] > 0 and some["avg10"] > 0, pod["cpu"]["psi"]
        [app] = pod["containers"]
        assert app["cpu"]["psi"]["some"]["total"] > 0, app
        for stats in (node, pod, app):
            assert set(stats["memory"]["psi"]) == set(stats["io"]["psi"]) == {"full", "some"}, stats
            assert set(stats["cpu"]["psi"]["full"]) == {"total", "avg10", "avg60", "avg300"}
        assert node["cpu"]["psi"]["some"]["total"] >= some["total"], "the node's covers its pods'"
        # The "kubelet" system container: pykubelet.slice, which holds every service and the bus.
        system = {c["name"]: c for c in node["systemContainers"]}
        assert set(system) == {"kubelet", "pods"}, system.keys()
        slice_memory = int(read(vm, "/sys/fs/cgroup/pykubelet.slice/memory.current"))
        assert 0 < system["kubelet"]["memory"]["usageBytes"] <= 2 * slice_memory, (system["kubelet"], slice_memory)
        assert system["kubelet"]["cpu"]["usageCoreNanoSeconds"] > 0

        slice_id = on_host(pod_name(pods[0]), "systemd")
        metrics = read_only(vm, "/metrics/cadvisor")
        line = next((m for m in metrics.splitlines() if m.startswith("container_pressure_cpu_waiting_seconds_total{")
                     and f'id="{slice_id}"' in m), None)
        assert line is not None and float(line.split()[1]) > 0, line
    finally:
        for name in ("spin-a", "spin-b"):
            vm.run("rm", "-f", f"/etc/kubernetes/manifests/{name}.yaml")
        vm.run("mv", f"{config}.before-psi", config)
        vm.run("systemctl", "restart", "pykubelet-node-api.service", timeout=900)
        wait_for(lambda: pod_slices(vm) <= 1, POD_TIMEOUT, "the spinners' slices gone (the web pod's stays)",
                 interval=5)


def test_pod_limits_land_in_the_pod_and_container_cgroups(vm):
    write_static_pod(vm, "guaranteed", {"terminationGracePeriodSeconds": 0, "containers": [{
        "name": "app", "image": BUSYBOX, "command": ["sleep", "3600"],
        "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}}}]})
    pod = wait_for(lambda: running_pod(vm, "guaranteed"), POD_TIMEOUT, "the Guaranteed pod", interval=5)
    assert pod["status"]["qosClass"] == "Guaranteed"
    assert _pod_cgroup(pod).startswith("/sys/fs/cgroup/kubepods.slice/kubepods-pod")
    for cgroup in (_pod_cgroup(pod), _container_cgroup(pod)):
        assert read(vm, f"{cgroup}/cpu.max") == "20000 100000", cgroup
        assert read(vm, f"{cgroup}/memory.max") == str(64 * 2**20), cgroup
    assert read(vm, f"{_pod_cgroup(pod)}/pids.max") == str(POD_PIDS_LIMIT)
    assert read(vm, f"{_pod_cgroup(pod)}/cpu.weight") == str(1 + ((204 - 2) * 9999) // 262142)
    assert unit_property(vm, slice_unit(pod_name(pod)), "MemoryMax") == str(64 * 2**20)
    # The pod gone, its slice goes too.
    vm.run("rm", "/etc/kubernetes/manifests/guaranteed.yaml")
    wait_for(lambda: vm.run("test", "-d", _pod_cgroup(pod), check=False).returncode != 0, POD_TIMEOUT,
             "the pod's slice removed", interval=5)


def test_an_oom_kill_ends_every_process_of_the_container(vm):
    """cgroup v2, singleProcessOOMKill unset (the kubelet's default there): the container's cgroup
    has memory.oom.group 1, so when a child process runs it out of memory the kernel kills the
    whole container, the shell waiting on its sleep too, and the container ends OOMKilled (on
    cgroup v1 the hog alone would die and the container run on, never ending)."""
    write_static_pod(vm, "oom-group", {"terminationGracePeriodSeconds": 0, "restartPolicy": "Never", "containers": [{
        "name": "app", "image": BUSYBOX, "resources": {"limits": {"memory": "32Mi"}},
        "command": ["sh", "-c", "(sleep 2; tail /dev/zero) & exec sleep 3600"]}]})
    try:
        # No wait for Running: on this emulated CPU the hog may be killed before a poll sees it.
        def ended() -> dict | None:
            found = [p for p in status(vm)["pods"] if p["name"].startswith("oom-group-")]
            return found[0] if found and found[0]["containers"][0]["state"] == "terminated" else None
        done = wait_for(ended, POD_TIMEOUT, "the container killed whole", interval=2)
        assert done["containers"][0]["reason"] == "OOMKilled", done["containers"]
    finally:
        vm.run("rm", "-f", "/etc/kubernetes/manifests/oom-group.yaml")


RESERVED = ("enforceNodeAllocatable: [pods, system-reserved, kube-reserved]\n"
            "systemReservedCgroup: /system.slice\nsystemReserved: {cpu: 200m, pid: '100000'}\n"
            "kubeReservedCgroup: /kubereserved.slice\nkubeReserved: {memory: 64Mi, pid: '1000'}\n")


def test_system_and_kube_reserved_are_enforced_on_their_slices_through_systemd(vm):
    """cgroupDriver systemd: system.slice (systemd's own) and a slice made for the kube daemons
    get the reservations as unit properties, so systemd writes the files and a daemon-reload
    keeps them; kubepods.slice is capped at the node's memory minus the reservations."""
    config = "/etc/pykubelet/config.yaml"
    vm.run("cp", config, f"{config}.before-reserved")
    vm.run("sh", "-c", "cat > /etc/systemd/system/kubereserved.slice",
           input="[Unit]\nDescription=the kube daemons' reservation (test)\n[Slice]\n")
    try:
        vm.run("systemctl", "daemon-reload")
        vm.run("systemctl", "start", "kubereserved.slice")
        vm.run("sh", "-c", f"cat >> {config}", input=RESERVED)
        vm.run("systemctl", "restart", "pykubelet-pod-sync.service", timeout=900)
        assert unit_property(vm, "pykubelet-pod-sync.service", "ActiveState") == "active"
        weight = str(1 + ((204 - 2) * 9999) // 262142)  # 200m as shares (204), as a weight
        vm.run("systemctl", "daemon-reload")  # systemd writes the files again from the properties
        assert unit_property(vm, "system.slice", "CPUWeight") == weight
        assert read(vm, "/sys/fs/cgroup/system.slice/cpu.weight") == weight
        assert read(vm, "/sys/fs/cgroup/system.slice/pids.max") == "100000"
        assert read(vm, "/sys/fs/cgroup/system.slice/memory.max") == "max", "system.slice reserves no memory"
        assert unit_property(vm, "kubereserved.slice", "MemoryMax") == str(64 * 2**20)
        assert read(vm, "/sys/fs/cgroup/kubereserved.slice/memory.max") == str(64 * 2**20)
        assert read(vm, "/sys/fs/cgroup/kubereserved.slice/pids.max") == "1000"
        mem_total = next(int(line.split()[1]) for line in vm.run("cat", "/proc/meminfo").stdout.splitlines()
                         if line.startswith("MemTotal:"))
        assert read(vm, "/sys/fs/cgroup/kubepods.slice/memory.max") == str(mem_total * 1024 - 64 * 2**20)

        # A slice that is not there refuses the start in the kubelet's words.
        vm.run("systemctl", "stop", "kubereserved.slice")
        vm.run("systemctl", "restart", "pykubelet-pod-sync.service", timeout=900, check=False)
        refusal = 'failed to enforce Kube Reserved Cgroup Limits on "/kubereserved.slice"'

        def journal() -> str | None:
            text = vm.run("journalctl", "-u", "pykubelet-pod-sync.service", "-n", "60", "--no-pager",
                          "-o", "cat").stdout
            return text if refusal in text else None
        wait_for(journal, 120, "pod-sync's refusal in its journal", interval=3)
    finally:
        vm.run("mv", f"{config}.before-reserved", config)
        vm.run("rm", "-f", "/etc/systemd/system/kubereserved.slice")
        vm.run("systemctl", "stop", "kubereserved.slice", check=False)
        vm.run("systemctl", "revert", "system.slice", check=False)  # the runtime properties set above
        vm.run("systemctl", "daemon-reload")
        vm.run("systemctl", "restart", "pykubelet-pod-sync.service", timeout=900)


# Set for both agents: memory.high on the containers that have room between request and limit,
# memory.min and memory.low from the memory requests.
MEMORY_QOS = "memoryThrottlingFactor: 0.9\nmemoryReservationPolicy: TieredReservation\n"


def test_the_kubelet_1_37_in_this_guest_sets_the_cgroups_pykubelet_sets(vm):
    """The same three pods (Guaranteed, Burstable, BestEffort) under pykubelet, then under the
    kubelet 1.37, on one containerd 2.x in this guest (tests/vm/guest.py): every value either
    agent leaves in the pods' slices, their containers' scopes, the QoS tiers and kubepods.slice
    is the same, and so is the container's oom_score_adj; the Burstable spinner's share of the
    CPU is printed beside. Both run with memoryThrottlingFactor 0.9, so the Burstable and
    BestEffort containers get a memory.high, and memoryReservationPolicy TieredReservation, so
    the Guaranteed pod's memory request is its memory.min, the Burstable pod's its memory.low,
    and the tiers hold both."""
    cmp = compare_with_kubelet(vm, MEMORY_QOS)
    print(cmp.table())
    print(cmp.shapes())
    assert not cmp.summary_fields_only_ours(), f"fields the kubelet 1.37 has not: {cmp.summary_fields_only_ours()}"
    missing = cmp.their_cadvisor - cmp.our_cadvisor
    assert not missing, f"/metrics/cadvisor families only the kubelet 1.37 has: {sorted(missing)}"
    assert not cmp.differ(), f"pykubelet and the kubelet 1.37 differ (pykubelet, kubelet): {cmp.differ()}"
    ours = cmp.ours
    # floor(64Mi + 0.9 x (256Mi - 64Mi)), down to a page; none where request is limit.
    assert (ours["container/cmp-burstable/memory.high"], ours["container/cmp-guaranteed/memory.high"]) == \
        ("248299520", "max")
    # 64Mi requested by each: held outright for the Guaranteed pod, softly for the Burstable one.
    mi64 = str(64 * 2**20)
    assert (ours["pod/cmp-guaranteed/memory.min"], ours["container/cmp-guaranteed/memory.min"],
            ours["pod/cmp-burstable/memory.low"], ours["container/cmp-burstable/memory.low"],
            ours["tier/burstable/memory.low"], ours["kubepods/memory.low"]) == (mi64,) * 6
    assert ours["kubepods/memory.min"] == str(128 * 2**20)
    wait_for(lambda: running_pod(vm, "web"), POD_TIMEOUT, "the web pod Running again under pykubelet", interval=5)


def test_a_reboot_brings_the_node_and_its_pods_back(vm):
    before = running_pod(vm, "web")
    assert before is not None
    vm.reboot()
    assert vm.run("systemctl", "is-enabled", "pykubelet.target").stdout.strip() == "enabled"
    wait_for(lambda: not units_active(vm), 900, "every unit active after the reboot", interval=5)
    after = wait_for(lambda: running_pod(vm, "web"), POD_TIMEOUT, "the web pod Running after the reboot",
                     interval=5)
    # The containers went with the old boot: a new sandbox and container, the same pod.
    assert after["uid"] == before["uid"]
    assert after["containers"][0]["containerID"] != before["containers"][0]["containerID"]
    assert "pykubelet" in vm.run("busybox", "wget", "-qO-", f"http://{after['podIP']}/").stdout


def _meminfo_kib(vm, field: str) -> int:
    return next(int(line.split()[1]) for line in vm.run("cat", "/proc/meminfo").stdout.splitlines()
                if line.startswith(f"{field}:"))


def _pressure(vm) -> dict:
    return status(vm)["pressure"]


def test_memory_pressure_is_seen_on_cgroup_v2(vm):
    """eviction reads the node's memory on cgroup v2 (the root from /proc/meminfo, the pods from
    kubepods.slice): a hog that takes memory.available below its hard threshold puts the node
    under MemoryPressure, which `pykubelet status` shows with the signal. The hog is a static
    pod, which the kubelet never evicts, so it stays."""
    threshold_mib = _meminfo_kib(vm, "MemAvailable") // 1024 - 400  # 400Mi below what is free now
    vm.run("sh", "-c", "cat >> /etc/pykubelet/config.yaml",
           input=f"evictionHard:\n  memory.available: {threshold_mib}Mi\n")
    vm.run("systemctl", "restart", "pykubelet.target", timeout=900)
    wait_for(lambda: not units_active(vm), 900, "every unit active after the restart", interval=5)
    signals = {s["signal"]: s for s in wait_for(lambda: _pressure(vm)["signals"], 300, "memory signals", interval=5)}
    assert signals["memory.available"]["hard"]["thresholdValue"] == threshold_mib * 2**20
    assert not signals["memory.available"]["hard"]["met"], signals["memory.available"]
    assert "allocatableMemory.available" in signals, "the pods' working set, read from kubepods.slice"

    # 8 x 100Mi held by dd processes that wait to write into a pipe nobody reads.
    hog = " ".join(["dd if=/dev/zero bs=100M count=1 2>/dev/null | sleep 3600 &"] * 8) + " sleep 3600"
    write_static_pod(vm, "hog", {"terminationGracePeriodSeconds": 0, "containers": [
        {"name": "hog", "image": BUSYBOX, "command": ["sh", "-c", hog]}]})
    wait_for(lambda: any(c["type"] == "MemoryPressure" and c["status"] for c in _pressure(vm)["conditions"]),
             POD_TIMEOUT, "MemoryPressure", interval=5)
    seen = {s["signal"]: s for s in _pressure(vm)["signals"]}["memory.available"]
    print(f"memory.available {seen['available'] / 2**20:.0f}Mi against a threshold of {threshold_mib}Mi")
    assert seen["hard"]["met"], seen
    assert running_pod(vm, "hog") is not None, "a static pod is not evicted"
    vm.run("rm", "/etc/kubernetes/manifests/hog.yaml")


def _stopper(log: str, cleanup_seconds: int, **spec) -> dict:
    """A pod that, on SIGTERM, notes when, takes cleanup_seconds to finish, and notes that it did,
    in a file on the host that outlives the boot."""
    on_term = (f"echo term $(date +%s) >> /out/{log}; sleep {cleanup_seconds}; "
               f"echo done $(date +%s) >> /out/{log}; exit 0")
    return {"terminationGracePeriodSeconds": 120, **spec, "containers": [
        {"name": "app", "image": BUSYBOX, "command": ["sh", "-c", f"trap '{on_term}' TERM; while :; do sleep 1; done"],
         "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
        "volumes": [{"name": "out", "hostPath": {"path": SHUTDOWN_LOGS, "type": "DirectoryOrCreate"}}]}


def _noted(vm, log: str) -> dict[str, int]:
    text = vm.run("cat", f"{SHUTDOWN_LOGS}/{log}", check=False).stdout
    return {word: int(when) for word, when in (line.split() for line in text.splitlines() if line.strip())}


SHUTDOWN_LOGS = "/var/lib/shutdown-test"
CLEANUP = 10  # seconds the ordinary pod takes to finish after SIGTERM


def test_poweroff_waits_for_the_pods_to_stop_the_critical_ones_last(vm):
    """shutdownGracePeriod 90s with 30s for critical pods: pykubelet raises logind's
    InhibitDelayMaxSec and holds a delay lock; `systemctl poweroff` then waits while the ordinary
    pod gets SIGTERM and its 10 s to finish, and only then the critical one; the next boot runs
    both static pods again."""
    vm.run("sh", "-c", "cat >> /etc/pykubelet/config.yaml",
           input="shutdownGracePeriod: 90s\nshutdownGracePeriodCriticalPods: 30s\n")
    vm.run("systemctl", "restart", "pykubelet-eviction.service", timeout=900)
    write_static_pod(vm, "ordinary", _stopper("ordinary", CLEANUP))
    write_static_pod(vm, "critical", _stopper("critical", 1, priority=2000001000))
    for name in ("ordinary", "critical"):
        wait_for(lambda n=name: running_pod(vm, n), POD_TIMEOUT, f"the {name} pod Running", interval=5)

    delay = vm.run("busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
                   "org.freedesktop.login1.Manager", "InhibitDelayMaxUSec").stdout.split()
    assert delay == ["t", str(90 * 10**6)], delay
    assert "InhibitDelayMaxSec=90" in vm.run("cat", "/etc/systemd/logind.conf.d/99-pykubelet.conf").stdout
    locks = vm.run("systemd-inhibit", "--list", "--no-pager").stdout
    assert any("pykubelet" in line and "shutdown" in line and "delay" in line for line in locks.splitlines()), locks
    # The journal of this boot is read after the next one.
    vm.run("sh", "-c", "mkdir -p /var/log/journal && systemd-tmpfiles --create --prefix /var/log/journal "
                       "&& journalctl --flush")

    took = vm.shut_down(timeout=600)
    print(f"`systemctl poweroff` took {took:.0f}s")
    vm.boot(starting=True)
    ordinary, critical = _noted(vm, "ordinary"), _noted(vm, "critical")
    assert set(ordinary) == {"term", "done"}, f"the ordinary pod was not given its time: {ordinary}"
    assert ordinary["done"] - ordinary["term"] >= CLEANUP
    assert set(critical) == {"term", "done"}, critical
    assert critical["term"] >= ordinary["done"], (ordinary, critical)
    journal = vm.run("journalctl", "-b", "-1", "-u", "pykubelet-eviction.service", "--no-pager", "-o", "cat").stdout
    assert "the node is shutting down: stopping its pods within 90s" in journal, journal[-3000:]
    assert "letting systemd-logind go on with the shutdown" in journal, journal[-3000:]

    wait_for(lambda: not units_active(vm), 900, "every unit active after the boot", interval=5)
    for name in ("ordinary", "critical", "web"):
        wait_for(lambda n=name: running_pod(vm, n), POD_TIMEOUT, f"the static pod {name} Running again",
                 interval=5)
    for name in ("ordinary", "critical"):
        vm.run("rm", f"/etc/kubernetes/manifests/{name}.yaml")


# (priority, seconds): what pods of that priority and up get, lowest group first.
BY_PRIORITY = [(0, 20), (1000, 20), (10000, 10)]


def test_poweroff_stops_the_pods_group_by_group_of_shutdown_grace_period_by_pod_priority(vm):
    """shutdownGracePeriodByPodPriority in place of the two periods: three groups, 50 s in all.
    The lowest group's pod, which would take 40 s, is killed at its group's 20 s; only then does
    the middle group's pod get SIGTERM, and it finishes; then the highest group's."""
    vm.run("sed", "-i", "/^shutdownGracePeriod/d", "/etc/pykubelet/config.yaml")
    vm.run("sh", "-c", "cat >> /etc/pykubelet/config.yaml", input="shutdownGracePeriodByPodPriority:\n" + "".join(
        f"- priority: {p}\n  shutdownGracePeriodSeconds: {s}\n" for p, s in BY_PRIORITY))
    vm.run("rm", "-rf", SHUTDOWN_LOGS)
    vm.run("systemctl", "restart", "pykubelet-eviction.service", timeout=900)
    pods = {"low": _stopper("low", 40), "mid": _stopper("mid", 5, priority=5000),
            "high": _stopper("high", 1, priority=20000)}
    try:
        for name, spec in pods.items():
            write_static_pod(vm, name, spec)
        for name in pods:
            wait_for(lambda n=name: running_pod(vm, n), POD_TIMEOUT, f"the {name} pod Running", interval=5)
        # Raised to the groups' sum when it is less; the earlier test's 90 s is more already.
        total = sum(s for _, s in BY_PRIORITY)
        delay = vm.run("busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
                       "org.freedesktop.login1.Manager", "InhibitDelayMaxUSec").stdout.split()
        assert delay[0] == "t" and int(delay[1]) >= total * 10**6, delay
        vm.run("journalctl", "--flush")

        took = vm.shut_down(timeout=600)
        print(f"`systemctl poweroff` took {took:.0f}s")
        vm.boot(starting=True)
        low, mid, high = _noted(vm, "low"), _noted(vm, "mid"), _noted(vm, "high")
        assert set(low) == {"term"}, f"the lowest group's pod was not killed at its group's 20 s: {low}"
        assert set(mid) == {"term", "done"} and set(high) == {"term", "done"}, (mid, high)
        assert mid["term"] >= low["term"] + BY_PRIORITY[0][1] - 2, f"the middle group began early: {low}, {mid}"
        assert high["term"] >= mid["done"], (mid, high)
        journal = vm.run("journalctl", "-b", "-1", "-u", "pykubelet-eviction.service", "--no-pager",
                         "-o", "cat").stdout
        for priority, seconds in BY_PRIORITY:
            assert f"of priority {priority} and up within {seconds}s" in journal, journal[-3000:]
        wait_for(lambda: not units_active(vm), 900, "every unit active after the boot", interval=5)
    finally:
        vm.run("rm", "-f", *(f"/etc/kubernetes/manifests/{name}.yaml" for name in pods), check=False)


def _guest_kubeconfig(cp) -> str:
    """The node's kubeconfig with its files inlined, for the guest: the API server is at the
    same address there (an ssh tunnel), so the server's certificate still names it."""
    def data(path) -> str:
        return base64.b64encode(Path(path).read_bytes()).decode()
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {cp.server}\n"
            f"    certificate-authority-data: {data(cp.ca)}\nusers:\n- name: node\n  user:\n"
            f"    client-certificate-data: {data(cp.node_cert.cert)}\n    client-key-data: {data(cp.node_cert.key)}\n"
            "contexts:\n- name: test\n  context: {cluster: test, user: node}\ncurrent-context: test\n")


def _api_pod(cp, name: str) -> dict | None:
    res = cp.kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else None


def _running(pod: dict | None) -> bool:
    return pod is not None and pod.get("status", {}).get("phase") == "Running" and all(
        "running" in c.get("state", {}) for c in pod["status"].get("containerStatuses", []))


SWAP_MIB = 768
PAGE = 4096
# Its share of the swap: 512Mi of the guest's ~2.9Gi of memory, so about 130Mi; it asks for 60Mi
# more than its limit.
SWAPPER_REQUEST_MIB, SWAPPER_LIMIT_MIB, SWAPPER_HOLDS_MIB = 512, 560, 620


def test_containers_swap_as_memory_swap_says(vm, tmp_path):
    """With swap on (failSwapOn: false): NoSwap, the default, holds every container at
    memory.swap.max 0. LimitedSwap gives a Burstable pod from the API server its share of the
    node's swap (request / MemTotal x SwapTotal), and its pages go to swap once it outgrows its
    memory limit; a static pod (critical) still gets none, and the Node reports the swap it has.
    Runs after the host tests: it turns the guest into a node of a cluster."""
    vm.run("sh", "-c", f"fallocate -l {SWAP_MIB}M /swapfile && chmod 600 /swapfile && mkswap -q /swapfile "
                       "&& swapon /swapfile")
    vm.run("sh", "-c", "cat >> /etc/pykubelet/config.yaml", input="failSwapOn: false\n")
    vm.run("systemctl", "restart", "pykubelet.target", timeout=900)
    wait_for(lambda: not units_active(vm), 900, "every unit active with swap on", interval=5)
    web = wait_for(lambda: running_pod(vm, "web"), POD_TIMEOUT, "the web pod Running", interval=5)
    assert read(vm, f"{_container_cgroup(web)}/memory.swap.max") == "0", "NoSwap: no container swaps"

    cp = ControlPlane(tmp_path / "control-plane", "pykubelet-vm")
    tunnel = None
    try:
        cp.start()
        tunnel = subprocess.Popen([*vm.ssh_argv()[:-1], "-N", "-o", "ExitOnForwardFailure=yes", "-R",
                                   f"{cp.api_port}:127.0.0.1:{cp.api_port}", vm.ssh_argv()[-1]],
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        vm.run("sh", "-c", "umask 077 && cat > /etc/pykubelet/node.kubeconfig", input=_guest_kubeconfig(cp))
        vm.run(*install_args("pykubelet-vm", "10.0.2.15", "--kubeconfig", "/etc/pykubelet/node.kubeconfig"),
               timeout=300)
        # singleProcessOOMKill: an OOM kill of the dd (reclaim under emulation can be slower than the
        # OOM killer) ends the dd alone, and the container, its sleep still running, keeps the
        # cgroup whose memory.swap.max is read below; by default the whole container would go.
        vm.run("sh", "-c", "cat >> /etc/pykubelet/config.yaml",
               input="memorySwap:\n  swapBehavior: LimitedSwap\nsingleProcessOOMKill: true\n")
        vm.run("systemctl", "restart", "pykubelet.target", timeout=900)
        wait_for(lambda: not units_active(vm), 900, "every unit active with LimitedSwap", interval=5)
        node = wait_for(lambda: (n := cp.kubectl("get", "node", "pykubelet-vm", "-o", "json", check=False))
                        .returncode == 0 and json.loads(n.stdout), 300, "the guest registered as a Node", interval=5)
        swap_total = _meminfo_kib(vm, "SwapTotal") * 1024
        assert node["status"]["nodeInfo"]["swap"] == {"capacity": swap_total}

        # The pod holds more memory than its limit (a dd buffer it cannot write out), as the hog does.
        hold = f"dd if=/dev/zero bs={SWAPPER_HOLDS_MIB}M count=1 2>/dev/null | sleep 3600"
        manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "swapper", "namespace": "default"},
                    "spec": {"nodeName": "pykubelet-vm", "terminationGracePeriodSeconds": 0, "containers": [{
                        "name": "app", "image": BUSYBOX, "command": ["sh", "-c", hold],
                        "resources": {"requests": {"memory": f"{SWAPPER_REQUEST_MIB}Mi"},
                                      "limits": {"memory": f"{SWAPPER_LIMIT_MIB}Mi"}}}]}}
        cp.kubectl("apply", "-f", "-", input_text=json.dumps(manifest))
        wait_for(lambda: _running(_api_pod(cp, "swapper")), POD_TIMEOUT, "the swapper pod Running", interval=5)
        share = int(SWAPPER_REQUEST_MIB * 2**20 / (_meminfo_kib(vm, "MemTotal") * 1024) * swap_total)

        def swap_max() -> str | None:
            # Of the container running now: an OOM kill may have replaced the one seen before.
            pod = next(p for p in status(vm)["pods"] if p["name"] == "swapper")
            res = vm.run("cat", f"{_container_cgroup(pod)}/memory.swap.max", check=False)
            return res.stdout.strip() if res.returncode == 0 else None
        assert wait_for(swap_max, 120, "the swapper container's memory.swap.max", interval=2) == \
            str(share // PAGE * PAGE), "the kernel keeps whole pages"
        # The pod's slice outlives its containers, and counts their swap.
        cgroup = _pod_cgroup(next(p for p in status(vm)["pods"] if p["name"] == "swapper"))
        # Pushed past its memory limit, its pages go to swap (NoSwap's containers have none). The
        # kernel holds them to the share: past it, the pod's cgroup OOM-kills the dd, as with the
        # kubelet (under emulation reclaim is slow enough that it also may before the share is full).
        swapped = wait_for(lambda: int(read(vm, f"{cgroup}/memory.swap.current")), 300,
                           "the swapper's pages in swap", interval=2)
        print(f"swapper: memory.swap.max {share / 2**20:.0f}Mi, {swapped / 2**10:.0f}KiB in swap when first seen")
        web = wait_for(lambda: running_pod(vm, "web"), POD_TIMEOUT, "the web pod Running", interval=5)
        assert int(read(vm, f"{_container_cgroup(web)}/memory.swap.current")) == 0, "a static pod has none"
        # A static pod is critical: no swap, Burstable or not.
        write_static_pod(vm, "static-burstable", {"terminationGracePeriodSeconds": 0, "containers": [{
            "name": "app", "image": BUSYBOX, "command": ["sleep", "3600"],
            "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "128Mi"}}}]})
        static = wait_for(lambda: running_pod(vm, "static-burstable"), POD_TIMEOUT, "the static pod Running",
                          interval=5)
        assert static["status"]["qosClass"] == "Burstable"
        assert read(vm, f"{_container_cgroup(static)}/memory.swap.max") == "0"
    finally:
        if tunnel is not None:
            tunnel.terminate()
            tunnel.wait(timeout=30)
        cp.stop()


JOIN_NODE = "pykubelet-vm"
RUNTIME = "unix:///var/lib/pykubelet/containerd/containerd.sock"
# Under emulation the kubelet's first start and its TLS bootstrap take minutes, past kubeadm's defaults.
JOIN_TIMEOUT_MINUTES = 25


def _join_config() -> str:
    return yaml.safe_dump({
        "apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
        "discovery": {"file": {"kubeConfigPath": "/root/discovery.conf"},
                      "tlsBootstrapToken": f"{TOKEN_ID}.{TOKEN_SECRET}"},
        "nodeRegistration": {"name": JOIN_NODE, "criSocket": RUNTIME, "ignorePreflightErrors": ["all"]},
        "timeouts": {"kubeletHealthCheck": f"{JOIN_TIMEOUT_MINUTES}m", "tlsBootstrap": f"{JOIN_TIMEOUT_MINUTES}m"}})


def _node_ready(cp) -> bool:
    res = cp.kubectl("get", "node", JOIN_NODE, "-o", "json", check=False)
    conds = json.loads(res.stdout)["status"].get("conditions", []) if res.returncode == 0 else []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def test_kubeadm_join_runs_pykubelet_through_kubelet_service_and_its_drop_in(vm, tmp_path):
    """pykubelet as kubeadm's nodes run the kubelet: `pykubelet install --as-kubelet` writes
    /usr/bin/kubelet, kubelet.service and kubeadm's drop-in; the real `kubeadm join` writes the
    kubelet's files, restarts kubelet.service through systemd and waits for its healthz and TLS
    bootstrap. The node turns Ready and runs a pod from the API server, and `systemctl restart
    kubelet` leaves the pod running. After the swap test: pykubelet.target is stopped and its
    containerd stays as the host's runtime."""
    vm.run("systemctl", "stop", "pykubelet.target", timeout=900)
    vm.run("sh", "-c", f"rm -f {MANIFESTS}/*.yaml")
    vm.run("swapoff", "-a")  # the swap test's; kubeadm's config.yaml keeps failSwapOn at true
    # The host's runtime reads the CNI config where pykubelet's network service writes it for the
    # kubelet's root dir, as tests/bootstrap's host runtime does.
    vm.run("sed", "-i", "s#/var/lib/pykubelet/cni/net.d#/var/lib/kubelet/cni/net.d#",
           "/var/lib/pykubelet/containerd/config.toml")
    vm.run("systemctl", "start", "pykubelet-containerd.service", timeout=300)
    ensure_kube_binaries("kubeadm")
    vm.copy_in(KUBE_BIN / "kubeadm", "/usr/local/bin/kubeadm")
    installed = vm.run(PY, "-m", "services.cli.main", "install", "--as-kubelet", "--python", PY)
    assert "wrote /usr/bin/kubelet" in installed.stdout, installed.stdout
    assert vm.run("systemd-analyze", "verify", "kubelet.service", check=False).returncode == 0

    cp = ControlPlane(tmp_path / "control-plane", JOIN_NODE, apiserver_extra=APISERVER_ARGS)
    tunnel = None
    try:
        cp.start()
        cp.start_controllers(signing_args(cp, 24 * 3600))
        tunnel = subprocess.Popen([*vm.ssh_argv()[:-1], "-N", "-o", "ExitOnForwardFailure=yes", "-R",
                                   f"{cp.api_port}:127.0.0.1:{cp.api_port}", vm.ssh_argv()[-1]],
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        prepare_control_plane(cp, tmp_path, kubeadm_config(cp, RUNTIME, 10250, 10248, cgroup_driver="systemd"))
        vm.run("sh", "-c", "cat > /root/discovery.conf",
               input=discovery_file(tmp_path / "discovery.conf", cp).read_text())
        vm.run("sh", "-c", "cat > /root/join.yaml", input=_join_config())
        started = time.monotonic()
        join = vm.run("kubeadm", "join", "--config", "/root/join.yaml", check=False,
                      timeout=JOIN_TIMEOUT_MINUTES * 60 * 2 + 300)
        journal = vm.run("journalctl", "-u", "kubelet", "--no-pager", "-n", "60", check=False).stdout
        assert join.returncode == 0, f"{join.stdout[-3000:]}\n{join.stderr[-3000:]}\nkubelet.service:\n{journal}"
        assert "This node has joined the cluster" in join.stdout
        print(f"kubeadm join took {time.monotonic() - started:.0f}s under emulation")
        # systemd runs pykubelet from the drop-in, with kubeadm's files.
        assert unit_property(vm, "kubelet.service", "ActiveState") == "active"
        pid = unit_property(vm, "kubelet.service", "MainPID")
        cmdline = vm.run("cat", f"/proc/{pid}/cmdline").stdout.split("\0")
        assert cmdline[1:5] == ["-m", "services.cli.main", "kubelet",
                                "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf"], cmdline
        assert "--config=/var/lib/kubelet/config.yaml" in cmdline and "--kubeconfig=/etc/kubernetes/kubelet.conf" in cmdline
        wait_for(lambda: _node_ready(cp), 900, "the joined node Ready", interval=5)

        manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "joined", "namespace": "default"},
                    "spec": {"nodeName": JOIN_NODE, "terminationGracePeriodSeconds": 0, "containers": [{
                        "name": "app", "image": BUSYBOX, "command": ["sleep", "3600"]}]}}
        cp.kubectl("apply", "-f", "-", input_text=json.dumps(manifest))
        pod = wait_for(lambda: (p := _api_pod(cp, "joined")) and _running(p) and p, POD_TIMEOUT,
                       "the pod Running on the joined node", interval=5)
        container_id = pod["status"]["containerStatuses"][0]["containerID"]
        vm.run("systemctl", "restart", "kubelet.service", timeout=900)
        wait_for(lambda: _node_ready(cp), 900, "the node Ready after systemctl restart kubelet", interval=5)
        after = _api_pod(cp, "joined")["status"]["containerStatuses"][0]
        assert (after["containerID"], after["restartCount"]) == (container_id, 0), "the pod ran through the restart"
    finally:
        if tunnel is not None:
            tunnel.terminate()
            tunnel.wait(timeout=30)
        cp.stop()


def test_a_pod_with_host_users_false_is_held_where_the_runtime_makes_no_user_namespaces(vm):
    """Debian bookworm's containerd (1.6) makes no user namespaces (nor would bookworm's kernel, 6.1,
    mount tmpfs ID-mapped for containerd 2): the pod is held with the kubelet's words and no IDs are
    taken. test_backports_kernel.py runs the same pod on Linux 6.12 and containerd 2."""
    assert vm.run(PY, "-c", USERNS).stdout.strip() == "False"
    write_static_pod(vm, "userns", {"hostUsers": False, "terminationGracePeriodSeconds": 0, "containers": [{
        "name": "app", "image": BUSYBOX, "command": ["sleep", "3600"]}]})
    pod = wait_for(lambda: next((p for p in status(vm)["pods"] if p["name"].startswith("userns-")
                                 and "user namespaces" in p.get("why", "")), None),
                   POD_TIMEOUT, "the pod held for its user namespace", interval=5)
    assert "can't set `spec.hostUsers: false`, runtime does not support user namespaces" in pod["why"]
    assert vm.run("test", "-e", f"{ROOT_DIR}/pods/{pod['uid']}/userns", check=False).returncode != 0
    vm.run("rm", f"{MANIFESTS}/userns.yaml")
