"""Static pods: the manifest directory as a pod source.

The directory is watched with inotify so a change applies within a fraction of a second,
and rescanned every fileCheckFrequency in case an event was missed. Each scan is the whole truth:
files present are the pods wanted, broken files are recorded with the reason and skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from sqlalchemy import delete, select

from shared.model.podspec import (
    MAX_MANIFEST_BYTES,
    ManifestInvalid,
    Pod,
    canonical_json,
    parse_manifest_text,
    validate_pod,
)
from shared.store import DesiredPod, ManifestError, Store
from shared.tasks.dir_watch import Change, DirectoryWatch

log = logging.getLogger(__name__)

SOURCE = "file"
CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_HASH = "kubernetes.io/config.hash"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
SETTLE, DEBOUNCE = 0.05, 0.2  # seconds


@dataclass
class ScanResult:
    pods: dict[str, Pod]          # uid -> pod
    sources: dict[str, str]       # uid -> file path
    errors: dict[str, str]        # file path -> problem


def static_pod_uid(node_name: str, path: str, manifest: dict[str, Any], kind: str = "file") -> str:
    """Like the kubelet: a hash of node, file (or URL) and content, so any edit makes a new pod."""
    h = hashlib.md5()
    h.update(f"host:{node_name}".encode())
    h.update(f"{kind}:{path}".encode())
    h.update(canonical_json(manifest).encode())
    return h.hexdigest()


def read_manifest(path: Path) -> str:
    """A regular file of at most MAX_MANIFEST_BYTES (a symlink is followed only to one), read
    without blocking on a FIFO and without reading more than the limit."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ManifestInvalid(f"cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ManifestInvalid("is not a regular file")
        if st.st_size > MAX_MANIFEST_BYTES:
            raise ManifestInvalid(f"is {st.st_size} bytes; a manifest may be at most {MAX_MANIFEST_BYTES} "
                                  f"bytes (1.5 MiB, the API server's limit)")
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestInvalid(f"grew beyond {MAX_MANIFEST_BYTES} bytes while being read")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ManifestInvalid("is not UTF-8 text") from None


def pod_from_file(path: Path, node_name: str) -> Pod:
    text = read_manifest(path)
    return static_pod(parse_manifest_text(text), node_name, str(path), SOURCE)


def static_pod(raw: object, node_name: str, where: str, source: str) -> Pod:
    """A static pod from its parsed manifest, with the kubelet's defaults for one: named after
    the node, its uid a hash of where it came from and what it says."""
    pod = validate_pod(raw)
    if not isinstance(raw, dict) or raw.get("kind") != "Pod":
        raise ManifestInvalid("kind: Required value (must be Pod)")
    if pod.spec.ephemeralContainers:
        # As the kubelet (pod create validation): they join a running pod through the API
        # server's ephemeralcontainers subresource, and a static pod has no such way in.
        raise ManifestInvalid("spec.ephemeralContainers: Forbidden: cannot be set on create")
    uid = pod.metadata.uid or static_pod_uid(node_name, where, raw, "url" if source == "http" else "file")
    pod.metadata.uid = uid
    # Static pods are named after the node, so two nodes' copies differ in the API.
    pod.metadata.name = f"{pod.metadata.name}-{node_name}"
    pod.spec.nodeName = node_name
    pod.metadata.annotations = {**pod.metadata.annotations, CONFIG_SOURCE: source, CONFIG_HASH: uid}
    return pod


def scan_directory(directory: Path, node_name: str) -> ScanResult:
    result = ScanResult({}, {}, {})
    if not directory.is_dir():
        return result
    by_name: dict[str, str] = {}
    for path in sorted(directory.iterdir()):
        # Like the kubelet: hidden files (editor swap files, ..data) are not manifests.
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.suffix.lower() not in MANIFEST_SUFFIXES:
            continue
        try:
            pod = pod_from_file(path, node_name)
        except ManifestInvalid as exc:
            result.errors[str(path)] = f"manifest invalid: {exc}"
            continue
        if pod.full_name in by_name:
            result.errors[str(path)] = (f"manifest invalid: pod {pod.full_name} is already defined by "
                                        f"{by_name[pod.full_name]}; pod names must be unique")
            continue
        by_name[pod.full_name] = str(path)
        result.pods[pod.uid] = pod
        result.sources[pod.uid] = str(path)
    return result


def apply_static_pods(store: Store, source: str, result: ScanResult, owns_error: Callable[[str], bool],
                      pods_known: bool = True) -> set[str]:
    """Make the store's pods of `source` those of `result` and its errors those recorded for the
    entries `owns_error` says are the source's; return the UIDs whose desire changed.
    pods_known false: the source could not be read, its pods stay as they are (as the kubelet's)."""
    changed: set[str] = set()
    with store.session() as s:
        existing = {r.uid: r for r in s.scalars(select(DesiredPod).where(DesiredPod.source == source))}
        for uid, row in existing.items():
            if pods_known and uid not in result.pods and not row.deleting:
                row.deleting = True
                changed.add(uid)
                log.info("static pod %s/%s removed from %s; stopping it", row.namespace, row.name, row.source_path)
        for uid, pod in result.pods.items():
            if uid in existing:  # wanted already, or came back while being stopped: let the stop finish
                continue
            s.add(DesiredPod(uid=uid, namespace=pod.metadata.namespace, name=pod.metadata.name,
                             source=source, source_path=result.sources[uid], manifest=pod.to_manifest(),
                             grace_period_seconds=pod.spec.terminationGracePeriodSeconds))
            changed.add(uid)
            log.info("static pod %s from %s (uid %s)", pod.full_name, result.sources[uid], uid)
        old_errors = {e.source_path: e.error for e in s.scalars(select(ManifestError)) if owns_error(e.source_path)}
        if old_errors != result.errors:
            for path in old_errors:
                s.execute(delete(ManifestError).where(ManifestError.source_path == path))
            for path, err in result.errors.items():
                s.add(ManifestError(source_path=path, error=err))
    return changed


class StaticPodSource:
    def __init__(self, directory: str, node_name: str, store: Store, rescan_every: float,
                 on_change: Callable[[set[str]], Awaitable[None]] | None = None) -> None:
        self.directory = Path(directory) if directory else None
        self.node_name = node_name
        self.store = store
        self.rescan_every = rescan_every
        self.on_change = on_change
        self.synced = asyncio.Event()  # set after the first full scan

    async def scan(self) -> set[str]:
        """Apply the directory's content to the store; return the UIDs whose desire changed."""
        if self.directory is None:
            return set()
        result = await asyncio.to_thread(scan_directory, self.directory, self.node_name)
        # On the store thread, as every write. The directory's errors are those of its files
        # (the URL's and the API's are their sources' own).
        inside = os.path.join(self.directory, "")
        changed = await self.store.run(apply_static_pods, self.store, SOURCE, result, lambda p: p.startswith(inside))
        for path, err in result.errors.items():
            log.warning("static pod %s skipped: %s", path, err)
        return changed

    async def run(self) -> None:
        """Scan now, then on every change in the directory and every rescan period."""
        await self._scan_and_notify()
        self.synced.set()
        directory = self.directory
        if directory is None:
            log.info("no staticPodPath configured: static pods disabled")
            await asyncio.Event().wait()
            return
        while True:
            if not directory.is_dir():
                log.warning("staticPodPath %s does not exist; checking again in %.0fs",
                            directory, self.rescan_every)
                await asyncio.sleep(self.rescan_every)
                await self._scan_and_notify()
                continue
            await self._watch(directory, asyncio.get_running_loop().time() + self.rescan_every)
            await self._scan_and_notify()  # the periodic rescan

    async def _watch(self, directory: Path, until: float) -> None:
        """Scan on every change in the directory until `until` (loop time), or until the
        directory itself goes away (shared/tasks/dir_watch.py: no thread, no wake-ups while nothing
        changes, a burst of changes is one scan)."""
        loop = asyncio.get_running_loop()
        async with DirectoryWatch(directory, settle=SETTLE, debounce=DEBOUNCE) as watch:
            while (left := until - loop.time()) > 0:
                change = await watch.next_change(left)
                if change is Change.TIMEOUT:
                    return
                await self._scan_and_notify()
                if change is Change.GONE:
                    return

    async def _scan_and_notify(self) -> None:
        changed = await self.scan()
        if changed and self.on_change is not None:
            await self.on_change(changed)
