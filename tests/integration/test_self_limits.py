"""oomScoreAdj and maxOpenFiles at the kubelet's defaults (-999, 1000000), on this node's
processes: applied where the host lets root lower an OOM score and raise a hard limit
(CAP_SYS_RESOURCE); where it does not (a container, as on the machines these tests run on), each
process runs on with what it had and its log names the field and what to do. The settings node
of tests/cpu_manager sets values any process may take and sees them applied."""

from __future__ import annotations

import resource
from pathlib import Path

from shared.host.facts import kernel_refuses_negative_oom_score_adj
from shared.process.admin import SERVICES
from tests.integration.node_limits import node_process_limits


def test_the_nodes_processes_take_the_kubelets_oom_score_and_open_files_limit(pods):
    limits = node_process_limits(pods.root / "run")
    if not kernel_refuses_negative_oom_score_adj():
        assert limits == {name: (-999, "1000000/1000000") for name in limits}, limits
        return
    # What the node was started with (node-api raises its soft limit to the hard one).
    score = int(Path("/proc/self/oom_score_adj").read_text())
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert limits == {name: (score, f"{hard if name == 'node-api' else soft}/{hard}") for name in limits}, limits
    for service in SERVICES:
        log = (pods.root / "logs" / f"{service}.log").read_text()
        assert "oomScoreAdj -999 not applied to this process" in log and "OOMScoreAdjust=" in log, service
        assert "maxOpenFiles 1000000 not applied to this process" in log and "LimitNOFILE=" in log, service
