"""API pods: the pods bound to this node (spec.nodeName), from a list + watch on the API server.

List first (the whole truth at one resourceVersion), then watch from there; on 410 Gone or any
watch failure, list again. Every list result is applied as a whole, so nothing is missed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from shared.api.client import ApiError, KubeApi, path
from shared.bus.events import Recorder
from shared.model.podspec import ManifestInvalid, validate_pod
from shared.store import DesiredPod, ManifestError, RefusedPod, Store
from shared.tasks.retry import keep_running

log = logging.getLogger(__name__)

SOURCE = "api"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
WATCH_TIMEOUT = 300  # seconds; the server ends the watch and we resume from the last version
RETRY_INITIAL, RETRY_MAX = 1.0, 30.0


def _error_key(pod: dict[str, Any]) -> str:
    m = pod.get("metadata", {})
    return f"api:{m.get('namespace', '')}/{m.get('name', '')}"


REFUSED_REASON = "UnsupportedPodSpec"


class ApiPodSource:
    def __init__(self, api: KubeApi, node_name: str, store: Store,
                 on_change: Callable[[set[str]], Awaitable[None]] | None = None,
                 events: Recorder | None = None,
                 on_mirror: Callable[[], Awaitable[None]] | None = None) -> None:
        self.api = api
        self.node_name = node_name
        self.store = store
        self.on_change = on_change
        # Mirror pods are not run here, but the watch sees them first: whoever keeps them
        # (status-reporter) hears of every change instead of listing the node's pods on a timer.
        self.on_mirror = on_mirror
        self.events = events
        self.synced = asyncio.Event()
        self.field_selector = f"spec.nodeName={node_name}"

    # -- applying what the API says -----------------------------------------------------------

    def _upsert(self, s: Session, pod: dict[str, Any], existing: DesiredPod | None) -> bool:
        meta = pod["metadata"]
        uid = meta["uid"]
        refused = s.get(RefusedPod, uid)
        if refused is not None:
            # Decided once, as admission is; a delete is confirmed by status-reporter at once.
            if meta.get("deletionTimestamp") and not refused.deleting:
                refused.deleting = True
                return True
            return False
        if existing is None:
            try:
                validate_pod(_strip(pod))
            except ManifestInvalid as exc:
                self._refuse(s, pod, str(exc), exc.reason or REFUSED_REASON)
                return True
        spec_grace = pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds", spec_grace)
            if existing is None:
                s.add(DesiredPod(uid=uid, namespace=meta["namespace"], name=meta["name"], source=SOURCE,
                                 source_path=_error_key(pod), manifest=_strip(pod), deleting=True,
                                 grace_period_seconds=grace))
                return True
            if not existing.deleting or grace < existing.grace_period_seconds:
                # A second delete may shorten the grace period, never lengthen it.
                existing.grace_period_seconds = min(grace, existing.grace_period_seconds) \
                    if existing.deleting else grace
                existing.deleting = True
                return True
            return False
        if existing is not None:
            return self._update(s, pod, existing)
        s.add(DesiredPod(uid=uid, namespace=meta["namespace"], name=meta["name"], source=SOURCE,
                         source_path=_error_key(pod), manifest=_strip(pod), grace_period_seconds=spec_grace))
        log.info("API pod %s/%s bound to this node (uid %s)", meta["namespace"], meta["name"], uid)
        return True

    def _update(self, s: Session, pod: dict[str, Any], existing: DesiredPod) -> bool:
        """An update of a running pod: labels and annotations (downward API volumes), container
        images, activeDeadlineSeconds. Writes of the pod's status by this node change only its
        resourceVersion: those are not updates."""
        new = _strip(pod)
        if existing.deleting or _comparable(new) == _comparable(existing.manifest):
            return False
        try:
            validate_pod(new)
        except ManifestInvalid as exc:
            s.merge(ManifestError(source_path=_error_key(pod), error=f"pod update invalid, still running the "
                                                                     f"previous version: {exc}"))
            return False
        existing.manifest = new
        log.info("API pod %s/%s updated", pod["metadata"]["namespace"], pod["metadata"]["name"])
        return True

    def _refuse(self, s: Session, pod: dict[str, Any], why: str, reason: str = REFUSED_REASON) -> None:
        """A pod this node cannot run as written: Failed with the reason, as the kubelet rejects a
        pod it cannot admit, instead of Pending forever."""
        meta = pod["metadata"]
        message = f"pykubelet cannot run this pod: {why}"
        s.merge(ManifestError(source_path=_error_key(pod), error=f"pod invalid: {why}"))
        s.add(RefusedPod(uid=meta["uid"], namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                         reason=reason, message=message,
                         deleting=bool(meta.get("deletionTimestamp"))))
        log.warning("API pod %s/%s refused: %s", meta.get("namespace"), meta.get("name"), why)
        if self.events is not None:
            self.events.pod(meta.get("namespace", ""), meta.get("name", ""), meta["uid"], "Warning",
                            reason, message)

    def apply_list(self, pods: list[dict[str, Any]]) -> set[str]:
        pods = [p for p in pods if not _is_mirror(p)]
        changed: set[str] = set()
        with self.store.session() as s:
            rows = {r.uid: r for r in s.scalars(select(DesiredPod).where(DesiredPod.source == SOURCE))}
            listed = {p["metadata"]["uid"] for p in pods}
            for p in pods:
                if self._upsert(s, p, rows.get(p["metadata"]["uid"])):
                    changed.add(p["metadata"]["uid"])
            for uid, row in rows.items():
                if uid not in listed:
                    changed.add(uid)
                    self._drop(s, row)
            for refused in s.scalars(select(RefusedPod)):
                if refused.uid not in listed:
                    changed.add(refused.uid)
                    s.delete(refused)
                    s.execute(delete(ManifestError).where(
                        ManifestError.source_path == f"api:{refused.namespace}/{refused.name}"))
        return changed

    def apply_event(self, kind: str, pod: dict[str, Any]) -> set[str]:
        if _is_mirror(pod):
            return set()  # the API's copy of one of our static pods: nothing to run
        uid = pod["metadata"]["uid"]
        with self.store.session() as s:
            row = s.get(DesiredPod, uid)
            if kind == "DELETED":
                refused = s.get(RefusedPod, uid)
                if refused is not None:
                    s.delete(refused)
                    s.execute(delete(ManifestError).where(ManifestError.source_path == _error_key(pod)))
                    return {uid}
                if row is None:
                    return set()
                self._drop(s, row)
                return {uid}
            return {uid} if self._upsert(s, pod, row) else set()

    def _drop(self, s: Session, row: DesiredPod) -> None:
        if row.terminated:
            s.execute(delete(DesiredPod).where(DesiredPod.uid == row.uid))
            s.execute(delete(ManifestError).where(ManifestError.source_path == row.source_path))
        else:
            row.api_deleted = True
            row.deleting = True

    # -- list + watch ------------------------------------------------------------------------

    async def _list(self) -> tuple[list[dict[str, Any]], str]:
        return await self.api.list(path("v1", "pods"), fieldSelector=self.field_selector)

    async def _notify(self, changed: set[str]) -> None:
        if changed and self.on_change is not None:
            await self.on_change(changed)

    async def _mirror_changed(self) -> None:
        if self.on_mirror is not None:
            await self.on_mirror()

    async def run(self) -> None:
        # httpx and the API raise many kinds of errors: any failure lists again after a back-off.
        await keep_running("API pod source (list and watch)", self._list_and_watch, log,
                           initial=RETRY_INITIAL, cap=RETRY_MAX)

    async def _list_and_watch(self) -> None:
        pods, version = await self._list()
        await self._notify(await self.store.run(self.apply_list, pods))  # on the store thread, as every write
        await self._mirror_changed()
        self.synced.set()
        await self._watch(version)

    async def _watch(self, version: str) -> str:
        """Watch until the stream ends or the version expires; return the last version seen."""
        while True:
            try:
                async for kind, raw in self.api.watch(path("v1", "pods"), version, WATCH_TIMEOUT,
                                                      fieldSelector=self.field_selector):
                    version = raw.get("metadata", {}).get("resourceVersion", version)
                    if kind == "BOOKMARK":
                        continue
                    if _is_mirror(raw):
                        await self._mirror_changed()
                        continue
                    await self._notify(await self.store.run(self.apply_event, kind, raw))
            except ApiError as exc:
                if exc.status == 410:
                    log.info("API pod watch: resourceVersion too old (410 Gone); listing again")
                    return version
                raise


def _is_mirror(pod: dict[str, Any]) -> bool:
    return MIRROR_ANNOTATION in (pod.get("metadata", {}).get("annotations") or {})


def _comparable(manifest: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (manifest.get("metadata") or {}).items() if k not in ("resourceVersion", "generation")}
    return {**manifest, "metadata": meta}


def _strip(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod without its status (the node writes that) and without server-side noise."""
    out = {k: v for k, v in pod.items() if k != "status"}
    out.setdefault("apiVersion", "v1")
    out.setdefault("kind", "Pod")
    meta = dict(out.get("metadata", {}))
    meta.pop("managedFields", None)
    out["metadata"] = meta
    return out
