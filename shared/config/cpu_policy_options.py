"""cpuManagerPolicyOptions: the static CPU manager policy's options, checked as the kubelet 1.37
checks them (its cpumanager policy_options.go), with its words.

Two of the three stable options are implemented (services/pod_sync/cpu_manager.py):
- `full-pcpus-only`: a container gets whole physical cores only. A request that is not a
  multiple of the CPUs per core, or more than the whole free cores hold, fails admission with
  SMTAlignmentError.
- `strict-cpu-reservation`: the reserved CPUs leave the shared pool too, so no container of a pod
  runs on them.
The others are refused with a reason: the alpha ones as by the kubelet (their gate is off and
pykubelet runs every gate at its default), the rest because pykubelet does not place CPUs by NUMA
node, socket or uncore cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.model.go_text import go_parse_bool, go_quote

FULL_PCPUS_ONLY = "full-pcpus-only"
STRICT_CPU_RESERVATION = "strict-cpu-reservation"
# The kubelet 1.37's other options, by level, and why pykubelet refuses each.
ALPHA = ("align-by-socket", "distribute-cpus-across-cores")
NOT_IMPLEMENTED = {
    "distribute-cpus-across-numa": "pykubelet does not spread CPUs over NUMA nodes",
    "prefer-align-cpus-by-uncorecache": "pykubelet does not align CPUs to uncore caches",
}


@dataclass(frozen=True)
class CPUPolicyOptions:
    full_pcpus_only: bool = False
    strict_cpu_reservation: bool = False


def parse_cpu_policy_options(options: dict[str, str], policy: str) -> CPUPolicyOptions:
    """The options of cpuManagerPolicyOptions, or ValueError naming the first bad one."""
    if not options:
        return CPUPolicyOptions()
    if policy != "static":
        rendered = " ".join(f"{name}:{value}" for name, value in sorted(options.items()))
        raise ValueError(f"None policy: received unsupported options=map[{rendered}]")
    values = {}
    for name, value in sorted(options.items()):
        if name in ALPHA:
            raise ValueError(f"CPU Manager Policy Alpha-level Options not enabled, but option {go_quote(name)} provided")
        if name in NOT_IMPLEMENTED:
            raise ValueError(f"cpuManagerPolicyOptions: option {go_quote(name)} is not implemented: "
                             f"{NOT_IMPLEMENTED[name]}")
        if name not in (FULL_PCPUS_ONLY, STRICT_CPU_RESERVATION):
            raise ValueError(f"unknown CPU Manager Policy option: {go_quote(name)}")
        try:
            values[name] = go_parse_bool(value)
        except ValueError as exc:
            raise ValueError(f"bad value for option {go_quote(name)}: {exc}") from None
    return CPUPolicyOptions(full_pcpus_only=values.get(FULL_PCPUS_ONLY, False),
                            strict_cpu_reservation=values.get(STRICT_CPU_RESERVATION, False))
