"""The names /metrics/cadvisor gives block devices in its I/O series, as cAdvisor's."""

from __future__ import annotations

from services.node_api.hostfs import block_device_names, read_mounts


def test_devices_are_named_by_disk_then_by_mounted_filesystem(tmp_path):
    block = tmp_path / "sys/block"
    for name, dev in (("vda", "254:0"), ("loop0", "7:0")):  # cAdvisor leaves loop, ram and sr out
        (block / name).mkdir(parents=True)
        (block / name / "dev").write_text(dev + "\n")
    (tmp_path / "mountinfo").write_text(
        "22 1 254:1 / / rw - ext4 /dev/vda1 rw\n"
        "30 22 7:0 / /mnt rw - ext4 /dev/loop0 rw\n"
        "31 22 0:5 / /proc rw - proc proc rw\n")
    assert block_device_names(block, read_mounts(tmp_path / "mountinfo")) == {
        (254, 0): "/dev/vda", (254, 1): "/dev/vda1", (7, 0): "/dev/loop0"}


def test_no_sysfs_names_only_mounted_devices(tmp_path):
    (tmp_path / "mountinfo").write_text("22 1 254:1 / / rw - ext4 /dev/vda1 rw\n")
    assert block_device_names(tmp_path / "absent", read_mounts(tmp_path / "mountinfo")) == {(254, 1): "/dev/vda1"}
