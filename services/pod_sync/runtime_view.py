"""A pod as the container runtime has it: its sandboxes and containers, newest first."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from cri_api.v1 import api_pb2 as cri

from shared.cri import labels as L
from shared.cri import CRIError, RuntimeService

_STATES = {cri.CONTAINER_CREATED: "created", cri.CONTAINER_RUNNING: "running",
           cri.CONTAINER_EXITED: "exited", cri.CONTAINER_UNKNOWN: "unknown"}


@dataclass
class SandboxInfo:
    id: str
    attempt: int
    ready: bool
    created_at: float
    ip: str = ""


@dataclass
class ContainerInfo:
    id: str
    sandbox_id: str
    name: str
    attempt: int
    state: str
    created_at: float
    started_at: float = 0.0
    finished_at: float = 0.0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    image: str = ""
    image_ref: str = ""
    log_path: str = ""
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class RuntimePod:
    uid: str
    sandboxes: list[SandboxInfo] = field(default_factory=list)   # newest first
    containers: list[ContainerInfo] = field(default_factory=list)  # newest first

    @property
    def current_sandbox(self) -> SandboxInfo | None:
        return self.sandboxes[0] if self.sandboxes else None

    def history(self, name: str) -> list[ContainerInfo]:
        """This container's instances across all sandboxes, newest attempt first."""
        return [c for c in self.containers if c.name == name]

    def latest(self, name: str) -> ContainerInfo | None:
        h = self.history(name)
        return h[0] if h else None

    @property
    def running_containers(self) -> list[ContainerInfo]:
        return [c for c in self.containers if c.state == "running"]

    @property
    def empty(self) -> bool:
        return not self.sandboxes and not self.containers


def _sec(ns: int) -> float:
    return ns / 1e9 if ns else 0.0


async def _container_info(runtime: RuntimeService, c: cri.Container) -> ContainerInfo | None:
    try:
        st = await runtime.container_status(c.id)
    except CRIError as exc:
        if exc.not_found:  # removed between list and status
            return None
        raise
    return ContainerInfo(
        id=c.id, sandbox_id=c.pod_sandbox_id, name=c.metadata.name, attempt=c.metadata.attempt,
        state=_STATES.get(st.state, "unknown"), created_at=_sec(st.created_at),
        started_at=_sec(st.started_at), finished_at=_sec(st.finished_at), exit_code=st.exit_code,
        reason=st.reason, message=st.message, image=st.image.image, image_ref=st.image_ref,
        log_path=st.log_path, annotations=dict(st.annotations))


async def get_runtime_pod(runtime: RuntimeService, uid: str) -> RuntimePod:
    """Everything the runtime holds for one pod UID."""
    selector = {L.POD_UID: uid}
    sandboxes, containers = await asyncio.gather(
        runtime.list_pod_sandbox(selector), runtime.list_containers(selector))
    pod = RuntimePod(uid=uid)
    for sb in sandboxes:
        info = SandboxInfo(id=sb.id, attempt=sb.metadata.attempt, ready=sb.state == cri.SANDBOX_READY,
                           created_at=_sec(sb.created_at))
        if info.ready:
            try:
                info.ip = (await runtime.pod_sandbox_status(sb.id)).network.ip
            except CRIError as exc:
                if not exc.not_found:
                    raise
        pod.sandboxes.append(info)
    pod.sandboxes.sort(key=lambda s: (s.attempt, s.created_at), reverse=True)
    infos = await asyncio.gather(*(_container_info(runtime, c) for c in containers))
    pod.containers = sorted((i for i in infos if i), key=lambda c: (c.attempt, c.created_at), reverse=True)
    return pod


async def list_managed_uids(runtime: RuntimeService) -> dict[str, tuple]:
    """Every pod UID pykubelet has in the runtime, with a fingerprint of its objects' states.

    The fingerprint changes whenever a sandbox or container of the pod appears, disappears or
    changes state: that is what the PLEG compares between relists.
    """
    sandboxes, containers = await asyncio.gather(
        runtime.list_pod_sandbox({L.MANAGED_BY: "true"}), runtime.list_containers({L.MANAGED_BY: "true"}))
    out: dict[str, list] = {}
    for sb in sandboxes:
        out.setdefault(sb.labels.get(L.POD_UID, ""), []).append(("s", sb.id, sb.state))
    for c in containers:
        out.setdefault(c.labels.get(L.POD_UID, ""), []).append(("c", c.id, c.state))
    out.pop("", None)
    return {uid: tuple(sorted(items)) for uid, items in out.items()}
