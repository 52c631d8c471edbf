"""Where the runtime keeps its images (CRI ImageFsInfo): eviction measures imagefs there, pod-sync's
image GC measures how full it is."""

from __future__ import annotations

from pathlib import Path

from shared.runtime.cri.interface import ImageService


async def imagefs_mountpoint(images: ImageService) -> Path | None:
    """The first image filesystem the runtime names; None if it names none."""
    resp = await images.image_fs_info()
    for fs in resp.image_filesystems:
        if fs.fs_id.mountpoint:
            return Path(fs.fs_id.mountpoint)
    return None
