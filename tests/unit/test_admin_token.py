"""The node's admin token file: root's alone from creation, one token for every service."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from shared.process.admin_token import AdminTokenError, ensure_token, read_token, token_path, write_token


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_written_0600_and_fresh_each_time(tmp_path):
    old_umask = os.umask(0)  # the mode comes from open(), not from the umask of whoever writes it
    try:
        first = write_token(tmp_path)
    finally:
        os.umask(old_umask)
    path = token_path(tmp_path)
    assert _mode(path) == 0o600 and read_token(path) == first and len(first) >= 32
    second = write_token(tmp_path)
    assert second != first and read_token(path) == second
    assert sorted(os.listdir(path.parent)) == ["admin-token"], "no temporary file is left"


def test_services_starting_together_agree_on_one_token(tmp_path):
    tokens: list[str] = []
    threads = [threading.Thread(target=lambda: tokens.append(ensure_token(tmp_path))) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(tokens)) == 1 and tokens[0] == read_token(token_path(tmp_path))
    assert ensure_token(tmp_path) == tokens[0], "an existing token is used, not replaced"
    assert sorted(os.listdir(token_path(tmp_path).parent)) == ["admin-token"]


def test_a_token_others_can_read_is_refused(tmp_path):
    write_token(tmp_path)
    path = token_path(tmp_path)
    os.chmod(path, 0o644)
    with pytest.raises(AdminTokenError, match=r"can be read by others .*mode 0644.*remove it"):
        ensure_token(tmp_path)


def test_a_symlink_or_foreign_content_is_refused(tmp_path):
    path = token_path(tmp_path)
    path.parent.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("x" * 43)
    os.chmod(target, 0o600)
    path.symlink_to(target)
    with pytest.raises(AdminTokenError):
        read_token(path)
    path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"not a token\n")
    os.close(fd)
    with pytest.raises(AdminTokenError, match="not a token pykubelet wrote"):
        read_token(path)


def test_none_yet_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_token(token_path(tmp_path))
