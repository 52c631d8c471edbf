"""A unit's launcher as systemd would start it, for tests/integration/test_fork_server.py: it puts
itself in a cgroup, sets limits, an OOM score, a umask, a working directory and a seccomp filter,
then execs the command after `--` (`pykubelet fork ...`)."""

from __future__ import annotations

import argparse
import os
import resource
import sys

from shared.host.seccomp_filters import Filter, install_filters

# Two filters, as systemd installs several. Classic BPF. The second: getpgid (a call the service
# never makes) and seccomp() itself fail with EPERM, as systemd's last filter (SystemCallFilter=)
# forbids seccomp(): the copy must install them in their order, or its own second install fails.
_GETPGID, _SECCOMP = {"x86_64": (121, 317), "aarch64": (155, 277)}[os.uname().machine]
ALLOW_PROGRAM = ((0x06, 0, 0, 0x7FFF0000),)  # ret ALLOW
DENIED_PROGRAM = (
    (0x20, 0, 0, 0),  # ld [nr]
    (0x15, 1, 0, _GETPGID),  # jeq getpgid -> deny
    (0x15, 0, 1, _SECCOMP),  # jeq seccomp -> deny, else allow
    (0x06, 0, 0, 0x00050000 | 1),  # ret ERRNO(EPERM)
    (0x06, 0, 0, 0x7FFF0000),  # ret ALLOW
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cgroup")
    p.add_argument("--cwd", required=True)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    if args.cgroup:
        with open(os.path.join(args.cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    resource.setrlimit(resource.RLIMIT_NOFILE, (4321, 4321))
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("500")
    os.umask(0o027)
    os.chdir(args.cwd)
    install_filters([Filter(ALLOW_PROGRAM), Filter(DENIED_PROGRAM)])
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
