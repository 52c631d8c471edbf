"""status-reporter's read-only admin views."""

from typing import Any

from fastapi import APIRouter, HTTPException
from sqlalchemy import select

from shared.store import PodStatusRecord, Store


def router(store: Store) -> APIRouter:
    r = APIRouter()

    @r.get("/pods")
    def pods() -> list[dict[str, Any]]:
        with store.session() as s:
            return [{"uid": p.uid, "namespace": p.namespace, "name": p.name, "phase": p.phase,
                     "podIP": p.pod_ip, "summary": p.summary, "status": p.status}
                    for p in s.scalars(select(PodStatusRecord))]

    @r.get("/pods/{namespace}/{name}")
    def pod(namespace: str, name: str) -> dict[str, Any]:
        with store.session() as s:
            p = s.scalars(select(PodStatusRecord).where(PodStatusRecord.namespace == namespace,
                                                        PodStatusRecord.name == name)).first()
            if p is None:
                raise HTTPException(404, f"no pod {namespace}/{name} on this node")
            return {"uid": p.uid, "summary": p.summary, "status": p.status}

    return r
