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
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

DATA = "..data"
DATA_TMP = "..data_tmp"


@dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int  # file permission bits, e.g. 0o644


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


def _current(target: Path) -> dict[str, FileProjection] | None:
    data = target / DATA
    if not data.is_symlink():
        return None
    base = target / os.readlink(data)
    found: dict[str, FileProjection] = {}
    for dirpath, _, files in os.walk(base):
        for name in files:
            full = Path(dirpath) / name
            st = full.stat()
            found[str(full.relative_to(base))] = FileProjection(full.read_bytes(), st.st_mode & 0o7777)
    return found


def write_atomically(target: Path, payload: dict[str, FileProjection]) -> bool:
    """Make `target` hold exactly `payload`; False when it already did (nothing written)."""
    for rel in payload:
        validate_path(rel)
    target.mkdir(parents=True, exist_ok=True)
    if _current(target) == payload:
        return False
    old = os.readlink(target / DATA) if (target / DATA).is_symlink() else None
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    new_dir = Path(tempfile.mkdtemp(prefix=stamp, dir=target))
    new_dir.chmod(0o755)
    for rel, item in payload.items():
        path = new_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(item.data)
        path.chmod(item.mode)
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
