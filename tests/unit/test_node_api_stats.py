"""The kubelet's stats endpoints: /stats/summary, /metrics/resource, /metrics/cadvisor and /spec,
gathered from a fake cgroup tree and /proc, the recording fake runtime and a real store."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri
from prometheus_client.parser import text_string_to_metric_families

from services.node_api.machine import MachineFacts, MachineSpec
from services.node_api.snapshot import rfc3339
from services.node_api.stats.cpu_rates import CpuRates
from services.node_api.stats.provider import StatsProvider
from shared.host.cgroups import CgroupReader
from shared.host.facts import os_version
from shared.runtime.cri import labels as L
from shared.runtime.cri.client import CRIError
from shared.runtime.cri.fake import FakeRuntime
from shared.store import DesiredPod, PodRuntime, PodVolume, Store

GIB = 2**30
T0 = 1_700_000_000  # wall clock of the first CRI sample, seconds
BOOT = 1_699_990_000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def du(*paths: Path) -> int:
    return sum(os.lstat(p).st_blocks * 512 for p in paths)


@pytest.fixture
def host(tmp_path):
    """A cgroup v1 tree and a /proc with the files the node stats read."""
    cg, proc = tmp_path / "cgroup", tmp_path / "proc"
    write(cg / "cpuacct/cpuacct.usage", "100000000000\n")
    write(cg / "memory/memory.usage_in_bytes", str(3 * GIB))
    write(cg / "memory/memory.stat", f"pgfault 500\npgmajfault 7\ntotal_rss {GIB}\n"
                                     f"total_inactive_file {GIB // 2}\ninactive_file 1\n")
    write(cg / "memory/memory.limit_in_bytes", "9223372036854771712")
    write(cg / "cpuacct/kubepods/cpuacct.usage", "40000000000")
    write(cg / "memory/kubepods/memory.usage_in_bytes", str(GIB))
    write(cg / "memory/kubepods/memory.stat", f"total_inactive_file {GIB // 4}\ntotal_rss {GIB // 2}\n")
    write(cg / "memory/kubepods/memory.limit_in_bytes", str(6 * GIB))
    write(proc / "meminfo", f"MemTotal:       {8 * GIB // 1024} kB\nMemFree:        100 kB\nSwapTotal:      2048 kB\n")
    write(proc / "cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n")
    write(proc / "stat", f"cpu  1 2 3 4 5 6 7 8 0 0\nbtime {BOOT}\n")
    write(proc / "net/dev",
          "Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
          "    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0\n"
          "  eth0: 1000       10    1    0    0     0          0         0     2000      20    2    0    0     0       0          0\n"
          "  ens4: 300        3     0    0    0     0          0         0     400        4    0    0    0     0       0          0\n"
          "vethab12: 5        1     0    0    0     0          0         0     6          1    0    0    0     0       0          0\n")
    write(proc / "net/route", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
                              "eth0\t0000FEA9\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
                              "ens4\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
                              "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
    write(proc / "loadavg", "0.10 0.20 0.30 2/345 6789\n")
    write(proc / "sys/kernel/pid_max", "4194304\n")
    write(proc / "sys/kernel/threads-max", "192735\n")
    write(proc / "self/mountinfo", "")
    return cg, proc


def machine(tmp_path) -> MachineSpec:
    sys = tmp_path / "sys"
    for cpu, core in ((0, 0), (1, 0), (2, 1), (3, 1)):
        write(sys / f"devices/system/cpu/cpu{cpu}/topology/core_id", f"{core}\n")
        write(sys / f"devices/system/cpu/cpu{cpu}/topology/physical_package_id", "0\n")
        write(sys / f"devices/system/cpu/cpu{cpu}/cache/index0/size", "32K\n")
        write(sys / f"devices/system/cpu/cpu{cpu}/cache/index0/type", "Data\n")
        write(sys / f"devices/system/cpu/cpu{cpu}/cache/index0/level", "1\n")
        write(sys / f"devices/system/cpu/cpu{cpu}/cache/index3/size", "8192K\n")
        write(sys / f"devices/system/cpu/cpu{cpu}/cache/index3/type", "Unified\n")
        write(sys / f"devices/system/cpu/cpu{cpu}/cache/index3/level", "3\n")
    write(sys / "devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "2500000\n")
    write(sys / "class/net/eth0/address", "02:00:00:00:00:01\n")
    write(sys / "class/net/eth0/mtu", "1500\n")
    write(sys / "class/net/eth0/speed", "1000\n")
    write(sys / "class/net/lo/mtu", "65536\n")
    write(sys / "class/net/veth1/mtu", "1500\n")
    write(sys / "block/vda/dev", "254:0\n")
    write(sys / "block/vda/size", "2048\n")
    write(sys / "block/vda/queue/scheduler", "[mq-deadline] none\n")
    write(sys / "block/loop0/dev", "7:0\n")
    return MachineSpec(MachineFacts(sys=sys, proc=tmp_path / "proc"))


def u64(v: int) -> cri.UInt64Value:
    return cri.UInt64Value(value=v)


def container_stats(cid: str, name: str, t: int, cpu_ns: int, ws: int, layer: Path, used: int) -> cri.ContainerStats:
    return cri.ContainerStats(
        attributes=cri.ContainerAttributes(id=cid, metadata=cri.ContainerMetadata(name=name)),
        cpu=cri.CpuUsage(timestamp=t * 10**9, usage_core_nano_seconds=u64(cpu_ns)),
        memory=cri.MemoryUsage(timestamp=t * 10**9, working_set_bytes=u64(ws), usage_bytes=u64(ws + 100),
                               rss_bytes=u64(ws // 2)),
        writable_layer=cri.FilesystemUsage(timestamp=t * 10**9, fs_id=cri.FilesystemIdentifier(mountpoint=str(layer)),
                                           used_bytes=u64(used), inodes_used=u64(3)))


def sandbox_stats(sid: str, t: int, cpu_ns: int, ws: int) -> cri.PodSandboxStats:
    eth0 = cri.NetworkInterfaceUsage(name="eth0", rx_bytes=u64(111), rx_errors=u64(0), tx_bytes=u64(222),
                                     tx_errors=u64(1))
    return cri.PodSandboxStats(
        attributes=cri.PodSandboxAttributes(id=sid),
        linux=cri.LinuxPodSandboxStats(
            cpu=cri.CpuUsage(timestamp=t * 10**9, usage_core_nano_seconds=u64(cpu_ns)),
            memory=cri.MemoryUsage(timestamp=t * 10**9, working_set_bytes=u64(ws), available_bytes=u64(5 * GIB)),
            network=cri.NetworkUsage(timestamp=t * 10**9, default_interface=eth0, interfaces=[eth0]),
            process=cri.ProcessUsage(timestamp=t * 10**9, process_count=u64(4))))


class Node:
    """A node with one managed pod "web" (containers app and sidecar), the store rows the other
    services would have written, and a stats provider over all of it."""

    def __init__(self, tmp_path: Path, settings, store: Store, host) -> None:
        self.tmp = tmp_path
        self.settings = settings
        self.runtime = FakeRuntime(images=["busybox"])
        self.clock = Clock()
        self.layer = tmp_path / "snapshots"
        self.layer.mkdir()
        cg, proc = host
        self.cgroup_root = cg
        self.stats = StatsProvider(self.runtime, self.runtime, store, settings, cgroups=CgroupReader(cg, proc),
                                   proc=proc, machine=machine(tmp_path), clock=self.clock)
        self.runtime.image_fs = cri.ImageFsInfoResponse(image_filesystems=[cri.FilesystemUsage(
            timestamp=T0 * 10**9, fs_id=cri.FilesystemIdentifier(mountpoint=str(self.layer)),
            used_bytes=u64(12345), inodes_used=u64(67))])
        self.store = store

    async def start_pod(self, name="web", namespace="ns1", uid="uid-1", managed=True):
        meta = cri.PodSandboxMetadata(name=name, namespace=namespace, uid=uid)
        labels = {L.POD_NAME: name, L.POD_NAMESPACE: namespace, L.POD_UID: uid}
        if managed:
            labels[L.MANAGED_BY] = "true"
        config = cri.PodSandboxConfig(metadata=meta, labels=labels)
        sid = await self.runtime.run_pod_sandbox(config)
        cids = {}
        for cname in ("app", "sidecar"):
            cid = await self.runtime.create_container(sid, cri.ContainerConfig(
                metadata=cri.ContainerMetadata(name=cname), image=cri.ImageSpec(image="busybox"),
                labels=labels | {L.CONTAINER_NAME: cname}), config)
            await self.runtime.start_container(cid)
            cids[cname] = cid
        return sid, cids

    def record_pod(self, uid: str, cids: dict[str, str], log_dir: Path) -> None:
        with self.store.session() as s:
            s.add(DesiredPod(uid=uid, namespace="ns1", name="web", source="api", manifest={
                "metadata": {"name": "web", "namespace": "ns1", "uid": uid},
                "spec": {"containers": [{"name": "app", "image": "busybox"}, {"name": "sidecar", "image": "busybox"}],
                         "volumes": [{"name": "cache", "emptyDir": {}},
                                     {"name": "data", "persistentVolumeClaim": {"claimName": "claim-1"}},
                                     {"name": "cfg", "configMap": {"name": "settings"}},
                                     {"name": "host", "hostPath": {"path": "/etc"}},
                                     {"name": "ram", "emptyDir": {"medium": "Memory"}}]}}))
            s.add(PodRuntime(uid=uid, sandbox_ready=True, log_dir=str(log_dir), containers=[
                {"name": n, "container_id": f"containerd://{cid}", "image": "docker.io/library/busybox:1.36",
                 "log_path": f"{log_dir}/{n}/0.log"} for n, cid in cids.items()]))

    def record_volumes(self, uid: str) -> dict[str, Path]:
        base = self.settings.root_dir / "pods" / uid / "volumes"
        paths = {"cache": base / "kubernetes.io~empty-dir/cache", "data": base / "kubernetes.io~csi/data/mount",
                 "cfg": base / "kubernetes.io~configmap/cfg", "ram": base / "kubernetes.io~empty-dir/ram"}
        for p in paths.values():
            p.mkdir(parents=True)
        write(paths["cfg"] / "..2024_01_01/key", "value\n")
        os.symlink("..2024_01_01", paths["cfg"] / "..data")
        os.symlink("..data/key", paths["cfg"] / "key")
        vstore = Store(self.settings.store_path, writer="volume")
        with vstore.session() as s:
            s.add(PodVolume(pod_uid=uid, name="cache", plugin="kubernetes.io/empty-dir", host_path=str(paths["cache"]),
                            ready=True, used_bytes=40960))
            s.add(PodVolume(pod_uid=uid, name="data", plugin="kubernetes.io/csi:csi.example.com",
                            host_path=str(paths["data"]), ready=True))
            s.add(PodVolume(pod_uid=uid, name="cfg", plugin="kubernetes.io/configmap", host_path=str(paths["cfg"]),
                            ready=True))
            s.add(PodVolume(pod_uid=uid, name="host", plugin="kubernetes.io/host-path", host_path="/etc", ready=True))
            s.add(PodVolume(pod_uid=uid, name="ram", plugin="kubernetes.io/empty-dir", host_path=str(paths["ram"]),
                            ready=True, used_bytes=8192))
            s.add(PodVolume(pod_uid=uid, name="escape", plugin="kubernetes.io/configmap", host_path="/etc",
                            ready=True))
            s.add(PodVolume(pod_uid=uid, name="pending", plugin="kubernetes.io/empty-dir",
                            host_path=str(paths["cache"]), ready=False))
        vstore.close()
        return paths

    def sample(self, sid: str, cids: dict[str, str], t: int, app_cpu: int, sidecar_cpu: int, pod_cpu: int) -> None:
        self.runtime.container_stats = {
            cids["app"]: container_stats(cids["app"], "app", t, app_cpu, 100 * 2**20, self.layer, 8192),
            cids["sidecar"]: container_stats(cids["sidecar"], "sidecar", t, sidecar_cpu, 20 * 2**20, self.layer, 4096),
        }
        self.runtime.sandbox_stats = {sid: sandbox_stats(sid, t, pod_cpu, 130 * 2**20)}


@pytest.fixture
async def node(tmp_path, settings, store, host):
    n = Node(tmp_path, settings, store, host)
    yield n
    await n.stats.close()


async def two_samples(node: Node):
    """The pod's stats at T0 and, 10 s and one bump of every counter later, at T0+10."""
    sid, cids = await node.start_pod()
    log_dir = Path(L.pod_log_dir(node.settings.kubelet.pod_logs_dir, "ns1", "web", "uid-1"))
    node.record_pod("uid-1", cids, log_dir)
    node.sample(sid, cids, T0, app_cpu=10 * 10**9, sidecar_cpu=10**9, pod_cpu=12 * 10**9)
    first = await node.stats.summary()
    node.sample(sid, cids, T0 + 10, app_cpu=15 * 10**9, sidecar_cpu=2 * 10**9, pod_cpu=18 * 10**9)
    (node.cgroup_root / "cpuacct/cpuacct.usage").write_text("105000000000\n")
    node.clock.now += 10
    # The pod sandbox sample, 10 s old now, is served while a new one is taken in the background
    # (sandbox_stats.py): as on a node, that one is in by the next scrape.
    await node.stats.sandbox_stats.get()
    await asyncio.sleep(0.01)
    second = await node.stats.summary()
    return sid, cids, log_dir, first, second


# -- node ------------------------------------------------------------------------------------


async def test_node_summary_from_the_root_cgroup_and_proc(node, settings):
    await node.stats.summary()
    (node.cgroup_root / "cpuacct/cpuacct.usage").write_text("105000000000\n")
    node.clock.now += 10
    n = (await node.stats.summary())["node"]

    assert n["nodeName"] == "node1"
    assert n["startTime"] == rfc3339(BOOT)
    assert n["cpu"]["usageCoreNanoSeconds"] == 105 * 10**9
    assert n["cpu"]["usageNanoCores"] == 500_000_000, "5 core-seconds over 10 s: half a core"
    mem = n["memory"]
    assert mem["usageBytes"] == 3 * GIB
    assert mem["workingSetBytes"] == 3 * GIB - GIB // 2, "usage minus total_inactive_file"
    assert mem["availableBytes"] == 8 * GIB - mem["workingSetBytes"], "MemTotal minus working set"
    assert (mem["rssBytes"], mem["pageFaults"], mem["majorPageFaults"]) == (GIB, 500, 7)
    net = n["network"]
    assert (net["name"], net["rxBytes"], net["rxErrors"], net["txBytes"], net["txErrors"]) == ("eth0", 1000, 1, 2000, 2)
    assert [i["name"] for i in net["interfaces"]] == ["eth0", "ens4"], "no loopback or pod veths"
    st = os.statvfs(settings.root_dir)
    assert n["fs"]["capacityBytes"] == st.f_blocks * st.f_frsize and n["fs"]["inodes"] == st.f_files
    assert abs(n["fs"]["usedBytes"] - (st.f_blocks - st.f_bfree) * st.f_frsize) < 256 * 2**20  # shared fs moves
    image_fs = n["runtime"]["imageFs"]
    assert image_fs["usedBytes"] == 12345 and image_fs["inodesUsed"] == 67
    assert image_fs["capacityBytes"] == st.f_blocks * st.f_frsize, "statvfs of the image fs mountpoint"
    assert image_fs["time"] == rfc3339(T0)
    assert n["runtime"]["containerFs"] == image_fs, "the writable layers are on the image filesystem"
    assert n["rlimit"]["maxpid"] == 192735 and n["rlimit"]["curproc"] == 345
    pods_cg = n["systemContainers"][0]
    assert pods_cg["name"] == "pods" and pods_cg["memory"]["workingSetBytes"] == GIB - GIB // 4
    assert pods_cg["memory"]["availableBytes"] == 6 * GIB - (GIB - GIB // 4), "the /kubepods limit"


def test_cgroup_v2_is_detected_and_read(tmp_path):
    root = tmp_path / "cg2"
    write(root / "cgroup.controllers", "cpu memory pids\n")
    write(root / "kubepods/burstable/podabc/cpu.stat", "usage_usec 2500\nuser_usec 2000\n")
    write(root / "kubepods/burstable/podabc/memory.current", "1000\n")
    write(root / "kubepods/burstable/podabc/memory.stat", "anon 300\ninactive_file 400\npgfault 9\npgmajfault 1\n")
    write(root / "kubepods/burstable/podabc/memory.max", "max\n")
    write(root / "kubepods/burstable/podabc/pids.current", "3\n")
    proc = tmp_path / "proc"
    write(proc / "stat", "cpu  100 0 50 1000 10 0 0 0 0 0\n")
    write(proc / "meminfo", "MemTotal: 1000 kB\nMemFree: 200 kB\nInactive(file): 100 kB\nActive(anon): 50 kB\n")
    write(proc / "vmstat", "pgfault 77\npgmajfault 2\n")
    reader = CgroupReader(root, proc)
    assert reader.version == 2
    assert reader.pod_cgroup("abc") == "/kubepods/burstable/podabc"
    s = reader.sample("/kubepods/burstable/podabc")
    assert (s.cpu_usage_ns, s.memory_usage, s.working_set, s.rss, s.page_faults, s.major_page_faults) == \
        (2_500_000, 1000, 600, 300, 9, 1)
    assert s.memory_limit is None and reader.process_count("/kubepods/burstable/podabc") == 3
    r = reader.sample("/")  # the v2 root has neither cpu.stat nor memory.current here: /proc
    assert r.cpu_usage_ns == 150 * 10**7, "busy ticks (not idle or iowait) at 100 Hz"
    assert (r.memory_usage, r.working_set, r.page_faults) == (800 * 1024, 700 * 1024, 77)
    with pytest.raises(ValueError):
        reader.sample("/../etc")


def test_cpu_rate_needs_two_samples_and_a_real_window():
    clock = Clock()
    rates = CpuRates(clock)
    assert rates.update("c", 1_000, 10.0) is None, "nothing to compare the first sample with"
    assert rates.update("c", 2 * 10**9, 12.0) == 10**9 - 500
    assert rates.update("c", 3 * 10**9, 12.2) == 10**9 - 500, "a tiny window keeps the last rate"
    assert rates.update("c", 5, 20.0) is None, "a counter that went back (restart) starts over"
    clock.now += 601
    rates.expire()
    assert len(rates) == 0


# -- pods ------------------------------------------------------------------------------------


async def test_pod_summary_with_two_containers(node, settings):
    sid, cids, log_dir, first, second = await two_samples(node)
    write(log_dir / "app/0.log", "x" * 5000)
    write(log_dir / "sidecar/0.log", "y" * 10)
    paths = node.record_volumes("uid-1")
    summary = await node.stats.summary()

    [pod0] = first["pods"]
    assert "usageNanoCores" not in pod0["containers"][0]["cpu"], "one sample: no rate yet"
    [pod] = summary["pods"]
    assert pod["podRef"] == {"name": "web", "namespace": "ns1", "uid": "uid-1"}
    assert pod["startTime"] == rfc3339(node.runtime.sandboxes[sid].created_at / 1e9)
    app, sidecar = pod["containers"]
    assert (app["name"], sidecar["name"]) == ("app", "sidecar")
    [second_app, _] = second["pods"][0]["containers"]
    assert second_app["cpu"]["usageCoreNanoSeconds"] == 15 * 10**9
    assert second_app["cpu"]["usageNanoCores"] == 500_000_000, "5 s of CPU over 10 s"
    assert second["pods"][0]["containers"][1]["cpu"]["usageNanoCores"] == 100_000_000
    assert second["pods"][0]["cpu"]["usageNanoCores"] == 600_000_000, "the pod's own rate, from sandbox stats"
    assert app["memory"]["workingSetBytes"] == 100 * 2**20 and app["memory"]["usageBytes"] == 100 * 2**20 + 100
    assert app["startTime"] == rfc3339(node.runtime.containers[cids["app"]].created_at / 1e9)
    assert app["rootfs"]["usedBytes"] == 8192 and app["rootfs"]["inodesUsed"] == 3
    st = os.statvfs(node.layer)
    assert app["rootfs"]["capacityBytes"] == st.f_blocks * st.f_frsize
    assert app["logs"]["usedBytes"] == du(log_dir / "app", log_dir / "app/0.log")
    assert app["logs"]["inodesUsed"] == 2

    assert pod["memory"]["workingSetBytes"] == 130 * 2**20 and pod["memory"]["availableBytes"] == 5 * GIB
    assert pod["network"]["name"] == "eth0" and pod["network"]["rxBytes"] == 111
    assert pod["network"]["interfaces"] == [{"name": "eth0", "rxBytes": 111, "rxErrors": 0, "txBytes": 222,
                                             "txErrors": 1}]
    assert pod["process_stats"] == {"process_count": 4}

    volumes = {v["name"]: v for v in pod["volume"]}
    assert sorted(volumes) == ["cache", "cfg", "data", "ram"], "hostPath has no metrics; rows outside the root dir " \
                                                               "and volumes not ready are left out"
    assert [v["name"] for v in pod["volume"]][:2] == ["cache", "cfg"], "ephemeral volumes first"
    assert volumes["cache"]["usedBytes"] == 40960 and "pvcRef" not in volumes["cache"]
    assert volumes["data"]["pvcRef"] == {"name": "claim-1", "namespace": "ns1"}
    vst = os.statvfs(paths["data"])
    assert volumes["data"]["capacityBytes"] == vst.f_blocks * vst.f_frsize
    # the filesystem is shared with whatever else runs: its usage moves between the two reads
    assert abs(volumes["data"]["usedBytes"] - (vst.f_blocks - vst.f_bfree) * vst.f_frsize) < 256 * 2**20
    cfg_used = du(paths["cfg"], paths["cfg"] / "..2024_01_01", paths["cfg"] / "..2024_01_01/key",
                  paths["cfg"] / "..data", paths["cfg"] / "key")
    assert volumes["cfg"]["usedBytes"] == cfg_used and volumes["cfg"]["inodesUsed"] == 5
    assert set(volumes["cfg"]) == {"time", "availableBytes", "capacityBytes", "usedBytes", "inodesFree", "inodes",
                                   "inodesUsed", "name"}

    eph = pod["ephemeral-storage"]
    expected = (8192 + 4096 + app["logs"]["usedBytes"] + sidecar["logs"]["usedBytes"]
                + 40960 + cfg_used)  # not the Memory-medium emptyDir, not the PVC
    assert eph["usedBytes"] == expected
    assert eph["inodesUsed"] == 3 + 3 + 2 + 2 + volumes["cache"]["inodesUsed"] + 5
    assert eph["capacityBytes"] == os.statvfs(settings.root_dir).f_blocks * os.statvfs(settings.root_dir).f_frsize


async def test_only_ready_managed_pods_and_running_containers(node):
    sid, cids = await node.start_pod()
    other_sid, other = await node.start_pod(name="foreign", uid="uid-2", managed=False)
    gone_sid, _ = await node.start_pod(name="gone", uid="uid-3")
    await node.runtime.stop_pod_sandbox(gone_sid)
    node.sample(sid, cids, T0, 1, 1, 1)
    node.runtime.exit_container(cids["sidecar"], 0)
    [pod] = (await node.stats.summary())["pods"]
    assert pod["podRef"]["name"] == "web"
    assert [c["name"] for c in pod["containers"]] == ["app"], "an exited container is not measured"


async def test_pod_cpu_and_memory_summed_when_the_runtime_lacks_sandbox_stats(node):
    sid, cids = await node.start_pod()
    node.sample(sid, cids, T0, app_cpu=10 * 10**9, sidecar_cpu=10**9, pod_cpu=0)

    async def unimplemented():
        node.runtime.calls.append(("list_podsandbox_stats", ""))
        raise CRIError("list_podsandbox_stats", grpc.StatusCode.UNIMPLEMENTED, "not implemented")

    node.runtime.list_pod_sandbox_stats = unimplemented
    [pod] = (await node.stats.summary())["pods"]
    assert pod["cpu"]["usageCoreNanoSeconds"] == 11 * 10**9
    assert pod["memory"]["workingSetBytes"] == 120 * 2**20
    assert pod["memory"]["rssBytes"] == 60 * 2**20
    assert "network" not in pod and "process_stats" not in pod
    await node.stats.summary()
    assert len(node.runtime.ops("list_podsandbox_stats")) == 1, "UNIMPLEMENTED is remembered"
    node.clock.now += 601
    await node.stats.summary()
    assert len(node.runtime.ops("list_podsandbox_stats")) == 2, "and asked again later (a runtime upgrade)"


async def test_a_hung_volume_mount_does_not_stall_the_stats(monkeypatch, tmp_path):
    import threading

    from services.node_api.stats import volumes as stats_module
    from services.node_api.stats.volumes import MountProbe

    release = threading.Event()
    real_statfs = stats_module.statfs

    def hanging(path):
        if "nfs" in str(path):
            release.wait(5)
        return real_statfs(path)

    monkeypatch.setattr(stats_module, "statfs", hanging)
    (tmp_path / "nfs").mkdir()
    (tmp_path / "local").mkdir()
    probe = MountProbe(timeout=0.2)
    found = await probe.statfs([str(tmp_path / "nfs"), str(tmp_path / "local")], tmp_path)
    assert found == {str(tmp_path / "nfs"): None, str(tmp_path / "local"): None}, "the deadline passed"
    again = await probe.statfs([str(tmp_path / "local")], tmp_path)
    assert again == {str(tmp_path / "local"): None}, "no second thread while the first is stuck"
    release.set()
    await asyncio.wait_for(asyncio.shield(probe._pending), 5)
    found = await probe.statfs([str(tmp_path / "local"), "/etc"], tmp_path)
    assert found[str(tmp_path / "local")].capacity > 0
    assert found["/etc"] is None, "a path outside the root dir is not measured"


async def test_summary_fails_when_the_runtime_cannot_list(node):
    from services.node_api.stats.provider import StatsError

    async def broken(labels=None):
        raise CRIError("list_podsandbox", grpc.StatusCode.UNAVAILABLE, "connection refused")

    node.runtime.list_pod_sandbox = broken
    with pytest.raises(StatsError, match="connection refused"):
        await node.stats.summary()
    text = (await node.stats.resource_metrics()).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert list(families) == ["scrape_error"] and families["scrape_error"].samples[0].value == 1


async def test_log_dir_outside_the_logs_root_is_not_measured(node, tmp_path):
    sid, cids = await node.start_pod()
    outside = tmp_path / "elsewhere"
    write(outside / "app/0.log", "secret")
    node.record_pod("uid-1", cids, outside)
    node.sample(sid, cids, T0, 1, 1, 1)
    [pod] = (await node.stats.summary())["pods"]
    assert "logs" not in pod["containers"][0]


# -- metrics ---------------------------------------------------------------------------------


async def test_resource_metrics_as_metrics_server_reads_them(node):
    await two_samples(node)
    text = (await node.stats.resource_metrics()).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert sorted(families) == ["container_cpu_usage_seconds", "container_memory_working_set_bytes",
                                "node_cpu_usage_seconds", "node_memory_working_set_bytes",
                                "pod_cpu_usage_seconds", "pod_memory_working_set_bytes", "scrape_error"]
    assert "# TYPE node_cpu_usage_seconds_total counter" in text
    assert "# HELP node_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the node in core-seconds" in text

    by = {(s.name, tuple(sorted(s.labels.items()))): s for f in families.values() for s in f.samples}
    app = by[("container_cpu_usage_seconds_total", (("container", "app"), ("namespace", "ns1"), ("pod", "web")))]
    assert app.value == 15.0 and app.timestamp == T0 + 10, "core-seconds, at the sample's own time"
    ws = by[("container_memory_working_set_bytes", (("container", "sidecar"), ("namespace", "ns1"), ("pod", "web")))]
    assert ws.value == 20 * 2**20
    pod = by[("pod_cpu_usage_seconds_total", (("namespace", "ns1"), ("pod", "web")))]
    assert pod.value == 18.0
    assert by[("pod_memory_working_set_bytes", (("namespace", "ns1"), ("pod", "web")))].value == 130 * 2**20
    assert by[("node_cpu_usage_seconds_total", ())].value == 105.0
    assert by[("node_memory_working_set_bytes", ())].value == 3 * GIB - GIB // 2
    assert by[("scrape_error", ())].value == 0 and by[("scrape_error", ())].timestamp is None
    assert [line.split("{")[0] for line in text.splitlines() if line.startswith("# TYPE")] == \
        sorted(line.split("{")[0] for line in text.splitlines() if line.startswith("# TYPE")), "sorted like Go"


async def test_cadvisor_metrics_labels(node):
    sid, cids, *_ = await two_samples(node)
    text = (await node.stats.cadvisor_metrics()).decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def find(name, **labels):
        return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    [root_cpu] = find("container_cpu_usage_seconds_total", id="/")
    assert root_cpu.labels == {"container": "", "cpu": "total", "id": "/", "image": "", "name": "", "namespace": "",
                               "pod": ""}
    assert root_cpu.value == 105.0
    [app_cpu] = find("container_cpu_usage_seconds_total", container="app")
    assert app_cpu.labels == {"container": "app", "cpu": "total", "id": f"/kubepods/poduid-1/{cids['app']}",
                              "image": "docker.io/library/busybox:1.36", "name": cids["app"], "namespace": "ns1",
                              "pod": "web"}
    [pod_ws] = find("container_memory_working_set_bytes", pod="web", container="", id="/kubepods/poduid-1")
    assert pod_ws.value == 130 * 2**20
    [rx] = find("container_network_receive_bytes_total", pod="web", interface="eth0")
    assert rx.value == 111 and rx.labels["id"] == f"/kubepods/poduid-1/{sid}"
    assert find("container_network_receive_bytes_total", id="/", interface="eth0")[0].value == 1000
    assert find("container_memory_rss", container="app")[0].value == 50 * 2**20
    assert find("container_fs_usage_bytes", container="app")[0].value == 8192
    assert find("container_start_time_seconds", container="app")[0].timestamp is None
    [created] = find("container_creation_time_seconds", container="app")
    assert created.value == find("container_start_time_seconds", container="app")[0].value and created.value > 0
    assert find("container_last_seen", container="sidecar")
    assert find("container_memory_working_set_bytes", id="/kubepods")[0].value == GIB - GIB // 4
    [cores] = find("machine_cpu_cores")
    assert cores.value == 4 and set(cores.labels) == {"boot_id", "machine_id", "system_uuid"}
    assert find("machine_cpu_physical_cores")[0].value == 2
    # The machine families the kubelet 1.37's cAdvisor has on x86: books and drawers 0 (s390x's),
    # the swap, and NVM at 0 (its release is built without ipmctl).
    assert [find(name)[0].value for name in ("machine_cpu_books", "machine_cpu_drawers", "machine_swap_bytes",
                                             "machine_nvm_avg_power_budget_watts")] == [0, 0, 2048 * 1024, 0]
    assert sorted((s.labels["mode"], s.value) for s in find("machine_nvm_capacity")) == [
        ("app_direct_mode", 0), ("memory_mode", 0)]
    assert find("container_scrape_error")[0].value == 0
    # Always there, as the kubelet's cAdvisor says it: the kernel and the OS, nothing of its own.
    [version] = find("cadvisor_version_info")
    assert version.value == 1 and version.labels == {
        "kernelVersion": os.uname().release, "osVersion": os_version(), "dockerVersion": "", "cadvisorVersion": "",
        "cadvisorRevision": ""}


async def test_cadvisor_metrics_have_each_cgroups_limits_and_cpu_time(node):
    """container_spec_* without a timestamp (cAdvisor's spec series), CPU time and page cache
    with the snapshot's; a quota series and CFS throttling only for a cgroup with a quota; the
    root's memory limit is the node's memory."""
    sid, cids, *_ = await two_samples(node)
    app = f"{node.cgroup_root}/{{}}/kubepods/poduid-1/{cids['app']}"
    for controller, name, text in (("cpu", "cpu.shares", "512"), ("cpu", "cpu.cfs_period_us", "100000"),
                                   ("cpu", "cpu.cfs_quota_us", "50000"),
                                   ("cpu", "cpu.stat", "nr_periods 40\nnr_throttled 4\nthrottled_time 2000000000\n"
                                                               "nr_bursts 3\nburst_time 500000000\n"),
                                   ("cpuacct", "cpuacct.stat", "user 300\nsystem 100\n"),
                                   ("memory", "memory.limit_in_bytes", str(GIB)),
                                   ("memory", "memory.use_hierarchy", "1"),
                                   ("memory", "memory.stat", "total_cache 4096\ntotal_mapped_file 1024\n"
                                                             "pgfault 5\ntotal_pgfault 9"),
                                   ("cpu", "cgroup.procs", "4242"), ("pids", "pids.current", "3"),
                                   ("blkio", "blkio.throttle.io_service_bytes_recursive",
                                    "254:0 Read 4096\n254:0 Write 512\nTotal 4608"),
                                   ("memory", "memory.failcnt", "2")):
        write(Path(app.format(controller)) / name, text + "\n")
    write(node.cgroup_root / "cpu/cpu.shares", "1024\n")
    write(node.cgroup_root / "cpu/cpu.cfs_quota_us", "-1\n")
    write(node.stats.proc / "4242/limits", "Max open files            1024                 524288               files\n")
    node.stats.sys_block = node.tmp / "sys/block"
    write(node.stats.sys_block / "vda/dev", "254:0\n")
    # The sandbox's first process, and its network namespace's interfaces.
    write(node.cgroup_root / f"cpu/kubepods/poduid-1/{sid}/cgroup.procs", "777\n")
    proc = node.stats.proc
    write(proc / "777/net/dev", (proc / "net/dev").read_text().replace("eth0: 1000       10    1    0",
                                                                       "eth0: 1000       25    1    4"))
    text = (await node.stats.cadvisor_metrics()).decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def value(name, **labels):
        [found] = [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        return found

    assert value("container_spec_cpu_shares", container="app").value == 512
    assert value("container_spec_cpu_quota", container="app").value == 50000
    assert value("container_spec_memory_limit_bytes", container="app").value == GIB
    assert value("container_spec_memory_limit_bytes", container="app").timestamp is None
    assert value("container_cpu_user_seconds_total", container="app").value == 3.0
    assert value("container_cpu_cfs_burst_periods_total", container="app").value == 3
    assert value("container_health_state", container="app").value == -1, "no Docker health check: cAdvisor's -1"
    assert value("container_ulimits_soft", container="app", ulimit="max_open_files").value == 1024
    assert value("container_cpu_cfs_burst_seconds_total", container="app").value == 0.5
    assert value("container_cpu_system_seconds_total", container="app").timestamp is not None
    assert value("container_cpu_cfs_throttled_seconds_total", container="app").value == 2.0
    assert value("container_cpu_cfs_throttled_periods_total", container="app").value == 4
    assert value("container_memory_cache", container="app").value == 4096
    assert value("container_memory_failcnt", container="app").value == 2
    assert value("container_memory_failures_total", container="app", failure_type="pgfault",
                 scope="hierarchy").value == 9
    assert value("container_memory_failures_total", container="app", failure_type="pgfault",
                 scope="container").value == 5
    assert value("container_processes", container="app").value == 1
    assert value("container_threads", container="app").value == 3
    assert value("container_fs_reads_bytes_total", container="app", device="/dev/vda").value == 4096
    assert value("container_fs_writes_total", container="app", device="/dev/vda").value == 0, "no io_serviced file"
    assert value("container_blkio_device_usage_total", container="app", operation="Write", major="254",
                 minor="0").value == 512
    sandbox = f"/kubepods/poduid-1/{sid}"
    assert value("container_network_receive_packets_total", id=sandbox, interface="eth0").value == 25
    assert value("container_network_receive_packets_dropped_total", id=sandbox, interface="eth0").value == 4
    assert value("container_network_transmit_packets_total", id="/", interface="eth0").value == 20
    assert not [s for s in samples if s.name.startswith("container_network") and s.labels["interface"] == "lo"]
    summary_fs = (await node.stats.summary())["node"]["fs"]
    assert summary_fs["inodes"] in [s.value for s in samples if s.name == "container_fs_inodes_total" and
                                    s.labels["id"] == "/"], "the node filesystem's inodes"
    assert not [s for s in samples if s.name == "container_fs_inodes_free" and s.labels["id"] != "/"]
    assert value("container_spec_memory_limit_bytes", id="/").value == 8 * GIB
    assert value("container_spec_cpu_shares", id="/").value == 1024
    assert not [s for s in samples if s.labels.get("id") == "/" and
                s.name in ("container_spec_cpu_quota", "container_cpu_cfs_periods_total")], "no quota: no such series"
    assert value("container_spec_memory_limit_bytes", id="/kubepods").value == 6 * GIB


def test_machine_spec(node):
    spec = node.stats.machine_spec()
    # cAdvisor's MachineInfo keys in its order; num_books and num_drawers only on s390x (omitempty)
    assert list(spec) == ["timestamp", "vendor_id", "num_cores", "num_physical_cores", "num_sockets",
                          "cpu_frequency_khz", "memory_capacity", "swap_capacity", "memory_by_type", "nvm", "hugepages",
                          "machine_id", "system_uuid", "boot_id", "filesystems", "disk_map", "network_devices",
                          "topology", "cloud_provider", "instance_type", "instance_id"]
    assert (spec["vendor_id"], spec["swap_capacity"]) == ("GenuineIntel", 2048 * 1024)
    assert (spec["num_cores"], spec["num_physical_cores"], spec["num_sockets"]) == (4, 2, 1)
    assert spec["cpu_frequency_khz"] == 2_500_000 and spec["memory_capacity"] == 8 * GIB
    assert spec["network_devices"] == [{"name": "eth0", "mac_address": "02:00:00:00:00:01", "speed": 1000,
                                        "mtu": 1500}]
    assert spec["disk_map"] == {"254:0": {"name": "vda", "major": 254, "minor": 0, "size": 2048 * 512,
                                          "scheduler": "mq-deadline"}}
    [numa] = spec["topology"]
    assert [c["thread_ids"] for c in numa["cores"]] == [[0, 1], [2, 3]]
    assert numa["cores"][0]["caches"] == [{"size": 32768, "type": "Data", "level": 1}]
    assert numa["caches"] == [{"size": 8 * 2**20, "type": "Unified", "level": 3}]
    assert (spec["cloud_provider"], spec["instance_type"], spec["instance_id"]) == ("Unknown", "Unknown", "None")
    assert node.stats.machine_spec() is spec, "gathered once, then cached"


# -- pressure stall information (cgroup v2) ---------------------------------------------------


@pytest.fixture
async def v2_node(tmp_path, settings, store, host):
    """`node`'s pod and stats over a cgroup v2 tree (cg2/) and the same /proc."""
    _, proc = host
    root = tmp_path / "cg2"
    write(root / "cgroup.controllers", "cpu memory io pids\n")
    n = Node(tmp_path, settings, store, (root, proc))
    yield n, root, proc
    await n.stats.close()


PSI_TEXT = ("some avg10=1.50 avg60=0.25 avg300=0.05 total=123456\n"
            "full avg10=0.50 avg60=0.10 avg300=0.01 total=2000000\n")
PSI = {"some": {"total": 123456, "avg10": 1.5, "avg60": 0.25, "avg300": 0.05},
       "full": {"total": 2000000, "avg10": 0.5, "avg60": 0.1, "avg300": 0.01}}


def test_pressure_files_are_read_in_the_summary_apis_shape():
    from shared.host.cgroups import parse_psi

    assert parse_psi(PSI_TEXT) == PSI
    # cpu.pressure has no "full" line before Linux 5.13: zeros, as cAdvisor reads it.
    assert parse_psi(PSI_TEXT.splitlines()[0])["full"] == {"total": 0, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0}
    for garbage in ("", "full avg10=1 avg60=1 avg300=1 total=1\n", "some avg10=x avg60=0 avg300=0 total=1\n",
                    "some avg10=0 avg60=0\n", "some total\n"):
        assert parse_psi(garbage) is None, garbage


async def test_cadvisor_metrics_have_the_root_filesystems_disk_stats(node):
    """The root's filesystems' devices, from /proc/diskstats as cAdvisor reads them: counts,
    sectors, seconds (the kernel's milliseconds), I/Os in progress, I/O time."""
    dev = os.stat(node.tmp).st_dev  # the node's filesystem is found by its device number
    write(node.stats.proc / "self/mountinfo",
          f"30 1 {os.major(dev)}:{os.minor(dev)} / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n")
    write(node.stats.proc / "diskstats", "   7       0 loop0 1 0 2 3 4 0 5 6 0 7 8 0 0 0 0\n"
                                         " 254       1 vda1 100 5 800 1500 40 2 320 2500 1 3000 4000 0 0 0 0\n")
    await two_samples(node)
    found = {s.name: s.value for f in text_string_to_metric_families((await node.stats.cadvisor_metrics()).decode())
             for s in f.samples if s.labels.get("id") == "/" and s.labels.get("device") == "/dev/vda1"}
    assert {name: value for name, value in found.items() if name.startswith(
        ("container_fs_read", "container_fs_sector", "container_fs_write", "container_fs_io"))} == {
        "container_fs_reads_total": 100, "container_fs_reads_merged_total": 5, "container_fs_sector_reads_total": 800,
        "container_fs_read_seconds_total": 1.5, "container_fs_writes_total": 40,
        "container_fs_writes_merged_total": 2, "container_fs_sector_writes_total": 320,
        "container_fs_write_seconds_total": 2.5, "container_fs_io_current": 1,
        "container_fs_io_time_seconds_total": 3.0, "container_fs_io_time_weighted_seconds_total": 4.0}
    assert "container_fs_usage_bytes" in found, "the filesystem's own series, on the same device"


async def test_cadvisor_metrics_count_each_cgroups_oom_kills_and_zero_for_the_others(node):
    """container_oom_events_total from the OOM kills the eviction service counted in the store
    (services/eviction/oom_kills.py), by cgroup."""
    from services.eviction.oom_kills import count

    _, cids, *_ = await two_samples(node)
    app = f"/kubepods/poduid-1/{cids['app']}"
    eviction = Store(node.settings.store_path, writer="eviction")
    for _ in range(2):
        count(eviction, app)
    samples = [s for f in text_string_to_metric_families((await node.stats.cadvisor_metrics()).decode())
               for s in f.samples if s.name == "container_oom_events_total"]
    by_id = {s.labels["id"]: s.value for s in samples}
    assert by_id[app] == 2 and by_id["/"] == 0
    assert [s.labels["container"] for s in samples if s.labels["id"] == app] == ["app"]


async def test_on_cgroup_v2_the_summary_and_cadvisor_metrics_carry_pressure_stalls(v2_node):
    """The kubelet 1.37's KubeletPSI: cpu.psi, memory.psi and io.psi of the node (the root's, from
    /proc/pressure), the pods' cgroup, each pod and each container, and cAdvisor's
    container_pressure_* counters in seconds."""
    n, root, proc = v2_node
    for resource in ("cpu", "memory", "io"):
        write(proc / "pressure" / resource, PSI_TEXT)
    sid, cids = await n.start_pod()
    pod = root / "kubepods/besteffort/poduid-1"
    for cgroup in (root / "kubepods", pod, pod / cids["app"]):
        write(cgroup / "cpu.stat", "usage_usec 1000\n")
        write(cgroup / "memory.current", "1000\n")
        write(cgroup / "memory.stat", "anon 10\n")
        for resource in ("cpu", "memory", "io"):
            write(cgroup / f"{resource}.pressure", PSI_TEXT)
    write(pod / cids["app"] / "memory.pressure", PSI_TEXT.replace("total=2000000", "total=4500000"))
    n.sample(sid, cids, T0, app_cpu=10**9, sidecar_cpu=10**9, pod_cpu=2 * 10**9)
    summary = await n.stats.summary()
    node = summary["node"]
    assert node["cpu"]["psi"] == node["memory"]["psi"] == node["io"]["psi"] == PSI
    assert node["systemContainers"][0]["io"]["psi"] == PSI
    [p] = summary["pods"]
    assert p["cpu"]["psi"] == p["memory"]["psi"] == p["io"]["psi"] == PSI
    app = next(c for c in p["containers"] if c["name"] == "app")
    assert app["memory"]["psi"]["full"]["total"] == 4500000 and app["cpu"]["psi"] == PSI
    sidecar = next(c for c in p["containers"] if c["name"] == "sidecar")
    assert "psi" not in sidecar["cpu"] and "io" not in sidecar, "no cgroup of its own to read"

    text = (await n.stats.cadvisor_metrics()).decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def value(name: str, cgroup_id: str) -> float:
        return next(s.value for s in samples if s.name == name and s.labels["id"] == cgroup_id)
    assert value("container_pressure_cpu_stalled_seconds_total", "/") == 2.0, "full's total, µs to s"
    assert value("container_pressure_io_waiting_seconds_total", "/kubepods/besteffort/poduid-1") == 0.123456
    assert value("container_pressure_memory_stalled_seconds_total",
                 f"/kubepods/besteffort/poduid-1/{cids['app']}") == 4.5


async def test_on_cgroup_v2_the_iocost_figures_are_cadvisor_metrics_in_seconds(v2_node):
    """Where the iocost controller weighs a device, io.stat has cost.usage, cost.wait, cost.indebt
    and cost.indelay (microseconds): container_fs_io_cost_*_seconds_total of that device; none for a
    device or cgroup without them."""
    n, root, proc = v2_node
    sid, cids = await n.start_pod()
    pod = root / "kubepods/besteffort/poduid-1"
    n.stats.sys_block = n.tmp / "sys/block"
    write(n.stats.sys_block / "vda/dev", "254:0\n")
    write(n.stats.sys_block / "vdb/dev", "254:16\n")
    write(pod / cids["app"] / "io.stat", "254:0 rbytes=10 wbytes=0 rios=1 wios=0 cost.vrate=100.00 cost.usage=2500000 "
                                         "cost.wait=1000 cost.indebt=0 cost.indelay=7\n"
                                         "254:16 rbytes=1 wbytes=0 rios=1 wios=0\n")
    write(pod / "io.stat", "254:0 rbytes=10 wbytes=0 rios=1 wios=0\n")
    n.sample(sid, cids, T0, app_cpu=10**9, sidecar_cpu=10**9, pod_cpu=2 * 10**9)
    text = (await n.stats.cadvisor_metrics()).decode()
    cost = {(s.name, s.labels["id"], s.labels["device"]): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if "io_cost" in s.name}
    app = f"/kubepods/besteffort/poduid-1/{cids['app']}"
    assert cost == {("container_fs_io_cost_usage_seconds_total", app, "/dev/vda"): 2.5,
                    ("container_fs_io_cost_wait_seconds_total", app, "/dev/vda"): 0.001,
                    ("container_fs_io_cost_indebt_seconds_total", app, "/dev/vda"): 0.0,
                    ("container_fs_io_cost_indelay_seconds_total", app, "/dev/vda"): 7e-06}


async def test_on_cgroup_v1_there_are_no_pressure_figures(node):
    """The kernel keeps pressure figures per cgroup on v2 only: none are made up on v1."""
    await two_samples(node)
    summary = await node.stats.summary()
    assert "psi" not in repr(summary) and "io" not in summary["node"]
    assert b"container_pressure" not in await node.stats.cadvisor_metrics()


async def test_only_eth0_is_inlined_as_the_nodes_network_as_the_kubelet_does(node, host):
    """The kubelet's default interface is eth0 by name: a host whose interfaces are named
    otherwise has its network listed, with nothing inline."""
    _, proc = host
    write(proc / "net/dev", (proc / "net/dev").read_text().replace("eth0:", "ens3:"))
    net = (await node.stats.summary())["node"]["network"]
    assert [i["name"] for i in net["interfaces"]] == ["ens3", "ens4"]
    assert net["name"] == "" and "rxBytes" not in net, "the kubelet's empty inline interface"


async def test_a_runtime_with_a_container_filesystem_of_its_own_reports_it_as_container_fs(node, tmp_path):
    """A split image filesystem (the runtime names where the writable layers are): containerFs
    is that one, imageFs the images', as the kubelet 1.37 reports them."""
    layers = tmp_path / "layers"
    layers.mkdir()
    node.runtime.image_fs.container_filesystems.append(cri.FilesystemUsage(
        timestamp=T0 * 10**9, fs_id=cri.FilesystemIdentifier(mountpoint=str(layers)), used_bytes=u64(999),
        inodes_used=u64(9)))
    runtime = (await node.stats.summary())["node"]["runtime"]
    assert (runtime["imageFs"]["usedBytes"], runtime["containerFs"]["usedBytes"]) == (12345, 999)
    assert runtime["containerFs"]["inodesUsed"] == 9


async def test_a_pods_available_bytes_only_under_a_memory_limit(v2_node):
    """containerd answers 0 available bytes for a pod cgroup without a memory limit; the kubelet
    reports no figure there, and neither does pykubelet: a pod without a limit has no
    availableBytes, one with a limit keeps the runtime's. Containers keep theirs either way."""
    n, root, _ = v2_node
    sid, cids = await n.start_pod()
    pod = root / "kubepods/burstable/poduid-1"
    write(pod / "memory.max", "max\n")
    write(pod / cids["app"] / "memory.max", f"{256 * 2**20}\n")
    write(pod / cids["sidecar"] / "memory.max", "max\n")
    n.sample(sid, cids, T0, app_cpu=10**9, sidecar_cpu=10**9, pod_cpu=2 * 10**9)
    for name in ("app", "sidecar"):
        n.runtime.container_stats[cids[name]].memory.available_bytes.value = 0 if name == "sidecar" else 7
    [p] = (await n.stats.summary())["pods"]
    assert "availableBytes" not in p["memory"], "the pod's cgroup has no limit"
    app, sidecar = sorted(p["containers"], key=lambda c: c["name"])
    assert (app["memory"]["availableBytes"], sidecar["memory"]["availableBytes"]) == (7, 0), \
        "a container's is the runtime's, with a limit or without, as the kubelet reports it"
    write(pod / "memory.max", f"{512 * 2**20}\n")
    [p] = (await n.stats.summary())["pods"]
    assert p["memory"]["availableBytes"] == 5 * GIB, "the runtime's figure under a limit"


async def test_swap_of_the_node_pods_and_containers_as_the_kubelet_reports_it(v2_node):
    """The kubelet's SwapStats: the node's swap from /proc/meminfo; on cgroup v2 a cgroup's
    memory.swap.current, and what is left under memory.swap.max where there is a limit (NoSwap
    containers: 0); cAdvisor's container_memory_swap beside."""
    n, root, proc = v2_node
    write(proc / "meminfo", f"MemTotal: {8 * GIB // 1024} kB\nMemFree: 100 kB\nSwapTotal: 1024 kB\n"
                            "SwapFree: 768 kB\n")
    sid, cids = await n.start_pod()
    pod = root / "kubepods/burstable/poduid-1"
    write(pod / "memory.swap.current", "4096\n")
    write(pod / "memory.swap.max", "max\n")
    write(pod / cids["app"] / "memory.swap.current", "4096\n")
    write(pod / cids["app"] / "memory.swap.max", "65536\n")
    write(pod / cids["sidecar"] / "memory.swap.current", "0\n")
    write(pod / cids["sidecar"] / "memory.swap.max", "0\n")
    n.sample(sid, cids, T0, app_cpu=10**9, sidecar_cpu=10**9, pod_cpu=2 * 10**9)
    summary = await n.stats.summary()
    assert summary["node"]["swap"] | {"time": 0} == {"time": 0, "swapUsageBytes": 256 * 1024,
                                                      "swapAvailableBytes": 768 * 1024}
    [p] = summary["pods"]
    assert p["swap"]["swapUsageBytes"] == 4096 and "swapAvailableBytes" not in p["swap"], "no pod swap limit"
    app, sidecar = sorted(p["containers"], key=lambda c: c["name"])
    assert (app["swap"]["swapUsageBytes"], app["swap"]["swapAvailableBytes"]) == (4096, 65536 - 4096)
    assert (sidecar["swap"]["swapUsageBytes"], sidecar["swap"]["swapAvailableBytes"]) == (0, 0), "NoSwap"
    text = (await n.stats.cadvisor_metrics()).decode()
    swap = {s.labels["id"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "container_memory_swap"}
    assert swap["/"] == 256 * 1024 and swap[f"/kubepods/burstable/poduid-1/{cids['app']}"] == 4096


def test_on_cgroup_v1_swap_is_memory_stats_total_swap_under_the_memsw_limit(tmp_path):
    root = tmp_path / "cg1"
    write(root / "memory/kubepods/podx/memory.stat", "total_rss 10\ntotal_swap 2048\n")
    write(root / "memory/kubepods/podx/memory.memsw.limit_in_bytes", "9223372036854771712\n")
    write(root / "memory/kubepods/podx/c1/memory.stat", "total_swap 0\n")
    write(root / "memory/kubepods/podx/c1/memory.memsw.limit_in_bytes", "1048576\n")
    reader = CgroupReader(root, tmp_path / "proc")
    assert reader.swap("/kubepods/podx") == (2048, None)
    assert reader.swap("/kubepods/podx/c1") == (0, 1048576)
    assert reader.swap("/kubepods/nothing") is None and reader.swap("/") is None, "no figures: no swap stats"


async def test_the_first_request_has_the_nodes_cpu_rate(node):
    """node-api notes the node's and the pods' cgroup's CPU use when it starts, so the first
    scrape after it has usageNanoCores, as the kubelet's cAdvisor has from its start."""
    (node.cgroup_root / "cpuacct/cpuacct.usage").write_text("102000000000\n")
    (node.cgroup_root / "cpuacct/kubepods/cpuacct.usage").write_text("41000000000\n")
    node.clock.now += 10
    n = (await node.stats.summary())["node"]
    assert n["cpu"]["usageNanoCores"] == 200_000_000, "2 core-seconds in 10 s since the start"
    assert n["systemContainers"][0]["cpu"]["usageNanoCores"] == 100_000_000


async def test_the_first_request_has_the_kubelet_system_containers_cpu_rate(tmp_path, settings, store, host):
    """With kubeletCgroups, the "kubelet" system container's CPU use is noted at the start too:
    the first scrape has its usageNanoCores."""
    settings.kubelet.kubelet_cgroups = "/pykubelet-agent"
    cg, _ = host
    write(cg / "cpuacct/pykubelet-agent/cpuacct.usage", "5000000000\n")
    n = Node(tmp_path, settings, store, host)
    try:
        write(cg / "cpuacct/pykubelet-agent/cpuacct.usage", "5500000000\n")
        n.clock.now += 10
        system = {c["name"]: c for c in (await n.stats.summary())["node"]["systemContainers"]}
        assert system["kubelet"]["cpu"]["usageNanoCores"] == 50_000_000, "0.5 core-seconds in 10 s"
    finally:
        await n.stats.close()
