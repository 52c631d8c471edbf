"""The node agent's own OOM score and open-files limit (oomScoreAdj, maxOpenFiles), as the
kubelet sets them for itself at start.

-999 keeps pykubelet's processes among the OOM killer's last choices on a node whose pods run
it out of memory: a node agent killed there stops reporting the node and evicting the pods that
cause the pressure. Every pykubelet process applies both at start (the supervisor before it
forks or starts anything, so NATS and the runtime it starts inherit them). Lowering the OOM score
and raising the hard file limit need CAP_SYS_RESOURCE, which the systemd units do not give their
services: there the unit sets them (OOMScoreAdjust=, LimitNOFILE=, written by `pykubelet
install` from config.yaml) and the process only checks that it got them. What cannot be applied
is logged with what to do; the process runs on, as the kubelet does.
"""

from __future__ import annotations

import errno
import logging
import resource
from dataclasses import dataclass
from pathlib import Path

from shared.config.settings import KubeletConfiguration

log = logging.getLogger(__name__)

_WHERE = ("under systemd, the unit's {unit} gives it: run `pykubelet install` again to carry config.yaml's value "
          "there; in a container, give the node CAP_SYS_RESOURCE or set {field}: {value}")


@dataclass(frozen=True)
class SelfLimits:
    oom_score_adj: int
    max_open_files: int


def apply(want: SelfLimits, proc_self: Path = Path("/proc/self")) -> list[str]:
    """Set both; return what could not be set (each a sentence naming the field), also logged."""
    problems = [p for p in (_oom_score_adj(want.oom_score_adj, proc_self), _open_files(want.max_open_files)) if p]
    for problem in problems:
        log.warning("%s", problem)
    return problems


def _oom_score_adj(value: int, proc_self: Path) -> str:
    path = proc_self / "oom_score_adj"
    current = 0
    try:
        current = int(path.read_text().strip())
        if current == value:
            return ""
        path.write_text(f"{value}\n")
    except OSError as exc:
        why = ("lowering an OOM score needs CAP_SYS_RESOURCE, which this process lacks; " + _WHERE.format(
            unit="OOMScoreAdjust=", field="oomScoreAdj", value=current)
               if exc.errno in (errno.EACCES, errno.EPERM) else exc.strerror)
        return f"oomScoreAdj {value} not applied to this process ({path}: {why})"
    return ""


def _open_files(value: int) -> str:
    try:
        if resource.getrlimit(resource.RLIMIT_NOFILE) == (value, value):
            return ""
        resource.setrlimit(resource.RLIMIT_NOFILE, (value, value))
    except (OSError, ValueError) as exc:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (f"maxOpenFiles {value} not applied to this process (open files limit stays {soft}/{hard}: {exc}; "
                "raising the hard limit needs CAP_SYS_RESOURCE and at most fs.nr_open; "
                + _WHERE.format(unit="LimitNOFILE=", field="maxOpenFiles", value=hard) + ")")
    return ""


def from_config(kubelet: KubeletConfiguration) -> SelfLimits:
    return SelfLimits(oom_score_adj=kubelet.oom_score_adj, max_open_files=kubelet.max_open_files)
