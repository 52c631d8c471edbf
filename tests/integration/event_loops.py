"""The suites' check that no service blocked its event loop: every node the tests start runs its
services with the loop watchdog (shared/process/loop_watchdog.py) recording into the node's root dir;
a package's node fails its teardown listing each callback that blocked a loop for over 100 ms."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from shared.process import loop_watchdog

RECORDS = "loop-watchdog.jsonl"


def watched_env(root: Path) -> dict[str, str]:
    """The environment for `pykubelet up`: its services record slow callbacks under root."""
    return {**os.environ, loop_watchdog.ENV: str(root / RECORDS)}


def _describe(rec: dict) -> str:
    lines = [f"{rec['service']} (pid {rec['pid']}) at {rec['at']}: {rec['callback']} held the loop "
             f"{rec['seconds']:.3f}s{'' if rec['ended'] else ' and had not returned'}, "
             f"in a system call for {rec['blocked_share']:.0%} of it"]
    for site in rec["sites"]:
        lines.append(f"    {site['samples']:4d} samples in {site['syscall']}: {site['site'] or '(no pykubelet frame)'}"
                     f" -> {site['call']}")
    lines += [f"        {frame}" for frame in rec["stack"]]
    return "\n".join(lines)


def records(root: Path) -> list[dict]:
    """What the node's services recorded so far, oldest first."""
    path = root / RECORDS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_loops_never_blocked(root: Path, since: int = 0) -> None:
    """Fail listing every blocking callback recorded (from record number `since` on)."""
    found = records(root)[since:]
    blocking = [r for r in found if r["kind"] == "blocking"]
    # CPU-bound ones stretch with the machine's load: shown, not failed.
    for busy in (r for r in found if r["kind"] == "busy"):
        warnings.warn(f"a CPU-bound callback held an event loop:\n{_describe(busy)}", stacklevel=1)
    if blocking:
        pytest.fail(f"{len(blocking)} callback(s) blocked a service's event loop for over "
                    f"{loop_watchdog.THRESHOLD * 1000:.0f} ms (records in {root / RECORDS}):\n"
                    + "\n".join(_describe(r) for r in blocking), pytrace=False)
