"""The node's admin token: what makes the loopback admin apps root's alone.

Loopback is not private: any local user and any hostNetwork pod can connect to 127.0.0.1. So
every request to a service's admin app (/healthz, /readyz and /metrics too) must carry
`Authorization: Bearer <token>`, the content of `<root>/run/admin-token`, a file only root can
read (0600, created so: the mode is given to open(), never fixed by a chmod afterwards).

`pykubelet up` writes a fresh one at every start, before it starts the services. A service
started another way (a systemd unit, a compose container) uses the one there, or makes it if it
is the first. The token never travels over the bus or through the store: whoever may read the
file may ask, which is root (the supervisor, systemd's and compose's health checks through
`pykubelet admin`, node-api's merge of the services' /metrics, a Prometheus given the file as
`credentials_file`).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from pathlib import Path

from shared.config.settings import ConfigError

TOKEN_FILE = "run/admin-token"  # under the root dir
# secrets.token_urlsafe(32) makes 43 of these; a file holding anything else was not written by us.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,128}")
_MAX_READ = 256


class AdminTokenError(ConfigError):
    """An admin token file that cannot be used; the message names the file and what to do."""


def token_path(root_dir: Path) -> Path:
    return root_dir / TOKEN_FILE


def write_token(root_dir: Path) -> str:
    """A fresh token, replacing the file atomically (a reader sees the old one or the new one)."""
    token = secrets.token_urlsafe(32)
    path = token_path(root_dir)
    tmp = _write_new(path, token)
    os.replace(tmp, path)
    return token


def ensure_token(root_dir: Path) -> str:
    """The token in the file, or a new one if there is none yet. Services starting together
    race to make it: it is linked into place only if absent, so all of them end up with the
    same token."""
    path = token_path(root_dir)
    try:
        return read_token(path)
    except FileNotFoundError:
        pass
    tmp = _write_new(path, secrets.token_urlsafe(32))
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process was first: its token is the node's
    finally:
        os.unlink(tmp)
    return read_token(path)


def read_token(path: Path) -> str:
    """The token in path: a regular file of root's that nobody else can read. Raises
    FileNotFoundError when there is none, AdminTokenError when it cannot be used."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, f"no admin token at {path}", str(path)) from None
        raise AdminTokenError(f"admin token {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise AdminTokenError(f"admin token {path}: not a regular file")
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise AdminTokenError(
                f"admin token {path} can be read by others (owner {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):04o}); remove it and restart the node's services")
        text = f.read(_MAX_READ).decode(errors="replace").strip()
    if not _TOKEN.fullmatch(text):
        raise AdminTokenError(f"admin token {path}: not a token pykubelet wrote; remove it and restart "
                              "the node's services")
    return text


def _write_new(path: Path, token: str) -> Path:
    """The token in a new file beside path, 0600 from its creation."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    return tmp
