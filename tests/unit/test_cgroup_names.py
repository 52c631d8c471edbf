"""The node's cgroups by driver (shared/model/cgroup_names.py): the kubelet's systemd slice names."""

import pytest

from shared.model.cgroup_names import container_cgroup, on_host, slice_path, slice_unit, slice_units


def test_cgroupfs_names_are_the_paths():
    assert on_host("/kubepods/burstable/poda-b", "cgroupfs") == "/kubepods/burstable/poda-b"


def test_systemd_names_are_nested_slices_with_dashes_escaped():
    uid = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
    assert slice_units(f"/kubepods/burstable/pod{uid}") == [
        "kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod0f1e2d3c_aaaa_bbbb_cccc_0123456789ab.slice"]
    assert on_host(f"/kubepods/pod{uid}", "systemd") == \
        "/kubepods.slice/kubepods-pod0f1e2d3c_aaaa_bbbb_cccc_0123456789ab.slice"
    assert slice_unit("/kubepods") == "kubepods.slice"
    assert slice_unit("/") == "-.slice"


def test_a_slice_unit_expands_to_its_path():
    assert slice_path("kubepods-besteffort-podx.slice") == \
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx.slice"
    for bad in ("-.slice", "kubepods.scope", "kubepods--x.slice"):
        with pytest.raises(ValueError):
            slice_path(bad)


def test_container_cgroups_follow_containerds_naming():
    assert container_cgroup("/kubepods/pod1", "abc") == "/kubepods/pod1/abc"
    assert container_cgroup("/kubepods.slice/kubepods-pod1.slice", "abc") == \
        "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope"


@pytest.mark.parametrize("name", ["/kubepods/../etc", "/kubepods/a b", "/kubepods/x\n", "/kubepods/$(id)"])
def test_hostile_names_are_refused(name):
    with pytest.raises(ValueError):
        on_host(name, "systemd")
    with pytest.raises(ValueError):
        on_host(name, "cgroupfs")


def test_an_unknown_driver_is_refused_naming_the_drivers():
    with pytest.raises(ValueError, match="cgroupfs or systemd"):
        on_host("/kubepods", "docker")
