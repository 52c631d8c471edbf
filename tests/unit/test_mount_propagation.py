"""The root dir's shared mount (shared/host/propagation.py), read from mountinfo tables."""

from __future__ import annotations

from pathlib import Path

from shared.host.propagation import containing_mount, is_self_bind, parse_mountinfo

# / private; /var/lib/kubelet a bind of itself, made shared; below it a pod's tmpfs;
# /data a disk of its own, shared; a path with a space (escaped as \040).
TABLE = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
60 27 254:0 /var/lib/kubelet /var/lib/kubelet rw,relatime shared:5 - ext4 /dev/vda rw
61 60 0:50 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/m rw shared:6 - tmpfs tmpfs rw
70 27 8:16 / /data rw,relatime shared:7 - ext4 /dev/vdb rw
71 27 254:0 /srv/my\\040dir /srv/my\\040dir rw master:5 - ext4 /dev/vda rw
"""


def test_the_mount_a_path_is_on_and_its_propagation():
    entries = parse_mountinfo(TABLE)
    assert containing_mount(Path("/etc"), entries).point == "/"
    assert not containing_mount(Path("/etc"), entries).shared
    assert containing_mount(Path("/var/lib/kubelet/pods/u1"), entries).id == 60
    assert containing_mount(Path("/var/lib/kubelet/pods/u1"), entries).shared
    assert containing_mount(Path("/var/lib/kubelet-other"), entries).point == "/", "a prefix is not a parent"
    assert containing_mount(Path("/srv/my dir/x"), entries).tags == ("master:5",)


def test_a_bind_of_itself_is_told_from_a_filesystem_of_its_own():
    entries = parse_mountinfo(TABLE)
    assert is_self_bind(Path("/var/lib/kubelet"), entries)
    assert is_self_bind(Path("/srv/my dir"), entries)
    assert not is_self_bind(Path("/data"), entries), "a disk mounted there is left alone"
    assert not is_self_bind(Path("/var/lib/kubelet/pods"), entries), "not a mount point"
