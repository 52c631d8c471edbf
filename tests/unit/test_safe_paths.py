"""Names from pods and plugins never lead a path out of the node's root dir."""

from __future__ import annotations

import os
import socket
import stat
import threading

import pytest

from services.volume.paths import Layout
from shared.host.mounts import mounts_under
from shared.host.safe_paths import NotRegularFile, UnsafePath, beneath, open_regular, read_head, read_tail


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


# -- reading files a pod controls -------------------------------------------------------------------

def _within_seconds(fn, seconds: float = 5):
    """fn's result or exception, failing if it has not returned within seconds (a blocked open)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still blocked after {seconds}s"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("read", [read_head, read_tail])
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, read):
    os.mkfifo(tmp_path / "msg")
    with pytest.raises(NotRegularFile, match="is a FIFO, not a regular file"):
        _within_seconds(lambda: read(tmp_path / "msg", 4096))


@pytest.mark.parametrize("read", [read_head, read_tail])
def test_a_symlink_is_not_followed(tmp_path, read):
    secret = tmp_path / "host-secret"
    secret.write_text("root:hash:1:0:99999:7:::\n")
    (tmp_path / "msg").symlink_to(secret)
    with pytest.raises(NotRegularFile, match="is a symbolic link"):
        read(tmp_path / "msg", 4096)
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    with pytest.raises(NotRegularFile, match="is a symbolic link"):
        read(tmp_path / "dangling", 4096)


def test_a_device_node_is_refused_and_never_opened(tmp_path):
    # /dev/zero's numbers: had it been opened and read, 4096 NUL bytes would come back.
    os.mknod(tmp_path / "dev", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    with pytest.raises(NotRegularFile, match="is a character device"):
        _within_seconds(lambda: read_head(tmp_path / "dev", 4096))
    os.mknod(tmp_path / "blk", 0o600 | stat.S_IFBLK, os.makedev(7, 0))
    with pytest.raises(NotRegularFile, match="is a block device"):
        read_tail(tmp_path / "blk", 4096)


def test_a_directory_and_a_socket_are_refused(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(NotRegularFile, match="is a directory"):
        read_head(tmp_path / "dir", 4096)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        with pytest.raises(NotRegularFile, match="is a socket"):
            read_tail(tmp_path / "sock", 4096)


def test_a_missing_file_is_the_usual_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_head(tmp_path / "absent", 10)


def test_an_oversized_file_is_read_only_up_to_the_limit(tmp_path):
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.write(b"a" * 10)
        f.truncate(1 << 30)  # 1 GiB (sparse): reading it whole would be felt
        f.seek(-6, os.SEEK_END)
        f.write(b"THE-END")
    assert read_head(big, 4096) == b"a" * 10 + b"\0" * 4086
    tail = read_tail(big, 4096)
    assert len(tail) == 4096 and tail.endswith(b"THE-END")
    assert read_tail(big, 0) == b""
    small = tmp_path / "small"
    small.write_bytes(b"hello")
    assert read_head(small, 4096) == read_tail(small, 4096) == b"hello"
    assert read_head(small, 2) == b"he" and read_tail(small, 2) == b"lo"
    fd = open_regular(small)
    try:
        assert os.read(fd, 100) == b"hello"  # a plain read-only fd of the file itself
    finally:
        os.close(fd)
