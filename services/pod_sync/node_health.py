"""Publishing what node readiness is made of (runtime status, PLEG health) to the store, where
status-reporter reads it for the Node's Ready condition and the network service reads the
runtime's NetworkReady condition; and the runtime's images, for the Node's status.images."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Callable

from cri_api.v1 import api_pb2 as cri

from shared.bus.client import Bus
from shared.bus.messages import RuntimeStatusChanged
from shared.runtime.cri import CRIError, Runtime
from shared.store import NodeHealth, Store
from shared.store.models import utcnow
from shared.tasks import periodic

log = logging.getLogger(__name__)

PERIOD = 5.0  # how often the runtime is asked (the kubelet's runtime state check)
# The row is rewritten when what it says changes, else only this often: readers take it as stale
# after 30 s (shared.store.runtime_status.STALE_AFTER), and a commit every 5 s said the same thing.
REFRESH = 10.0


def _condition(conds: dict[str, cri.RuntimeCondition], name: str) -> tuple[bool, str]:
    c = conds.get(name)
    if c is None:
        return False, f"runtime reports no {name} condition"
    return bool(c.status), f"{c.reason}: {c.message}".strip(": ")


def runtime_handlers(status: cri.StatusResponse) -> str:
    """The Node's status.runtimeHandlers as the kubelet reports them: every handler the runtime
    names, each feature false unless the runtime says it supports it."""
    return json.dumps([{"name": h.name, "features": {
        "recursiveReadOnlyMounts": h.features.recursive_read_only_mounts,
        "userNamespaces": h.features.user_namespaces}} for h in status.runtime_handlers])


def runtime_features(status: cri.StatusResponse) -> str:
    """The Node's status.features, only when the runtime reports features at all (containerd
    before 2.0 does not, and the kubelet then leaves the field out)."""
    if not status.HasField("features"):
        return ""
    return json.dumps({"supplementalGroupsPolicy": status.features.supplemental_groups_policy})


# The kubelet's MaxNamesPerImageInNodeStatus: names of one image in the Node's status.images.
MAX_NAMES_PER_IMAGE = 5


def node_images(images: list[cri.Image]) -> str:
    """The Node's status.images as the kubelet lists them: every image, largest first, each with
    its digests then its tags (at most 5 names)."""
    ordered = sorted(images, key=lambda img: (-img.size, img.id))
    return json.dumps([{"names": [*img.repo_digests, *img.repo_tags][:MAX_NAMES_PER_IMAGE], "sizeBytes": img.size}
                       for img in ordered])


class NodeHealthWriter:
    def __init__(self, runtime: Runtime, store: Store, pleg_healthy: Callable[[], tuple[bool, str]],
                 bus: Bus | None = None) -> None:
        self.runtime = runtime
        self.store = store
        self.pleg_healthy = pleg_healthy
        self.bus = bus
        self.runtime_state: tuple[bool, str] = (False, "not checked yet")
        self._runtime_version = ""  # asked again only after the runtime failed a call (it may have changed)
        self._written: tuple[object, ...] | None = None
        self._written_at = 0.0
        self._poked = asyncio.Event()
        self._images = "[]"  # the last list the runtime gave, kept while it does not answer

    async def write_once(self) -> None:
        try:
            if not self._runtime_version:
                version = await self.runtime.version()
                self._runtime_version = f"{version.runtime_name}://{version.runtime_version}"
            status = await self.runtime.status()
            conds = {c.type: c for c in status.status.conditions}
            ready, why = _condition(conds, "RuntimeReady")
            message = "" if ready else f"container runtime status check may not have completed yet: {why}"
            network_ready, network_why = _condition(conds, "NetworkReady")
            network_message = "" if network_ready else network_why
            handlers, features = runtime_handlers(status), runtime_features(status)
            self._images = images = node_images(await self.runtime.list_images())
        except CRIError as exc:
            ready, message, self._runtime_version = False, f"container runtime is down: {exc}", ""
            network_ready, network_message = False, message
            handlers, features = "[]", ""
            images = self._images
        self.runtime_state = (ready, "ok" if ready else message)
        pleg_ok, pleg_message = self.pleg_healthy()
        if pleg_ok:
            pleg_message = ""
        health = (ready, message, self._runtime_version, handlers, features, network_ready, network_message,
                  pleg_ok, pleg_message, images)
        if health == self._written and time.monotonic() - self._written_at < REFRESH:
            return
        # In a thread: the write may wait out another service's lock on the store.
        await self.store.run(self.store.upsert, NodeHealth, {"id": 1}, {
            "runtime_ready": ready, "runtime_message": message, "runtime_version": self._runtime_version,
            "runtime_handlers": handlers, "runtime_features": features, "images": images,
            "network_ready": network_ready, "network_message": network_message,
            "pleg_healthy": pleg_ok, "pleg_message": pleg_message, "updated_at": utcnow()})
        changed = health != self._written
        self._written, self._written_at = health, time.monotonic()
        if changed and self.bus is not None:
            await self.bus.publish(RuntimeStatusChanged())

    def runtime_ready(self) -> tuple[bool, str]:
        """The admin app's readiness check: the same observation the node reports."""
        return self.runtime_state

    def images_changed(self) -> None:
        """An image was pulled or removed: record the list now, not at the next period, so the
        Node lists it at its next status update."""
        self._poked.set()

    async def run(self) -> None:
        # A store that cannot be written (a full disk) is logged and retried; the runtime's own
        # trouble is what write_once records.
        await periodic.every(PERIOD, "recording the node's runtime health", self.write_once, log, wake=self._poked)
