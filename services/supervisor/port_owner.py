"""Which process holds a loopback TCP listener.

The supervisor starts NATS and the local registry on fixed loopback ports. Any local user may
bind a free port above 1023 first: a process that did would be answered as "ready" and would
then serve the node's pause and demo images, or take the services' bus credentials. So a
component counts as started only when the listening socket on its port belongs to the process
the supervisor started (the socket's inode in /proc/net/tcp is one of that process's fds).
"""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def listener_inodes(port: int, proc_root: Path = Path("/proc")) -> set[int]:
    """Inodes of the sockets listening on 127.0.0.1:port or on any address, port `port`."""
    wanted = {f"0100007F:{port:04X}", f"00000000:{port:04X}"}
    inodes: set[int] = set()
    try:
        lines = (proc_root / "net" / "tcp").read_text().splitlines()[1:]
    except OSError:
        return inodes
    for line in lines:
        fields = line.split()
        if len(fields) > 9 and fields[1] in wanted and fields[3] == _LISTEN:
            inodes.add(int(fields[9]))
    return inodes


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
    """True when every socket listening on the loopback port is one of pid's own."""
    listening = listener_inodes(port, proc_root)
    return bool(listening) and listening <= socket_inodes(pid, proc_root)
