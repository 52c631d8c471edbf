"""A recording in-memory CRI runtime for unit tests, kept beside the real client.

It holds sandboxes and containers like a runtime would, records every call as
(operation, argument) and lets a test make containers exit or image pulls fail.
"""

from __future__ import annotations

import itertools
import time

import grpc
from cri_api.v1 import api_pb2 as cri

from shared.model.json_types import JSONObject
from shared.runtime.cri.client import CRIError


def _now_ns() -> int:
    return time.time_ns()


def _matches(labels: dict[str, str], selector: dict[str, str] | None) -> bool:
    return all(labels.get(k) == v for k, v in (selector or {}).items())


class FakeRuntime:
    """Implements RuntimeService and ImageService."""

    def __init__(self, images: list[str] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.sandboxes: dict[str, cri.PodSandboxStatus] = {}
        self.sandbox_configs: dict[str, cri.PodSandboxConfig] = {}
        self.containers: dict[str, cri.ContainerStatus] = {}
        self.container_sandbox: dict[str, str] = {}
        self.created_configs: dict[str, cri.ContainerConfig] = {}
        self.images: dict[str, str] = {ref: f"sha256:{i:064x}" for i, ref in enumerate(images or [])}
        self.pull_errors: dict[str, str] = {}
        self.registry_logins: dict[str, tuple[str, str]] = {}  # image -> the login its registry wants
        self.pull_auths: list[tuple[str, tuple[str, str] | None]] = []  # each pull's image and login
        self.network_ready = True
        self.runtime_name, self.runtime_version = "fake", "1.0"  # what Version says
        self.runtime_cgroup_driver: str | None = "cgroupfs"  # what cgroup_driver() says
        # What Status reports of handlers ((name, recursive read-only mounts, user namespaces)) and
        # features (None: no features message, as containerd 1.x).
        self.handlers: list[tuple[str, bool, bool]] = []
        self.supplemental_groups_policy: bool | None = None
        # cmd tuple -> (exit code, stdout) for exec_sync; unknown commands succeed silently
        self.exec_results: dict[tuple[str, ...], tuple[int, bytes]] = {}
        # container id -> ContainerStats a test wants list_container_stats to report
        self.container_stats: dict[str, cri.ContainerStats] = {}
        self.sandbox_stats: dict[str, cri.PodSandboxStats] = {}
        self.image_fs = cri.ImageFsInfoResponse()
        # container id -> the resources UpdateContainerResources last set; ids whose update fails
        self.updated_resources: dict[str, cri.LinuxContainerResources] = {}
        self.update_errors: dict[str, str] = {}
        self.stop_timeouts: dict[str, int] = {}  # container id -> the timeout StopContainer got
        self.image_sizes: dict[str, int] = {}
        self.image_users: dict[str, tuple[int | None, str]] = {}  # image ref -> (uid, username) of its config  # image ref -> size list_images reports
        self.sandbox_image = "registry.k8s.io/pause:3.9"
        self.cni_conf_dir = ""  # where the runtime says it reads CNI configs ("" : it does not say)
        self.streaming_url = "http://127.0.0.1:1"
        self._ids = itertools.count(1)
        self._ips = itertools.count(2)

    # helpers for tests

    def ops(self, *names: str) -> list[tuple[str, str]]:
        return [c for c in self.calls if not names or c[0] in names]

    def exit_container(self, container_id: str, exit_code: int) -> None:
        st = self.containers[container_id]
        st.state = cri.CONTAINER_EXITED
        st.exit_code = exit_code
        st.finished_at = _now_ns()
        st.reason = "Completed" if exit_code == 0 else "Error"

    def running(self) -> list[cri.ContainerStatus]:
        return [c for c in self.containers.values() if c.state == cri.CONTAINER_RUNNING]

    def _record(self, op: str, arg: str = "") -> None:
        self.calls.append((op, arg))

    def _sandbox(self, op: str, sandbox_id: str) -> cri.PodSandboxStatus:
        if sandbox_id not in self.sandboxes:
            raise CRIError(op, grpc.StatusCode.NOT_FOUND, f"sandbox {sandbox_id} not found")
        return self.sandboxes[sandbox_id]

    def _container(self, op: str, container_id: str) -> cri.ContainerStatus:
        if container_id not in self.containers:
            raise CRIError(op, grpc.StatusCode.NOT_FOUND, f"container {container_id} not found")
        return self.containers[container_id]

    # RuntimeService

    async def version(self) -> cri.VersionResponse:
        self._record("version")
        return cri.VersionResponse(version="0.1.0", runtime_name=self.runtime_name,
                                   runtime_version=self.runtime_version,
                                   runtime_api_version="v1")

    async def status(self) -> cri.StatusResponse:
        self._record("status")
        conds = [cri.RuntimeCondition(type="RuntimeReady", status=True),
                 cri.RuntimeCondition(type="NetworkReady", status=self.network_ready,
                                      reason="" if self.network_ready else "NetworkPluginNotReady")]
        handlers = [cri.RuntimeHandler(name=name, features=cri.RuntimeHandlerFeatures(
            recursive_read_only_mounts=rro, user_namespaces=userns)) for name, rro, userns in self.handlers]
        features = (None if self.supplemental_groups_policy is None
                    else cri.RuntimeFeatures(supplemental_groups_policy=self.supplemental_groups_policy))
        return cri.StatusResponse(status=cri.RuntimeStatus(conditions=conds), runtime_handlers=handlers,
                                  features=features)

    async def runtime_config(self) -> JSONObject:
        self._record("status")
        return {"sandboxImage": self.sandbox_image, **({"cni": {"confDir": self.cni_conf_dir}} if self.cni_conf_dir else {})}

    async def cgroup_driver(self) -> str | None:
        return self.runtime_cgroup_driver

    async def run_pod_sandbox(self, config: cri.PodSandboxConfig) -> str:
        sid = f"sb{next(self._ids)}"
        self._record("run_podsandbox", config.metadata.name)
        ip = "" if config.linux.security_context.namespace_options.network == cri.NODE else f"10.88.0.{next(self._ips)}"
        self.sandboxes[sid] = cri.PodSandboxStatus(
            id=sid, metadata=config.metadata, state=cri.SANDBOX_READY, created_at=_now_ns(),
            network=cri.PodSandboxNetworkStatus(ip=ip), labels=config.labels,
            annotations=config.annotations)
        self.sandbox_configs[sid] = config
        return sid

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        self._record("stop_podsandbox", sandbox_id)
        if sandbox_id not in self.sandboxes:
            return  # CRI: stopping a missing sandbox is not an error
        self.sandboxes[sandbox_id].state = cri.SANDBOX_NOTREADY
        for cid, sid in self.container_sandbox.items():
            if sid == sandbox_id and self.containers[cid].state == cri.CONTAINER_RUNNING:
                self.exit_container(cid, 137)

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        self._record("remove_podsandbox", sandbox_id)
        self.sandboxes.pop(sandbox_id, None)
        for cid in [c for c, s in self.container_sandbox.items() if s == sandbox_id]:
            self.containers.pop(cid, None)
            self.container_sandbox.pop(cid, None)

    async def pod_sandbox_status(self, sandbox_id: str) -> cri.PodSandboxStatus:
        self._record("podsandbox_status", sandbox_id)
        return self._sandbox("podsandbox_status", sandbox_id)

    async def list_pod_sandbox(self, labels: dict[str, str] | None = None) -> list[cri.PodSandbox]:
        self._record("list_podsandbox")
        return [cri.PodSandbox(id=s.id, metadata=s.metadata, state=s.state, created_at=s.created_at,
                               labels=s.labels, annotations=s.annotations)
                for s in self.sandboxes.values() if _matches(dict(s.labels), labels)]

    async def create_container(self, sandbox_id: str, config: cri.ContainerConfig,
                               sandbox_config: cri.PodSandboxConfig) -> str:
        self._record("create_container", config.metadata.name)
        self._sandbox("create_container", sandbox_id)
        if config.image.image not in self.images.values() and config.image.image not in self.images:
            raise CRIError("create_container", grpc.StatusCode.NOT_FOUND,
                           f"image {config.image.image} not found")
        for mount in config.mounts:  # an image volume: the runtime mounts an image it has
            if mount.image.image and mount.image.image not in self.images.values():
                raise CRIError("create_container", grpc.StatusCode.UNKNOWN,
                               f"ImageVolumeMountFailed: image {mount.image.image} not found")
        cid = f"c{next(self._ids)}"
        self.containers[cid] = cri.ContainerStatus(
            id=cid, metadata=config.metadata, state=cri.CONTAINER_CREATED, created_at=_now_ns(),
            image=config.image, image_ref=config.image.image, labels=config.labels,
            annotations=config.annotations, log_path=config.log_path)
        if self.supplemental_groups_policy is not None:  # as containerd 2: whom the process runs as
            sc = config.linux.security_context
            self.containers[cid].user.linux.CopyFrom(cri.LinuxContainerUser(
                uid=sc.run_as_user.value, gid=sc.run_as_group.value, supplemental_groups=sc.supplemental_groups))
        self.container_sandbox[cid] = sandbox_id
        self.created_configs[cid] = config
        return cid

    async def start_container(self, container_id: str) -> None:
        self._record("start_container", container_id)
        st = self._container("start_container", container_id)
        st.state = cri.CONTAINER_RUNNING
        st.started_at = _now_ns()

    async def stop_container(self, container_id: str, timeout: int) -> None:
        self._record("stop_container", container_id)
        self.stop_timeouts[container_id] = timeout
        st = self._container("stop_container", container_id)
        if st.state == cri.CONTAINER_RUNNING:
            self.exit_container(container_id, 137)

    async def remove_container(self, container_id: str) -> None:
        self._record("remove_container", container_id)
        self.containers.pop(container_id, None)
        self.container_sandbox.pop(container_id, None)

    async def list_containers(self, labels: dict[str, str] | None = None,
                              sandbox_id: str | None = None) -> list[cri.Container]:
        self._record("list_containers")
        out = []
        for cid, st in self.containers.items():
            if sandbox_id and self.container_sandbox[cid] != sandbox_id:
                continue
            if not _matches(dict(st.labels), labels):
                continue
            out.append(cri.Container(id=cid, pod_sandbox_id=self.container_sandbox[cid],
                                     metadata=st.metadata, image=st.image, image_ref=st.image_ref,
                                     state=st.state, created_at=st.created_at, labels=st.labels,
                                     annotations=st.annotations))
        return out

    async def container_status(self, container_id: str) -> cri.ContainerStatus:
        self._record("container_status", container_id)
        return self._container("container_status", container_id)

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> cri.ExecSyncResponse:
        self._record("exec_sync", " ".join(cmd))
        st = self._container("exec_sync", container_id)
        if st.state != cri.CONTAINER_RUNNING:
            raise CRIError("exec_sync", grpc.StatusCode.UNKNOWN, "container is not running")
        code, out = self.exec_results.get(tuple(cmd), (0, b""))
        return cri.ExecSyncResponse(exit_code=code, stdout=out)

    async def reopen_container_log(self, container_id: str) -> None:
        self._record("reopen_container_log", container_id)
        self._container("reopen_container_log", container_id)

    async def update_container_resources(self, container_id: str, linux: cri.LinuxContainerResources) -> None:
        self._record("update_container_resources", container_id)
        st = self._container("update_container_resources", container_id)
        if container_id in self.update_errors:
            raise CRIError("update_container_resources", grpc.StatusCode.UNKNOWN, self.update_errors[container_id])
        if st.state != cri.CONTAINER_RUNNING:
            raise CRIError("update_container_resources", grpc.StatusCode.FAILED_PRECONDITION,
                           f"container {container_id} is not running")
        self.updated_resources[container_id] = linux

    async def list_container_stats(self, sandbox_id: str | None = None) -> list[cri.ContainerStats]:
        self._record("list_container_stats", sandbox_id or "")
        return [st for cid, st in self.container_stats.items()
                if not sandbox_id or self.container_sandbox.get(cid) == sandbox_id]

    async def list_pod_sandbox_stats(self) -> list[cri.PodSandboxStats]:
        self._record("list_podsandbox_stats")
        return list(self.sandbox_stats.values())

    async def exec(self, request: cri.ExecRequest) -> str:
        self._record("exec", " ".join(request.cmd))
        st = self._container("exec", request.container_id)
        if st.state != cri.CONTAINER_RUNNING:
            raise CRIError("exec", grpc.StatusCode.UNKNOWN, "container is not running")
        return f"{self.streaming_url}/exec/{request.container_id}"

    async def attach(self, request: cri.AttachRequest) -> str:
        self._record("attach", request.container_id)
        self._container("attach", request.container_id)
        return f"{self.streaming_url}/attach/{request.container_id}"

    async def port_forward(self, sandbox_id: str, ports: list[int]) -> str:
        self._record("port_forward", sandbox_id)
        self._sandbox("port_forward", sandbox_id)
        return f"{self.streaming_url}/portforward/{sandbox_id}"

    # ImageService

    async def image_status(self, image: str) -> cri.Image | None:
        self._record("image_status", image)
        ref = self.images.get(image) or (image if image in self.images.values() else None)
        if not ref:
            return None
        img = cri.Image(id=ref, repo_tags=[image])
        uid, username = self.image_users.get(ref, (None, ""))
        if uid is not None:
            img.uid.value = uid
        img.username = username
        return img

    async def pull_image(self, image: str, sandbox_config: cri.PodSandboxConfig | None = None,
                         auth: cri.AuthConfig | None = None) -> str:
        self._record("pull_image", image)
        self.pull_auths.append((image, (auth.username, auth.password) if auth is not None else None))
        if image in self.pull_errors:
            raise CRIError("pull_image", grpc.StatusCode.UNKNOWN, self.pull_errors[image])
        wanted = self.registry_logins.get(image)
        if wanted is not None and (auth is None or (auth.username, auth.password) != wanted):
            raise CRIError("pull_image", grpc.StatusCode.UNKNOWN,
                           f"failed to resolve reference {image!r}: unexpected status: 401 Unauthorized")
        return self.images.setdefault(image, f"sha256:{len(self.images) + 1000:064x}")

    async def list_images(self) -> list[cri.Image]:
        self._record("list_images")
        return [cri.Image(id=ref, repo_tags=[tag], size=self.image_sizes.get(ref, 0))
                for tag, ref in self.images.items()]

    async def image_fs_info(self) -> cri.ImageFsInfoResponse:
        self._record("image_fs_info")
        return self.image_fs

    async def remove_image(self, image: str) -> None:
        self._record("remove_image", image)
        for tag, ref in list(self.images.items()):
            if image in (tag, ref):
                del self.images[tag]
