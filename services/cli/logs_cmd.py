"""`pykubelet logs POD [-c CONTAINER]`: a container's log, read from its CRI log file."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sqlalchemy import select

from shared.host.safe_paths import open_regular
from shared.store import DesiredPod, PodRuntime, Store

DEFAULT_ROOT = os.environ.get("PYKUBELET_ROOT_DIR", "/var/lib/pykubelet")


def parse_cri_log_line(line: str) -> tuple[str, str, bool] | None:
    """CRI log lines are `<RFC3339Nano> <stream> <P|F> <content>`; P marks a partial line."""
    parts = line.rstrip("\n").split(" ", 3)
    if len(parts) < 3 or parts[1] not in ("stdout", "stderr"):
        return None
    content = parts[3] if len(parts) == 4 else ""
    return parts[1], content, parts[2] == "P"


def render(path: Path, tail: int | None) -> str:
    out: list[str] = []
    partial = ""
    with os.fdopen(open_regular(path), errors="replace") as f:  # never a link or a FIFO
        for line in f:
            parsed = parse_cri_log_line(line)
            if parsed is None:
                continue
            _, content, is_partial = parsed
            if is_partial:
                partial += content
                continue
            out.append(partial + content)
            partial = ""
    if partial:
        out.append(partial)
    if tail is not None:
        out = out[-tail:] if tail else []
    return "".join(line + "\n" for line in out)


def find_pod(store: Store, name: str) -> tuple[DesiredPod | None, list[str]]:
    """Match namespace/name, name, or a static pod's name without its node suffix."""
    ns, _, short = name.rpartition("/")
    with store.session() as s:
        pods = list(s.scalars(select(DesiredPod)))
    def names(p: DesiredPod) -> set[str]:
        node = p.manifest.get("spec", {}).get("nodeName", "")
        # A static pod "web" runs as "web-<node>"; let users say either.
        return {p.name, p.name.removesuffix(f"-{node}")} if p.source == "file" and node else {p.name}

    matches = [p for p in pods if (not ns or p.namespace == ns) and short in names(p)]
    return (matches[0] if len(matches) == 1 else None), [f"{p.namespace}/{p.name}" for p in matches]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pykubelet logs", description="Print a container's log.")
    p.add_argument("pod", help="pod name, namespace/name, or a static pod's manifest name")
    p.add_argument("-c", "--container", help="container name (needed when the pod has several)")
    p.add_argument("-p", "--previous", action="store_true", help="the previous (exited) instance")
    p.add_argument("--tail", type=int, default=None, help="only the last N lines")
    p.add_argument("--root-dir", default=DEFAULT_ROOT)
    args = p.parse_args(argv)
    db = Path(args.root_dir) / "state.db"
    if not db.exists():
        print(f"no node state in {args.root_dir}; is a node running?", file=sys.stderr)
        return 1
    store = Store(db, writer=None)
    try:
        pod, candidates = find_pod(store, args.pod)
        if pod is None:
            if candidates:
                print(f"pod name {args.pod!r} is ambiguous: {', '.join(candidates)}", file=sys.stderr)
            else:
                print(f"no pod {args.pod!r} on this node (see `pykubelet status`)", file=sys.stderr)
            return 1
        with store.session() as s:
            rt = s.get(PodRuntime, pod.uid)
    finally:
        store.close()
    containers = rt.containers if rt else []
    names = [c["name"] for c in containers]
    if args.container is None:
        app = [c["name"] for c in containers if not c.get("init")]
        if len(app) != 1:
            print(f"pod {pod.namespace}/{pod.name} has containers {names}: choose one with -c",
                  file=sys.stderr)
            return 1
        args.container = app[0]
    entry = next((c for c in containers if c["name"] == args.container), None)
    if entry is None:
        print(f"pod {pod.namespace}/{pod.name} has no container {args.container!r} (has {names})",
              file=sys.stderr)
        return 1
    source = entry.get("last_terminated") if args.previous else entry
    if not source or not source.get("log_path"):
        what = "previous instance" if args.previous else "log yet (not started)"
        print(f"container {args.container} has no {what}", file=sys.stderr)
        return 1
    path = Path(source["log_path"])
    if not path.exists():
        print(f"log file {path} is gone (the container was removed)", file=sys.stderr)
        return 1
    try:
        text = render(path, args.tail)
    except OSError as exc:
        print(f"log file not read: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0
