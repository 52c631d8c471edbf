"""What a node's own processes were given: their OOM score and open-files limit (oomScoreAdj,
maxOpenFiles), read from /proc."""

from __future__ import annotations

from pathlib import Path

from shared.process.admin import SERVICES


def process_limits(pid: int) -> tuple[int, str]:
    """(oom_score_adj, "soft/hard" open files) of a process."""
    score = int(Path(f"/proc/{pid}/oom_score_adj").read_text())
    line = next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
                if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return score, f"{soft}/{hard}"


def node_process_limits(run_dir: Path) -> dict[str, tuple[int, str]]:
    """Every process `pykubelet up` runs of its own: the supervisor, NATS and each service."""
    names = ["supervisor", "nats", *SERVICES]
    return {name: process_limits(int((run_dir / f"{name}.pid").read_text())) for name in names}
