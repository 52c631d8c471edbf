"""Who listens on a loopback port, before a secret is sent to it.

A service that is down (restarting, crashed) leaves its admin port free, and any local user may
bind a free port above 1023. Whoever asks a service's admin app sends the node's admin token:
it must not hand it to a process that bound the port first. The kernel names each socket's
owner in /proc/net/tcp and /proc/net/tcp6 (an IPv6 wildcard listener takes 127.0.0.1's
connections too, and keeps the service from binding the port).
"""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN
_V4 = ("0100007F", "00000000")  # 127.0.0.1, 0.0.0.0 (as the kernel prints them)
_V6 = ("00000000000000000000000000000000", "0000000000000000FFFF00000100007F")  # ::, ::ffff:127.0.0.1


def _listeners(port: int, proc_root: Path) -> list[tuple[int, int]]:
    """(uid, inode) of every socket that would take a connection to 127.0.0.1:port."""
    found = []
    for table, addresses in (("tcp", _V4), ("tcp6", _V6)):
        wanted = {f"{a}:{port:04X}" for a in addresses}
        try:
            lines = (proc_root / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[1] in wanted and fields[3] == _LISTEN:
                found.append((int(fields[7]), int(fields[9])))
    return found


def listener_uids(port: int, proc_root: Path = Path("/proc")) -> list[int]:
    """The owners (uids) of every socket that would take a connection to 127.0.0.1:port."""
    return [uid for uid, _ in _listeners(port, proc_root)]


def root_listens(port: int, proc_root: Path = Path("/proc")) -> bool:
    """True when something listens on the loopback port and every such socket is root's."""
    uids = listener_uids(port, proc_root)
    return bool(uids) and all(uid == 0 for uid in uids)


def socket_inodes(pid: int, proc_root: Path = Path("/proc")) -> set[int]:
    """Inodes of the sockets a process has open (empty when it is gone)."""
    fd_dir = proc_root / str(pid) / "fd"
    inodes: set[int] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            inodes.add(int(target[8:-1]))
    return inodes


def owns_listener(pid: int, port: int, proc_root: Path = Path("/proc")) -> bool:
    """True when something listens on the loopback port and every such socket is one of pid's
    own: the process the supervisor started, not a local user who bound the port first."""
    inodes = {inode for _, inode in _listeners(port, proc_root)}
    return bool(inodes) and inodes <= socket_inodes(pid, proc_root)
