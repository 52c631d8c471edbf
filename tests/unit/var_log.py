"""A stand-in /var/log for the /logs/ tests (test_system_logs.py, test_log_query.py): plain files,
a directory, an odd name, symlinks in and out, a FIFO; and reading an answer's body whole."""

from __future__ import annotations

import os
from pathlib import Path


async def body(resp) -> bytes:
    if isinstance(resp.body, bytes):
        return resp.body
    return b"".join([chunk async for chunk in resp.body])


def stand_in_var_log(tmp_path: Path) -> Path:
    root = tmp_path / "log"
    (root / "apt").mkdir(parents=True)
    (root / "syslog").write_text("line one\nline two\n")
    (root / "apt" / "history.log").write_text("Start-Date: 2026-12-06\n")
    (root / "a b&<c>.log").write_text("odd name\n")
    (root / "containers").mkdir()
    (root / "containers" / "app.log").symlink_to(root / "syslog")  # a link inside: followed
    (tmp_path / "secret").write_text("root's only\n")
    (root / "escape").symlink_to(tmp_path / "secret")  # a link out: refused
    (root / "escape-dir").symlink_to(tmp_path)
    os.mkfifo(root / "pipe")
    return root
