"""A pod as the container runtime has it: its sandboxes and containers, newest first."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from cri_api.v1 import api_pb2 as cri

from shared.host.safe_paths import NotRegularFile, read_tail
from shared.runtime.cri import CRIError, RuntimeService
from shared.runtime.cri import labels as L

# The kubelet keeps at most this much of a termination message, and of a log fallback.
MAX_MESSAGE_BYTES = 4096
FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES = 80, 2048

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
    user: dict[str, dict[str, Any]] | None = None  # the container status' user (runtime_user)


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


def _utf8_tail(data: bytes, limit: int) -> str:
    """The last `limit` bytes as text, never starting inside a character (so the text, encoded
    again, still fits in `limit` bytes)."""
    data = data[-limit:] if limit else b""
    start = 0
    while start < min(3, len(data)) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:].decode(errors="replace")


def _why(exc: OSError) -> str:
    """Why a file was not read, in words that name no host path (the status is the pod's)."""
    if isinstance(exc, NotRegularFile):
        return f"it is {exc.kind}, not a regular file"
    return exc.strerror or type(exc).__name__


def _tail_log(path: str) -> str:
    """The last lines of a CRI log file, content only, for FallbackToLogsOnError: at most the
    kubelet's 80 lines and 2048 bytes. The log file is the runtime's, read as any file a pod
    fills: never followed, never waited on (shared/host/safe_paths.py)."""
    if not path:
        return ""
    try:
        raw = read_tail(path, 64 * 1024)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"Error on reading termination message from logs: {_why(exc)}"
    lines = raw.splitlines()[-FALLBACK_LOG_LINES:]
    content = b"\n".join(line.split(b" ", 3)[3] if line.count(b" ") >= 3 else b"" for line in lines)
    return _utf8_tail(content, FALLBACK_LOG_BYTES)


def _message_file(st: cri.ContainerStatus, path: str) -> str:
    """The host file behind the container's terminationMessagePath. A volume may be mounted at
    that path too (the API allows it); the runtime mounts in order, so the last mount at the path
    is the one the container sees and writes: the termination-log file pod-sync made, mounted
    last for this reason (runtime_config.py). An earlier one may be anything a pod planted."""
    return next((m.host_path for m in reversed(st.mounts) if m.container_path == path), "")


def termination_message(st: cri.ContainerStatus) -> str:
    """What the container wrote to its terminationMessagePath: as the kubelet, the last 4096
    bytes of the file; with FallbackToLogsOnError and a failed container, the log's tail when
    the file is empty. The file is read without following a link or waiting on a FIFO or device
    a container left there: such a file gives a note instead, and the node goes on."""
    path = st.annotations.get(L.TERMINATION_MESSAGE_PATH, "")
    host = _message_file(st, path) if path else ""
    message = ""
    if host:
        try:
            message = _utf8_tail(read_tail(host, MAX_MESSAGE_BYTES), MAX_MESSAGE_BYTES)
        except FileNotFoundError:
            pass
        except OSError as exc:
            return f"Error on reading termination log {path}: {_why(exc)}"
    if not message and st.exit_code != 0 and \
            st.annotations.get(L.TERMINATION_MESSAGE_POLICY) == "FallbackToLogsOnError":
        message = _tail_log(st.log_path)
    return message


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
        reason=st.reason,
        message=termination_message(st) if st.state == cri.CONTAINER_EXITED else st.message,
        image=st.image.image, image_ref=st.image_ref,
        log_path=st.log_path, annotations=dict(st.annotations), user=runtime_user(st))


def runtime_user(st: cri.ContainerStatus) -> dict[str, dict[str, Any]] | None:
    """The identity the runtime says the container's process has, as the kubelet 1.37 reports it
    (status.containerStatuses[].user.linux; containerd 2.0 and newer say, 1.6 does not)."""
    if not st.HasField("user") or not st.user.HasField("linux"):
        return None
    linux = st.user.linux
    return {"linux": {"uid": linux.uid, "gid": linux.gid, "supplementalGroups": list(linux.supplemental_groups)}}


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


async def list_managed_uids(runtime: RuntimeService) -> set[str]:
    """Every pod UID pykubelet has objects for in the runtime."""
    managed = {L.MANAGED_BY: "true"}
    sandboxes, containers = await asyncio.gather(runtime.list_pod_sandbox(managed),
                                                 runtime.list_containers(managed))
    uids = {s.labels.get(L.POD_UID, "") for s in sandboxes} | {c.labels.get(L.POD_UID, "") for c in containers}
    uids.discard("")
    return uids
