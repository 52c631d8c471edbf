"""Names from pods and plugins never lead a path out of the node's root dir."""

from __future__ import annotations

import pytest

from services.volume.paths import Layout
from shared.mounts import mounts_under
from shared.safe_paths import UnsafePath, beneath


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "/etc", "x\0y", "y" * 256])
def test_a_name_must_be_one_plain_component(tmp_path, name):
    with pytest.raises(UnsafePath):
        beneath(tmp_path, name)
    with pytest.raises(UnsafePath):
        Layout(tmp_path).volume_dir("uid", "kubernetes.io/empty-dir", name)


def test_a_symlink_on_the_way_out_is_refused(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "pods").mkdir(parents=True)
    outside.mkdir()
    (root / "pods" / "evil").symlink_to(outside)
    assert beneath(root / "pods", "fine", "x") == root / "pods" / "fine" / "x"
    with pytest.raises(UnsafePath, match="leads out of"):
        beneath(root / "pods", "evil", "volumes")
    with pytest.raises(UnsafePath):
        Layout(root).volumes_dir("evil")
    # The link itself may be named (to be removed without following it).
    assert beneath(root / "pods", "evil") == root / "pods" / "evil"


def test_mounts_under_sees_through_dot_dot_and_symlinks(tmp_path):
    # /proc is a mount on every Linux: reach it through '..' and through a symlink.
    link = tmp_path / "proc-link"
    link.symlink_to("/proc")
    assert "/proc" in mounts_under(tmp_path / ".." / ".." / ".." / ".." / ".." / ".." / "proc")
    assert "/proc" in mounts_under(link)
