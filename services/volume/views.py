"""The volume service's read-only admin views."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from sqlalchemy import select

from services.volume.manager import VolumeManager
from services.volume.registry import PluginRegistry
from shared.model.volume_plugins import EMPTY_DIR
from shared.store import PodVolume, Store


def router(store: Store, manager: VolumeManager, registry: PluginRegistry) -> APIRouter:
    views = APIRouter()

    @views.get("/volumes")
    def volumes() -> list[dict[str, Any]]:
        """One entry per pod volume: where it is on the node and whether containers may use it."""
        with store.session() as s:
            rows = list(s.scalars(select(PodVolume).order_by(PodVolume.pod_uid, PodVolume.name)))
        return [{"podUID": r.pod_uid, "name": r.name, "plugin": r.plugin, "hostPath": r.host_path,
                 "ready": r.ready, "reason": r.reason, "message": r.message,
                 **({"sizeLimitBytes": r.size_limit_bytes, "usedBytes": r.used_bytes}
                    if r.plugin == EMPTY_DIR else {})}
                for r in rows]

    @views.get("/volumes/cleanup")
    def cleanup() -> dict[str, str]:
        """Removed pods whose volumes could not be torn down yet, and why."""
        return dict(manager.cleanup_errors)

    @views.get("/plugins")
    def plugins() -> list[dict[str, Any]]:
        """Sockets found in the plugins registry directory and the CSI drivers they registered."""
        return registry.describe()

    return views
