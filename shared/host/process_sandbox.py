"""Taking on another process's place: its cgroup, namespaces, limits, privileges and filters.

A systemd unit is more than a command line: systemd starts the unit's process in the unit's
cgroup, in a mount namespace of its own (ProtectSystem=, PrivateTmp=, ReadWritePaths=, ...),
with the unit's capability bounding set, no_new_privs, resource limits, OOM score and seccomp
filters. The preloaded parent (services/supervisor/fork_server.py) forks a service that must run
exactly so: the unit starts a small launcher, and the forked child reads all of that from the
launcher (ProcessSandbox.of) and puts it on itself (enter), in the order the kernel allows:
cgroup (before a read-only cgroupfs is in view), namespaces, working directory, limits, then the
privileges it drops for good, the seccomp filters last.

What is copied is what pykubelet's units set; a unit setting something this cannot copy (another
user, a root directory, a PID or user namespace) is refused with the reason, and the launcher
then runs the service itself (tests/unit/test_fork_units.py keeps the units within these bounds).
"""

from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import dataclass, field
from pathlib import Path

from shared.host import seccomp_filters

_libc = ctypes.CDLL(None, use_errno=True)
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_MDWE = 65
_PR_GET_MDWE = 66

# Joined when the launcher's differs; the mount namespace last (after it, /proc and /sys may be
# the unit's read-only views). A PID or user namespace cannot be joined by a running process.
JOINED_NAMESPACES = ("ipc", "uts", "net", "cgroup", "mnt")
REFUSED_NAMESPACES = ("pid", "user")
RLIMITS = [getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")]


class SandboxError(RuntimeError):
    """The launcher's sandbox cannot be taken on; the service must not run without it."""


@dataclass(frozen=True)
class Capabilities:
    bounding: int
    effective: int
    permitted: int
    inheritable: int
    ambient: int


@dataclass
class ProcessSandbox:
    pid: int
    cgroups: list[str]  # the lines of /proc/PID/cgroup
    namespaces: dict[str, int]  # name -> inode, those that differ from this process's
    cwd: str
    umask: int
    rlimits: dict[int, tuple[int, int]]
    oom_score_adj: int
    nice: int
    affinity: set[int]
    capabilities: Capabilities
    no_new_privs: bool
    filters: list[seccomp_filters.Filter] = field(default_factory=list)
    # MemoryDenyWriteExecute= as systemd 253+ sets it on Linux 6.3+ (PR_SET_MDWE rather than a
    # seccomp filter): not readable from outside, so the launcher reports its own (own_mdwe()).
    mdwe: int = 0
    namespace_fds: dict[str, int] = field(default_factory=dict)  # of `namespaces`, opened by of()

    @classmethod
    def of(cls, pid: int, proc: Path = Path("/proc")) -> ProcessSandbox:
        """Read process pid's sandbox (all but mdwe). Raises SandboxError for what cannot be copied."""
        base = proc / str(pid)
        try:
            status = parse_status((base / "status").read_text())
            own_ns = {n: os.stat(proc / "self" / "ns" / n).st_ino for n in (*JOINED_NAMESPACES, *REFUSED_NAMESPACES)}
            ns = {n: os.stat(base / "ns" / n).st_ino for n in own_ns}
            root = os.readlink(base / "root")
            sandbox = cls(
                pid=pid,
                cgroups=(base / "cgroup").read_text().splitlines(),
                namespaces={n: ino for n, ino in ns.items() if ino != own_ns[n]},
                cwd=os.readlink(base / "cwd"),
                umask=int(status.get("Umask", "0022"), 8),
                rlimits={r: resource.prlimit(pid, r) for r in RLIMITS},
                oom_score_adj=int((base / "oom_score_adj").read_text()),
                nice=os.getpriority(os.PRIO_PROCESS, pid),
                affinity=os.sched_getaffinity(pid),
                capabilities=Capabilities(*(int(status[k], 16) for k in ("CapBnd", "CapEff", "CapPrm", "CapInh",
                                                                         "CapAmb"))),
                no_new_privs=status.get("NoNewPrivs", "0") == "1",
            )
        except (OSError, KeyError, ValueError) as exc:
            raise SandboxError(f"cannot read the sandbox of process {pid}: {exc}") from exc
        why = refusal(status, sandbox.namespaces, root)
        if why:
            raise SandboxError(f"process {pid}: {why}")
        try:  # opened now, so the namespaces joined later are the ones read here
            sandbox.namespace_fds = {n: os.open(base / "ns" / n, os.O_RDONLY | os.O_CLOEXEC) for n in sandbox.namespaces}
        except OSError as exc:
            raise SandboxError(f"cannot open the namespaces of process {pid}: {exc}") from exc
        if status.get("Seccomp", "0") != "0":
            try:
                sandbox.filters = seccomp_filters.read_filters(pid)
            except OSError as exc:
                raise SandboxError(f"cannot read the seccomp filters of process {pid}: {exc}") from exc
        return sandbox

    def enter(self, proc: Path = Path("/proc")) -> None:
        """Put this sandbox on the calling process, which must be single-threaded and hold every
        capability it is to drop. On any failure the process must exit, not go on."""
        join_cgroups(self.cgroups, _mounts((proc / "self" / "mountinfo").read_text()))
        for name in JOINED_NAMESPACES:
            fd = self.namespace_fds.pop(name, None)
            if fd is not None:
                try:
                    if _libc.setns(fd, 0) != 0:  # os.setns is Python 3.12+
                        raise OSError(ctypes.get_errno(), f"joining the launcher's {name} namespace")
                finally:
                    os.close(fd)
        os.chdir(self.cwd)
        os.umask(self.umask)
        for limit, value in self.rlimits.items():
            resource.setrlimit(limit, value)
        (proc / "self" / "oom_score_adj").write_text(str(self.oom_score_adj))
        os.setpriority(os.PRIO_PROCESS, 0, self.nice)
        os.sched_setaffinity(0, self.affinity)
        set_capabilities(self.capabilities)
        if self.no_new_privs and _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "setting no_new_privs")
        if self.mdwe > 0 and _libc.prctl(_PR_SET_MDWE, self.mdwe, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "setting memory-deny-write-execute")
        seccomp_filters.install_filters(self.filters)


def own_mdwe() -> int:
    """This process's memory-deny-write-execute flags (0 where the kernel has none)."""
    return max(int(_libc.prctl(_PR_GET_MDWE, 0, 0, 0, 0)), 0)


def parse_status(text: str) -> dict[str, str]:
    """/proc/PID/status as key -> value (the value's first field)."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields = value.split()
        if fields:
            out[key] = fields[0] if key not in ("Uid", "Gid") else " ".join(fields)
    return out


def refusal(status: dict[str, str], namespaces: dict[str, int], root: str) -> str | None:
    """Why this sandbox cannot be taken on by a forked process, or None."""
    if set(status.get("Uid", "0").split()) != {"0"} or set(status.get("Gid", "0").split()) != {"0"}:
        return "runs as another user than root (User=, Group=): fork refused"
    for name in REFUSED_NAMESPACES:
        if name in namespaces:
            return f"runs in a {name} namespace of its own, which a running process cannot join"
    if root != "/":
        return f"runs with another root directory ({root}; RootDirectory=)"
    return None


def _mounts(mountinfo: str) -> list[tuple[str, str, set[str]]]:
    """(mount point, filesystem type, super options) of every cgroup filesystem."""
    out = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], tail[0], set(tail[2].split(","))))
    return out


def cgroup_procs_files(cgroups: list[str], mounts: list[tuple[str, str, set[str]]]) -> list[Path]:
    """The cgroup.procs file of each hierarchy the lines of a /proc/PID/cgroup name."""
    files = []
    for line in cgroups:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if not path.startswith("/") or ".." in path.split("/"):
            raise SandboxError(f"unexpected cgroup line {line!r}")
        wanted = {c for c in controllers.split(",") if c}
        for mount_point, fstype, options in mounts:
            if (fstype == "cgroup2") if not wanted else (fstype == "cgroup" and wanted <= options):
                files.append(Path(mount_point + path.rstrip("/")) / "cgroup.procs")
                break
        else:
            if wanted:  # a v1 hierarchy not mounted here; the unified line may be absent on v1
                raise SandboxError(f"the cgroup hierarchy {controllers} is not mounted")
    return files


def join_cgroups(cgroups: list[str], mounts: list[tuple[str, str, set[str]]]) -> None:
    for procs in cgroup_procs_files(cgroups, mounts):
        procs.write_text("0")  # 0: the writing process


def set_capabilities(caps: Capabilities) -> None:
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        if not caps.bounding & (1 << cap) and _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"dropping capability {cap} from the bounding set")
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    for i, word in enumerate((0, 32)):
        data[i * 3] = (caps.effective >> word) & 0xFFFFFFFF
        data[i * 3 + 1] = (caps.permitted >> word) & 0xFFFFFFFF
        data[i * 3 + 2] = (caps.inheritable >> word) & 0xFFFFFFFF
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "setting capabilities")
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(last + 1):
        if caps.ambient & (1 << cap) and _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"raising ambient capability {cap}")
