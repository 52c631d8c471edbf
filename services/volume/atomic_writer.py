"""Writing a volume's files so that a reader never sees half an update (the kubelet's AtomicWriter).

Layout of a configMap/secret/downwardAPI/projected volume directory:

    ..2026_11_30_10_00_00.123456789/   this version's files (a fresh directory per version)
    ..data -> ..2026_11_30_10_00_00.123456789
    key1 -> ..data/key1                 what users see: links through ..data
    dir  -> ..data/dir

An update writes a new timestamped directory, points a temporary `..data_tmp` link at it and
renames that over `..data` (rename is atomic), so every path a container opens resolves through
either the old version or the new one. The old directory is removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from shared.host.node_dirs import container_dir
from shared.host.safe_paths import read_head

DATA = "..data"
DATA_TMP = "..data_tmp"


@dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int  # file permission bits, e.g. 0o644
    uid: int | None = None  # the file's owner; None: root


class PayloadError(ValueError):
    pass


def validate_path(rel: str) -> None:
    p = PurePosixPath(rel)
    if not rel or p.is_absolute():
        raise PayloadError(f"path {rel!r} must be a non-empty relative path")
    if ".." in p.parts:
        raise PayloadError(f"path {rel!r} must not contain '..'")
    if p.parts[0].startswith(".."):
        raise PayloadError(f"path {rel!r} must not start with '..'")
    if len(rel) > 4096:
        raise PayloadError(f"path {rel[:40]!r}... is longer than 4096 characters")


def _version_dir(target: Path) -> str | None:
    """The name ..data points at, if it is one of ours: a timestamped directory beside it. Any
    other link (absolute, or leading elsewhere) is not followed: it is replaced."""
    try:
        name = os.readlink(target / DATA)
    except OSError:
        return None
    return name if name.startswith("..") and "/" not in name and name not in ("..", DATA, DATA_TMP) else None


def _holds(target: Path, payload: dict[str, FileProjection]) -> bool:
    """Whether the current version holds exactly the payload. What is there is compared without
    following a link, opening anything but regular files, or reading more than the payload's
    size of any file (shared/host/safe_paths.py)."""
    name = _version_dir(target)
    if name is None:
        return False
    base = target / name
    try:
        if not stat.S_ISDIR(os.lstat(base).st_mode):
            return False
    except OSError:
        return False
    found: set[str] = set()
    for dirpath, dirs, files in os.walk(base):
        for entry in dirs + files:
            full = Path(dirpath) / entry
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                continue
            rel = str(full.relative_to(base))
            item = payload.get(rel)
            if item is None or not stat.S_ISREG(st.st_mode) or st.st_mode & 0o7777 != item.mode \
                    or st.st_uid != (item.uid or 0):
                return False
            try:
                if read_head(full, len(item.data) + 1) != item.data:
                    return False
            except OSError:
                return False
            found.add(rel)
    return found == set(payload)


def write_atomically(target: Path, payload: dict[str, FileProjection]) -> bool:
    """Make `target` hold exactly `payload`; False when it already did (nothing written)."""
    for rel in payload:
        validate_path(rel)
    container_dir(target)
    if _holds(target, payload):
        return False
    old = _version_dir(target)
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    new_dir = Path(tempfile.mkdtemp(prefix=stamp, dir=target))
    new_dir.chmod(0o755)
    for rel, item in payload.items():
        path = new_dir / rel
        container_dir(path.parent)
        path.write_bytes(item.data)
        path.chmod(item.mode)
        if item.uid is not None:
            os.chown(path, item.uid, -1)
    tmp_link = target / DATA_TMP
    if tmp_link.is_symlink():
        tmp_link.unlink()
    os.symlink(new_dir.name, tmp_link)
    os.rename(tmp_link, target / DATA)  # the switch: atomic
    wanted = {PurePosixPath(rel).parts[0] for rel in payload}
    for top in wanted:
        link = target / top
        if not link.is_symlink():
            os.symlink(f"{DATA}/{top}", link)
    for entry in target.iterdir():
        if entry.name.startswith(".."):
            continue
        if entry.name not in wanted and entry.is_symlink():
            entry.unlink()
    if old and old != new_dir.name:
        shutil.rmtree(target / old, ignore_errors=True)
    return True
