"""What a service's process is called: its command name (`/proc/PID/comm`, what `ps -C` and
`pgrep` match) is `pykubelet`, as the kubelet's is `kubelet`, and its command line reads
`pykubelet SERVICE FLAGS...`, whether systemd exec'd it through the CLI or `pykubelet up` forked
it. `ps -C pykubelet -f` then lists the node's services with the flags each runs with, which is
where CIS scanners (kube-bench's `bins`) look for a kubelet's flags."""

from __future__ import annotations

COMMAND_NAME = "pykubelet"


def set_title(service: str, args: list[str]) -> None:
    """Call from the process's only thread: the command name is that thread's."""
    import setproctitle

    setproctitle.setproctitle(" ".join([f"{COMMAND_NAME} {service}", *args]))
    # setproctitle also sets the command name, to the title's first 15 bytes ("pykubelet pod-s").
    setproctitle.setthreadtitle(COMMAND_NAME)
