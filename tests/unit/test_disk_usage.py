"""du over a pod's tree (emptyDir, log dir) that the pod changes while it is walked."""

from __future__ import annotations

import os

from shared.host import disk_usage
from shared.host.disk_usage import tree_usage


def _tree(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100_000)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"y" * 50_000)
    os.mkfifo(tmp_path / "d" / "fifo")
    os.symlink("/usr", tmp_path / "link")
    return tmp_path


def test_blocks_and_inodes_without_following_symlinks(tmp_path):
    usage = tree_usage(_tree(tmp_path))
    assert usage is not None and usage.complete
    assert 150_000 <= usage.bytes < 200_000, usage
    assert usage.inodes == 6  # the top, a, d, d/b, d/fifo, link
    assert tree_usage(tmp_path / "missing") is None


def test_the_walk_is_bounded_unless_told_otherwise(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i}").touch()
    assert not tree_usage(tmp_path, max_entries=10).complete
    assert tree_usage(tmp_path, max_entries=None).inodes == 51


def test_a_directory_swapped_for_a_symlink_while_listed_is_not_entered(tmp_path, monkeypatch):
    # The pod swaps d for a symlink to a big host directory between d being listed and entered.
    (tmp_path / "pod").mkdir()
    tree = _tree(tmp_path / "pod")
    host = tmp_path / "host"
    host.mkdir()
    (host / "big").write_bytes(b"z" * 1_000_000)
    real_scan = disk_usage._scan

    def scan_after_swap(path, dev, ino):
        if path == str(tree / "d"):
            os.rename(tree / "d", tree / "d-old")
            os.symlink(host, tree / "d")
        return real_scan(path, dev, ino)
    monkeypatch.setattr(disk_usage, "_scan", scan_after_swap)
    usage = tree_usage(tree)
    assert usage.bytes < 500_000, "the host directory behind the swapped-in symlink was counted"
    # Swapped above it: p/q was listed, then p became a symlink to a host directory with a q.
    (tree / "p" / "q").mkdir(parents=True)
    listed = os.lstat(tree / "p" / "q")
    (host / "q").mkdir()
    os.rename(tree / "p", tree / "p-old")
    os.symlink(host, tree / "p")
    assert real_scan(str(tree / "p" / "q"), listed.st_dev, listed.st_ino) == []
    assert real_scan(str(tree / "p-old" / "q"), listed.st_dev, listed.st_ino) == [], "an empty dir"
    (tree / "p-old" / "q" / "f").touch()
    assert [name for name, _ in real_scan(str(tree / "p-old" / "q"), listed.st_dev, listed.st_ino)] == ["f"]
