"""topologyManagerPolicyOptions, checked as the kubelet 1.37 checks them (its topologymanager
policy_options.go), with its words.

Both options are stable: `prefer-closest-numa-nodes` (a bool) and `max-allowable-numa-nodes`
(an integer, at least 8). They weigh NUMA nodes against each other, and pykubelet runs the
topology manager's policies only on a host with one NUMA node (shared/host/checks.py refuses any
other policy than `none` on more), where neither changes anything, in the kubelet either.
"""

from __future__ import annotations

import re

from shared.model.go_text import go_parse_bool, go_quote

PREFER_CLOSEST_NUMA_NODES = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES = "max-allowable-numa-nodes"
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8
_GO_INT = re.compile(r"[+-]?[0-9]+")


def check_topology_policy_options(options: dict[str, str]) -> None:
    """ValueError naming the first option the kubelet would refuse."""
    for name, value in sorted(options.items()):
        if name == PREFER_CLOSEST_NUMA_NODES:
            try:
                go_parse_bool(value)
            except ValueError as exc:
                raise ValueError(f"bad value for option {go_quote(name)}: {exc}") from None
        elif name == MAX_ALLOWABLE_NUMA_NODES:
            if not _GO_INT.fullmatch(value) or abs(int(value)) >= 2**63:
                raise ValueError(f"unable to convert policy option to integer {go_quote(name)}: strconv.Atoi: parsing "
                                 f"{go_quote(value)}: invalid syntax")
            if int(value) < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                raise ValueError(f"the minimum value of {go_quote(name)} should not be less than "
                                 f"{DEFAULT_MAX_ALLOWABLE_NUMA_NODES}")
        else:
            raise ValueError(f"unknown Topology Manager Policy option: {go_quote(name)}")
