"""Waiting for a directory to change (shared/tasks/dir_watch.py), on a real directory with inotify."""

from __future__ import annotations

import asyncio
import shutil
import socket

from shared.tasks.dir_watch import Change, DirectoryWatch


async def test_a_change_is_reported_once_per_burst_and_quiet_is_a_timeout(tmp_path):
    async with DirectoryWatch(tmp_path) as watch:
        assert await watch.next_change(0.2) is Change.TIMEOUT
        for i in range(5):  # a burst: one change
            (tmp_path / f"f{i}.yaml").write_text("x")
        assert await watch.next_change(2) is Change.CHANGED
        assert await watch.next_change(0.3) is Change.TIMEOUT


async def test_a_change_made_while_the_caller_works_is_not_lost(tmp_path):
    async with DirectoryWatch(tmp_path) as watch:
        (tmp_path / "during-scan").write_text("x")  # before the caller waits again
        await asyncio.sleep(0.1)
        assert await watch.next_change(2) is Change.CHANGED


async def test_recursive_watch_sees_sockets_in_new_subdirectories(tmp_path):
    async with DirectoryWatch(tmp_path, recursive=True) as watch:
        (tmp_path / "plugin").mkdir()
        assert await watch.next_change(2) is Change.CHANGED
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(str(tmp_path / "plugin" / "csi.sock"))
            assert await watch.next_change(2) is Change.CHANGED
        finally:
            sock.close()


async def test_a_flat_watch_ignores_subdirectories(tmp_path):
    (tmp_path / "sub").mkdir()
    async with DirectoryWatch(tmp_path) as watch:
        (tmp_path / "sub" / "f").write_text("x")
        assert await watch.next_change(0.3) is Change.TIMEOUT


async def test_the_directory_going_away_is_reported(tmp_path):
    d = tmp_path / "watched"
    d.mkdir()
    async with DirectoryWatch(d) as watch:
        shutil.rmtree(d)
        assert await watch.next_change(2) is Change.GONE
