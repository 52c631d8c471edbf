"""subPath resolution beneath a volume: made and opened through fds, never following a symlink
out (the mounting itself is exercised on the real node in tests/security)."""

import os
import stat

import pytest

from shared.host import subpath
from shared.host.subpath import open_beneath


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


@pytest.fixture
def vol(tmp_path):
    v = tmp_path / "vol"
    v.mkdir(mode=0o770)
    os.chmod(v, 0o770)
    return v


def test_missing_directories_are_made_with_the_volume_mode(vol):
    assert _path_of(open_beneath(vol, "a/b/c")) == str(vol / "a" / "b" / "c")
    assert stat.S_IMODE(os.stat(vol / "a" / "b").st_mode) == 0o770, "the volume's mode, whatever the umask"


def test_symlinks_that_stay_inside_are_followed_as_the_kubelet_does(vol):
    (vol / "data").mkdir()
    (vol / "data" / "file").write_text("x")
    os.symlink("data/file", vol / "link")  # the shape of a configMap key (key -> ..data/key)
    assert _path_of(open_beneath(vol, "link")) == str(vol / "data" / "file")


@pytest.mark.parametrize("planted", ["/etc", "../..", "/"])
def test_a_symlink_out_of_the_volume_is_refused_and_nothing_is_made(vol, tmp_path, planted):
    os.symlink(planted, vol / "evil")
    before = sorted(os.listdir("/etc"))
    with pytest.raises(OSError, match="outside the volume"):
        open_beneath(vol, "evil/new-dir")
    assert sorted(os.listdir("/etc")) == before


def test_a_component_swapped_for_a_symlink_after_resolution_is_refused(vol, tmp_path, monkeypatch):
    """The race of CVE-2017-1002101: the path is checked, then a container swaps a directory on it
    for a symlink. The walk opens each component with O_NOFOLLOW, so it stops at the swap."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (vol / "a").mkdir()
    real = os.path.realpath

    def resolve_then_swap(path):
        out = real(path)
        if str(path).endswith("a/b"):  # the swap lands between the check and the walk
            os.rename(vol / "a", vol / "a-old")
            os.symlink(outside, vol / "a")
        return out

    monkeypatch.setattr(subpath.os.path, "realpath", resolve_then_swap)
    with pytest.raises(OSError, match="symlink"):
        open_beneath(vol, "a/b")
    assert os.listdir(outside) == [], "nothing was made outside"


def test_without_make_dirs_a_missing_subpath_is_an_error(vol):
    with pytest.raises(FileNotFoundError):
        open_beneath(vol, "nope", make_dirs=False)


def test_bind_targets_are_named_by_plain_components(tmp_path):
    assert subpath.bind_target(tmp_path, "v", "c", 2) == tmp_path / "volume-subpaths" / "v" / "c" / "2"
    with pytest.raises(ValueError):
        subpath.bind_target(tmp_path, "../x", "c", 0)
