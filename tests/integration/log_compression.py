"""Timing a node's log compressions from the files it leaves: when a rotated log is gzipped,
the .gz file is made when compression starts (its birth time) and last written when it ends (its
modification time), so each compression's span can be read from the pod's log directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.conftest import wait_for

CHUNK = 4 * 2**20  # random bytes each container writes twice (as base64); gzip takes a while over them


def two_bursts(image: str, containers: int, pause: float) -> dict:
    """A pod spec whose containers each write a burst, wait `pause` seconds (longer than the
    node's containerLogMonitorInterval, so the first burst is rotated on its own), write another
    (whose rotation compresses the first) and then sleep."""
    burst = f"head -c {CHUNK} /dev/urandom | base64"
    return {"containers": [{"name": f"c{i}", "image": image,
                            "command": ["sh", "-c", f"{burst}; sleep {pause}; {burst}; sleep 3600"]}
                           for i in range(containers)]}


def compression_spans(node, name: str, containers: int, timeout: float) -> list[tuple[float, float]]:
    """Once every container of the running pod `name` has a compressed log: each compression's
    (start, end), in seconds since the epoch."""
    pod = node.wait_running(name)
    pod_dir = next((node.root / "pod-logs").glob(f"default_{name}-*_{pod['uid']}"))
    dirs = [pod_dir / f"c{i}" for i in range(containers)]
    wait_for(lambda: all(any(d.glob("*.gz")) for d in dirs), timeout, f"a compressed log of each container of {name}",
             interval=0.5)
    return [_span(gz) for d in dirs for gz in d.glob("*.gz")]


def _span(path: Path) -> tuple[float, float]:
    out = subprocess.run(["stat", "-c", "%.9W %.9Y", str(path)], capture_output=True, text=True, check=True,
                         timeout=10).stdout.split()
    born, written = float(out[0]), float(out[1])
    assert born > 0, f"this filesystem does not record birth times: {path}"
    return born, written
