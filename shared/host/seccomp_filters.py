"""Copying another process's seccomp filters onto this one.

systemd turns a unit's SystemCallFilter=, RestrictAddressFamilies=, RestrictNamespaces=,
LockPersonality= and friends into seccomp filters of its main process. A process that is to run
under the same unit but was forked elsewhere (services/supervisor/fork_server.py) gets them by
reading them from the unit's process with ptrace (PTRACE_SECCOMP_GET_FILTER, which needs
CAP_SYS_ADMIN and a kernel built with CONFIG_CHECKPOINT_RESTORE) and installing the same programs,
oldest first, in itself: in that order each install passes the filters before it, as systemd's own
did (its last filter, SystemCallFilter=, forbids seccomp() itself). The filters are classic BPF programs the kernel keeps as they were
given, so the copy behaves exactly as the original.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.syscall.restype = ctypes.c_long

_PTRACE_DETACH = 17
_PTRACE_SEIZE = 0x4206
_PTRACE_INTERRUPT = 0x4207
_PTRACE_SECCOMP_GET_FILTER = 0x420C
_PTRACE_SECCOMP_GET_METADATA = 0x420D
_WALL = 0x40000000
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_LOG = 2
# seccomp(2)'s number: x86_64, aarch64 (the architectures pykubelet is built and tested on).
_NR_SECCOMP = {"x86_64": 317, "aarch64": 277}.get(os.uname().machine)
_MAX_FILTERS = 64  # systemd installs a handful; more is not a unit's sandbox


class SeccompCopyError(OSError):
    """The filters could not be read or installed; the caller must not run unfiltered."""


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


@dataclass(frozen=True)
class Filter:
    program: tuple[tuple[int, int, int, int], ...]  # (code, jt, jf, k) per instruction
    log: bool = False  # installed with SECCOMP_FILTER_FLAG_LOG


def _error(what: str) -> SeccompCopyError:
    code = ctypes.get_errno()
    return SeccompCopyError(code, f"{what}: {os.strerror(code)}")


def read_filters(pid: int) -> list[Filter]:
    """The seccomp filters of process pid, oldest first. The process is stopped for the reading
    (a ptrace stop of microseconds) and left running as it was."""
    if _libc.ptrace(_PTRACE_SEIZE, pid, None, None) != 0:
        raise _error(f"ptrace attach to {pid}")
    try:
        if _libc.ptrace(_PTRACE_INTERRUPT, pid, None, None) != 0:
            raise _error(f"ptrace interrupt of {pid}")
        os.waitpid(pid, _WALL)
        oldest_first = []  # the kernel's index 0 is the first filter installed
        for index in range(_MAX_FILTERS + 1):
            count = _libc.ptrace(_PTRACE_SECCOMP_GET_FILTER, pid, index, None)
            if count < 0:
                if ctypes.get_errno() == errno.ENOENT:  # past the oldest filter
                    break
                raise _error(f"reading seccomp filter {index} of {pid}")
            if index == _MAX_FILTERS:
                raise SeccompCopyError(errno.E2BIG, f"process {pid} has more than {_MAX_FILTERS} seccomp filters")
            program = (_SockFilter * count)()
            if _libc.ptrace(_PTRACE_SECCOMP_GET_FILTER, pid, index, ctypes.byref(program)) != count:
                raise _error(f"reading seccomp filter {index} of {pid}")
            metadata = ctypes.create_string_buffer(struct.pack("QQ", index, 0), 16)
            flags = 0
            if _libc.ptrace(_PTRACE_SECCOMP_GET_METADATA, pid, 16, metadata) >= 0:
                flags = struct.unpack("QQ", metadata.raw[:16])[1]
            oldest_first.append(Filter(tuple((i.code, i.jt, i.jf, i.k) for i in program),
                                       bool(flags & _SECCOMP_FILTER_FLAG_LOG)))
    finally:
        _libc.ptrace(_PTRACE_DETACH, pid, None, None)
    return oldest_first


def install_filters(filters: list[Filter]) -> None:
    """Install the filters (oldest first) on this process. Sets no_new_privs first, as an
    unprivileged install must and as systemd does for a filtered unit."""
    if not filters:
        return
    if _NR_SECCOMP is None:
        raise SeccompCopyError(errno.ENOSYS, f"seccomp filters are not copied on {os.uname().machine}")
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _error("setting no_new_privs")
    for f in filters:
        program = (_SockFilter * len(f.program))(*[_SockFilter(*i) for i in f.program])
        fprog = _SockFprog(len(f.program), program)
        flags = _SECCOMP_FILTER_FLAG_LOG if f.log else 0
        if _libc.syscall(_NR_SECCOMP, _SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(fprog)) != 0:
            raise _error("installing a seccomp filter")
