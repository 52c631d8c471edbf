"""Hostile input against a real node. Each test holds a canary beside the node (a directory and
a file outside its root dir, the kind of place an escape would land) and checks afterwards that
its inodes, modes and contents are exactly as they were, and that the host's /etc is untouched."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import node, pods  # noqa: F401  (this package's own node)


def _snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            p = Path(dirpath) / name
            st = os.lstat(p)
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
            out[str(p.relative_to(root))] = (st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size, digest)
    return out


def _etc_snapshot() -> dict[str, tuple]:
    out = {}
    for name in sorted(os.listdir("/etc")):
        st = os.lstat(f"/etc/{name}")
        out[name] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns)
    return out


@dataclass
class Canary:
    dir: Path
    file: Path
    content: str


@pytest.fixture
def canary():
    base = Path(f"/var/tmp/pykubelet-canary-{secrets.token_hex(4)}")
    (base / "secret-dir").mkdir(parents=True, mode=0o700)
    flag = base / "secret-dir" / "flag"
    content = f"canary {secrets.token_hex(16)}\n"
    flag.write_text(content)
    os.chmod(flag, 0o600)
    before, etc_before = _snapshot(base), _etc_snapshot()
    try:
        yield Canary(base / "secret-dir", flag, content)
        assert _snapshot(base) == before, f"the canary beside the node was touched: {base}"
        assert _etc_snapshot() == etc_before, "/etc on the host was touched"
    finally:
        shutil.rmtree(base, ignore_errors=True)
