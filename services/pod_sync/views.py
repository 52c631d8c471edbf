"""pod-sync's read-only admin views."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from sqlalchemy import select

from shared.store import DesiredPod, ManifestError, PodRuntime, Store


def router(store: Store) -> APIRouter:
    r = APIRouter()

    @r.get("/pods")
    def pods() -> list[dict[str, Any]]:
        with store.session() as s:
            runtime = {p.uid: p for p in s.scalars(select(PodRuntime))}
            out = []
            for d in s.scalars(select(DesiredPod)):
                rt = runtime.get(d.uid)
                out.append({
                    "uid": d.uid, "namespace": d.namespace, "name": d.name, "source": d.source,
                    "source_path": d.source_path, "deleting": d.deleting,
                    "sandbox_id": rt.sandbox_id if rt else "", "pod_ip": rt.pod_ip if rt else "",
                    "containers": rt.containers if rt else [],
                    "sync_error": {"reason": rt.sync_error_reason, "message": rt.sync_error_message}
                    if rt and rt.sync_error_reason else None,
                })
            return out

    @r.get("/manifest-errors")
    def manifest_errors() -> dict[str, str]:
        with store.session() as s:
            return {e.source_path: e.error for e in s.scalars(select(ManifestError))}

    return r
