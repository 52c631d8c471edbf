"""Registering this node, renewing its Lease and reporting its status to the API server."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from sqlalchemy import select

from services.status_reporter.node_object import PRESSURE, conditions, node_status_facts, pressure_event, runtime_facts
from shared.api.client import ApiError, KubeApi, path
from shared.host.facts import node_labels
from shared.host.node_resources import NO_RESERVATIONS, Reservations
from shared.store import NetworkStatus, NodeHealth, NodePressure, Store
from shared.store.node_shutdown import NOT_READY, shutting_down
from shared.store.runtime_status import STALE_AFTER, recorded_age
from shared.tasks import periodic
from shared.tasks.retry import until_done

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASES = "coordination.k8s.io/v1"


def micro_time() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Registration:
    """What the Node is created with: registerNode, registerWithTaints (as API objects),
    providerID. Taints and providerID are set when the Node is created, as the kubelet sets them."""
    register: bool = True
    taints: list[dict[str, str]] = field(default_factory=list)
    provider_id: str = ""
    labels: dict[str, str] = field(default_factory=dict)  # --node-labels


class NodeAgent:
    def __init__(self, api: KubeApi, store: Store, name: str, root_dir: str, max_pods: int,
                 lease_seconds: int, status_every: float, report_every: float,
                 node_event: Callable[[str, str, str], None], kubelet_port: int = 10250,
                 node_ip: str = "", reservations: Reservations = NO_RESERVATIONS,
                 registration: Registration | None = None, max_images: int = 50,
                 local_storage: bool = True) -> None:
        self.api = api
        self.store = store
        self.name = name
        self.root_dir = root_dir
        self.max_pods = max_pods
        self.lease_seconds = lease_seconds
        self.status_every = status_every
        self.report_every = report_every
        self.node_event = node_event
        self.kubelet_port = kubelet_port
        self.node_ip = node_ip
        self.reservations = reservations
        self.registration = registration or Registration()
        self.max_images = max_images  # nodeStatusMaxImages
        self.local_storage = local_storage  # localStorageCapacityIsolation: ephemeral-storage reported
        self.node_uid = ""
        self._last_reported: dict[str, Any] | None = None
        self._last_report_at = 0.0
        self._conditions: list[dict[str, Any]] | None = None
        self.registered = asyncio.Event()

    # -- readiness ------------------------------------------------------------------------------

    def health(self) -> tuple[bool, str, NodeHealth | None]:
        """(ready, why not, pod-sync's row of what the runtime reports) from what pod-sync and
        network store."""
        with self.store.session() as s:
            h = s.get(NodeHealth, 1)
            net = s.get(NetworkStatus, 1)
            going_down = shutting_down(s)
            if h is not None:
                s.expunge(h)
        if h is None or recorded_age(h.updated_at) > STALE_AFTER:
            return False, "pod-sync is not reporting the container runtime's health", h
        problems = []
        if not h.runtime_ready:
            problems.append(h.runtime_message or "container runtime is not ready")
        if net is None or not net.ready:
            problems.append(f"container runtime network not ready: NetworkReady=false reason:"
                            f"{net.reason if net else 'NetworkPluginNotReady'} message:"
                            f"{net.message if net else 'network service not reporting'}")
        if not h.pleg_healthy:
            problems.append(h.pleg_message or "PLEG is not healthy")
        if going_down:
            problems.append(NOT_READY)
        return not problems, "; ".join(problems), h

    def pressure(self) -> dict[str, bool]:
        with self.store.session() as s:
            return {p.condition: p.pressure for p in s.scalars(select(NodePressure))}

    def _status(self) -> dict[str, Any]:
        ready, why, runtime = self.health()
        self._conditions = conditions(ready, why, self._conditions, self.pressure())
        return {**node_status_facts(self.name, self.root_dir, self.max_pods, runtime.runtime_version if runtime else "",
                                   self.kubelet_port, self.node_ip, self.reservations, self.local_storage),
                **runtime_facts(runtime, self.max_images), "conditions": self._conditions}

    # -- registration ---------------------------------------------------------------------------

    async def register(self) -> None:
        if not self.registration.register:
            # registerNode false: someone else creates the Node; this node reports its status.
            try:
                node = await self.api.get(path("v1", "nodes", self.name))
            except ApiError as exc:
                if exc.status == 404:
                    raise ApiError(404, "NotFound", f"Node {self.name} does not exist and registerNode is false: "
                                                    "create it, or set registerNode to true") from None
                raise
            log.info("node %s exists (registerNode false: not registered by this node)", self.name)
            await self._registered(node)
            return
        spec: dict[str, Any] = {}
        if self.registration.taints:
            spec["taints"] = self.registration.taints
        if self.registration.provider_id:
            spec["providerID"] = self.registration.provider_id
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": node_labels(self.name, self.registration.labels)}, "spec": spec}
        try:
            node = await self.api.create(path("v1", "nodes"), body)
            log.info("registered node %s", self.name)
        except ApiError as exc:
            if exc.status != 409:
                raise
            # Re-registration: reconcile our labels onto the existing Node.
            node = await self.api.patch(path("v1", "nodes", self.name), {"metadata": {"labels": node_labels(self.name, self.registration.labels)}})
            log.info("node %s already registered; reconciled", self.name)
        await self._registered(node)

    async def _registered(self, node: dict[str, Any]) -> None:
        self.node_uid = node["metadata"]["uid"]
        self.node_event("Normal", "Starting", "Starting kubelet.")
        await self.report_status(force=True)
        self.registered.set()

    async def report_status(self, force: bool = False) -> None:
        status = self._status()
        comparable = {**status, "conditions": [{k: v for k, v in c.items() if k != "lastHeartbeatTime"}
                                               for c in status["conditions"]]}
        due = time.monotonic() - self._last_report_at >= self.report_every
        if not force and not due and comparable == self._last_reported:
            return
        await self.api.patch(path("v1", "nodes", self.name, subresource="status"), {"status": status})
        before = {c["type"]: c["status"] for c in (self._last_reported or {}).get("conditions", [])}
        for c in status["conditions"]:
            if c["type"] in PRESSURE and before.get(c["type"], "False") != c["status"]:
                event = pressure_event(c["type"], c["status"] == "True")
                self.node_event("Normal", event, f"Node {self.name} status is now: {event}")
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        was = before.get("Ready")
        if ready["status"] != was:
            log.info("node status: Ready=%s %s", ready["status"], ready.get("message", ""))
            if ready["status"] == "True":
                self.node_event("Normal", "NodeReady", f"Node {self.name} status is now: NodeReady")
            else:
                self.node_event("Normal", "NodeNotReady", f"Node {self.name} status is now: NodeNotReady")
        self._last_reported = comparable
        self._last_report_at = time.monotonic()

    # -- lease ----------------------------------------------------------------------------------

    def _lease(self) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": LEASE_NAMESPACE,
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name,
                                                  "uid": self.node_uid}]},
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": self.lease_seconds,
                         "renewTime": micro_time()}}

    async def renew_lease(self) -> None:
        try:
            await self.api.patch(path(LEASES, "leases", self.name, LEASE_NAMESPACE),
                                 {"spec": {"renewTime": micro_time(), "holderIdentity": self.name,
                                           "leaseDurationSeconds": self.lease_seconds}})
        except ApiError as exc:
            if exc.status != 404:
                raise
            await self.api.create(path(LEASES, "leases", namespace=LEASE_NAMESPACE), self._lease())

    # -- loops ----------------------------------------------------------------------------------

    async def run(self) -> None:
        await until_done(f"registering node {self.name}", self.register, log, initial=1.0, cap=30.0)
        # The kubelet renews every quarter of the lease duration (10s for 40s).
        await asyncio.gather(
            periodic.every(self.lease_seconds / 4, "lease renewal", self.renew_lease, log),
            periodic.every(self.status_every, "node status update", self.report_status, log))
