"""The systemd cgroup driver (services/pod_sync/systemd_slices.py) against a fake of systemd's
manager: slices started with their resources as properties, changed in place, stopped with the
pod; the pod cgroup, QoS tiers and node allocatable going through them."""

import pytest

from services.pod_sync import pod_cgroup
from services.pod_sync.fake_systemd import FakeSystemdBus
from services.pod_sync.pod_cgroup import PodCgroupConfig, enforce_pods_allocatable
from services.pod_sync.resources import remove_pod_cgroups
from services.pod_sync.systemd_slices import INFINITY, SlicesError, SystemdSlices, properties
from tests.unit.test_pod_cgroup import limits, pod

MI = 2**20
POD = "/kubepods/burstable/poduid1"
POD_DIR = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid1.slice"


@pytest.fixture
def systemd(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")  # cgroup v2, as the driver needs
    bus = FakeSystemdBus(tmp_path)
    return bus, SystemdSlices(tmp_path, bus)


def test_properties_carry_the_limits_in_systemds_units():
    props = dict(properties(PodCgroupConfig(512, 50_000, 96 * MI, 4096), 100_000, 20))
    assert props == {"CPUWeight": ("t", 20), "CPUQuotaPerSecUSec": ("t", 500_000), "CPUQuotaPeriodUSec": ("t", 100_000),
                     "MemoryMax": ("t", 96 * MI), "TasksMax": ("t", 4096)}
    unlimited = dict(properties(PodCgroupConfig(2, None, None, None), 100_000, 1))
    assert unlimited["CPUQuotaPerSecUSec"] == unlimited["MemoryMax"] == unlimited["TasksMax"] == ("t", INFINITY)
    assert "CPUQuotaPeriodUSec" not in unlimited


def test_a_pod_cgroup_is_a_slice_started_with_its_settings(systemd, tmp_path):
    bus, slices = systemd
    config = PodCgroupConfig(cpu_shares=512, cpu_quota=50_000, memory_limit=96 * MI, pids_limit=1024)
    assert pod_cgroup.ensure(POD, config, tmp_path, slices) == []
    assert bus.calls == [("StartTransientUnit", "kubepods-burstable-poduid1.slice")]
    d = tmp_path / POD_DIR
    assert (d / "cpu.max").read_text() == "50000 100000"
    assert (d / "memory.max").read_text() == str(96 * MI)
    assert (d / "pids.max").read_text() == "1024"
    assert pod_cgroup.exists(POD, tmp_path, slices)
    # cpu.weight 20 read back as shares: 500 (the conversion rounds)
    assert pod_cgroup.current(POD, tmp_path, slices) == PodCgroupConfig(cpu_shares=500, cpu_quota=50_000,
                                                                        memory_limit=96 * MI)
    # Again (pod-sync restarted): the slice runs, its properties are set in place.
    assert pod_cgroup.ensure(POD, config, tmp_path, slices) == []
    assert bus.calls[-1] == ("SetUnitProperties", "kubepods-burstable-poduid1.slice")


def test_a_resize_changes_the_slice_and_leaves_tasks_max(systemd, tmp_path):
    bus, slices = systemd
    pod_cgroup.ensure(POD, PodCgroupConfig(204, 20_000, 64 * MI, 1024), tmp_path, slices)
    assert pod_cgroup.resize(POD, PodCgroupConfig(408, 40_000, 32 * MI), False, tmp_path, slices) == []
    d = tmp_path / POD_DIR
    assert (d / "cpu.max").read_text() == "40000 100000"
    assert (d / "memory.max").read_text() == str(64 * MI), "the larger of old and new until the containers are done"
    assert pod_cgroup.resize(POD, PodCgroupConfig(408, 40_000, 32 * MI), True, tmp_path, slices) == []
    assert (d / "memory.max").read_text() == str(32 * MI)
    assert "TasksMax" not in dict(properties(PodCgroupConfig(1, None, None), 100_000, 1, pids=False))
    assert (d / "pids.max").read_text() == "1024"


def test_qos_tiers_and_node_allocatable_are_slices_too(systemd, tmp_path):
    bus, slices = systemd
    burstable = pod(limits(memory="64Mi", requests={"cpu": "1500m"}))
    assert pod_cgroup.set_qos_tiers([burstable], tmp_path, slices) == []
    assert (tmp_path / "kubepods.slice/kubepods-besteffort.slice/cpu.weight").read_text() == "1"
    assert (tmp_path / "kubepods.slice/kubepods-burstable.slice/cpu.weight").read_text() == \
        str(1 + ((1536 - 2) * 9999) // 262_142)
    assert not (tmp_path / "kubepods.slice/kubepods-burstable.slice/memory.max").exists(), "a tier has no limits"
    assert enforce_pods_allocatable(1024 * MI, 1500, slices=slices, pids=23676) == []
    assert (tmp_path / "kubepods.slice/memory.max").read_text() == str(1024 * MI)
    assert (tmp_path / "kubepods.slice/pids.max").read_text() == "23676"


def test_the_pods_slice_is_stopped_with_the_pod(systemd, tmp_path):
    bus, slices = systemd
    pod_cgroup.ensure(POD, PodCgroupConfig(2, None, None), tmp_path, slices)
    remove_pod_cgroups(POD, slices)
    assert bus.calls[-1] == ("StopUnit", "kubepods-burstable-poduid1.slice")
    assert not (tmp_path / POD_DIR).exists()
    remove_pod_cgroups(POD, slices)  # gone already: nothing to say


def test_a_refusal_of_systemds_is_the_problem_reported(systemd, tmp_path):
    bus, slices = systemd
    bus.refuse["kubepods-burstable-poduid1.slice"] = "org.freedesktop.DBus.Error.AccessDenied"
    problems = pod_cgroup.ensure(POD, PodCgroupConfig(2, None, None), tmp_path, slices)
    assert problems == ["systemd refused to start kubepods-burstable-poduid1.slice: "
                        "org.freedesktop.DBus.Error.AccessDenied: refused kubepods-burstable-poduid1.slice"]


def test_a_slice_whose_cgroup_never_appears_is_an_error(tmp_path, monkeypatch):
    class Silent(FakeSystemdBus):
        def _set(self, unit, props):  # says yes, makes nothing
            self.units[unit].update(dict((n, v) for n, (_, v) in props))
    monkeypatch.setattr("services.pod_sync.systemd_slices.START_TIMEOUT", 0.1)
    with pytest.raises(SlicesError, match="did not appear"):
        SystemdSlices(tmp_path, Silent(tmp_path)).apply(POD, [], "test")


def test_a_slice_of_no_pod_is_stopped_once_empty_and_old(systemd, tmp_path):
    bus, slices = systemd
    uid = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
    name = f"/kubepods/besteffort/pod{uid}"
    pod_cgroup.ensure(name, PodCgroupConfig(2, None, None), tmp_path, slices)
    pod_cgroup.ensure(POD, PodCgroupConfig(2, None, None), tmp_path, slices)
    found = pod_cgroup.pod_cgroups(tmp_path, slices)
    assert found == {uid: name, "uid1": POD}, "the UID's dashes come back from the slice name's escape"
    assert pod_cgroup.remove_orphans({uid: name}, tmp_path, slices) == [], "too young to be an orphan"
    assert pod_cgroup.remove_orphans({uid: name}, tmp_path, slices, min_age=0) == [name]
    assert bus.calls[-1] == ("StopUnit", f"kubepods-besteffort-pod{uid.replace('-', '_')}.slice")
    assert pod_cgroup.pod_cgroups(tmp_path, slices) == {"uid1": POD}


def test_on_cgroup_v1_the_slices_get_the_legacy_properties_runc_gives_there(tmp_path):
    """systemd's legacy layout: CPUShares (a CPUWeight would come back as weight x 1024 / 100,
    1536 shares as 604) and MemoryLimit, which systemd writes into the cpu, memory and pids
    trees; the pod cgroup is found and read back in them."""
    bus = FakeSystemdBus(tmp_path)  # no cgroup.controllers: v1
    slices = SystemdSlices(tmp_path, bus)
    assert slices.legacy
    props = dict(properties(PodCgroupConfig(1536, 50_000, 96 * MI, 4096, memory_high=90 * MI), 100_000, 59,
                            legacy=True))
    assert props == {"CPUShares": ("t", 1536), "CPUQuotaPerSecUSec": ("t", 500_000),
                     "CPUQuotaPeriodUSec": ("t", 100_000), "MemoryLimit": ("t", 96 * MI), "TasksMax": ("t", 4096)}
    config = PodCgroupConfig(cpu_shares=1536, cpu_quota=50_000, memory_limit=96 * MI, pids_limit=1024)
    assert pod_cgroup.ensure(POD, config, tmp_path, slices) == []
    assert (tmp_path / "cpu" / POD_DIR / "cpu.shares").read_text() == "1536"
    assert (tmp_path / "cpu" / POD_DIR / "cpu.cfs_quota_us").read_text() == "50000"
    assert (tmp_path / "memory" / POD_DIR / "memory.limit_in_bytes").read_text() == str(96 * MI)
    assert (tmp_path / "pids" / POD_DIR / "pids.max").read_text() == "1024"
    assert pod_cgroup.exists(POD, tmp_path, slices)
    assert pod_cgroup.current(POD, tmp_path, slices) == PodCgroupConfig(1536, 50_000, 96 * MI)
    assert pod_cgroup.pod_cgroups(tmp_path, slices) == {"uid1": POD}
    # The tiers weigh in shares, exactly.
    burstable = pod(limits(memory="64Mi", requests={"cpu": "1500m"}))
    assert pod_cgroup.set_qos_tiers([burstable], tmp_path, slices) == []
    assert bus.units["kubepods-burstable.slice"]["CPUShares"] == 1536
    assert (tmp_path / "cpu/kubepods.slice/kubepods-besteffort.slice/cpu.shares").read_text() == "2"
    assert enforce_pods_allocatable(2 * 1024 * MI, 2000, tmp_path, slices, pids=5000) == []
    assert bus.units["kubepods.slice"]["MemoryLimit"] == 2 * 1024 * MI
    assert bus.units["kubepods.slice"]["CPUShares"] == 2048
    remove_pod_cgroups(POD, slices)
    assert not (tmp_path / "cpu" / POD_DIR).exists() and not pod_cgroup.exists(POD, tmp_path, slices)
