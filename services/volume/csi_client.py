"""A CSI node plugin as pykubelet calls it: Identity and Node services over a unix socket."""

from __future__ import annotations

from typing import Any

import grpc

from shared.csi import csi, csi_grpc

CALL_TIMEOUT = 30.0  # NodeStage/NodePublish may do real I/O; the kubelet allows 2 minutes overall


class CSIError(Exception):
    def __init__(self, method: str, driver: str, exc: grpc.aio.AioRpcError) -> None:
        self.code = exc.code()
        self.details = exc.details() or ""
        super().__init__(f"rpc error: code = {self.code.name} desc = {self.details} ({driver} {method})")


class CSINodeClient:
    def __init__(self, driver: str, endpoint: str) -> None:
        self.driver = driver
        self.endpoint = endpoint
        target = endpoint if endpoint.startswith("unix:") else f"unix://{endpoint}"
        self._channel = grpc.aio.insecure_channel(target)
        self._identity = csi_grpc.IdentityStub(self._channel)
        self._node = csi_grpc.NodeStub(self._channel)
        self.capabilities: set[int] = set()
        self.node_id = ""

    async def _call(self, method: str, stub: Any, request: Any, timeout: float = CALL_TIMEOUT) -> Any:
        try:
            return await getattr(stub, method)(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise CSIError(method, self.driver, exc) from None

    async def probe(self, timeout: float = 10.0) -> None:
        """Learn the plugin's node id and node capabilities (done at registration)."""
        info = await self._call("NodeGetInfo", self._node, csi.NodeGetInfoRequest(), timeout)
        caps = await self._call("NodeGetCapabilities", self._node, csi.NodeGetCapabilitiesRequest(), timeout)
        self.node_id = info.node_id
        self.capabilities = {c.rpc.type for c in caps.capabilities if c.HasField("rpc")}

    @property
    def stages(self) -> bool:
        return csi.NodeServiceCapability.RPC.STAGE_UNSTAGE_VOLUME in self.capabilities

    @property
    def has_volume_stats(self) -> bool:
        return csi.NodeServiceCapability.RPC.GET_VOLUME_STATS in self.capabilities

    async def stage(self, volume_id: str, staging_path: str, capability: csi.VolumeCapability,
                    volume_context: dict[str, str], publish_context: dict[str, str],
                    secrets: dict[str, str]) -> None:
        await self._call("NodeStageVolume", self._node, csi.NodeStageVolumeRequest(
            volume_id=volume_id, staging_target_path=staging_path, volume_capability=capability,
            volume_context=volume_context, publish_context=publish_context, secrets=secrets))

    async def unstage(self, volume_id: str, staging_path: str) -> None:
        await self._call("NodeUnstageVolume", self._node, csi.NodeUnstageVolumeRequest(
            volume_id=volume_id, staging_target_path=staging_path))

    async def publish(self, volume_id: str, staging_path: str, target_path: str, capability: csi.VolumeCapability,
                      readonly: bool, volume_context: dict[str, str], publish_context: dict[str, str],
                      secrets: dict[str, str]) -> None:
        await self._call("NodePublishVolume", self._node, csi.NodePublishVolumeRequest(
            volume_id=volume_id, staging_target_path=staging_path, target_path=target_path,
            volume_capability=capability, readonly=readonly, volume_context=volume_context,
            publish_context=publish_context, secrets=secrets))

    async def unpublish(self, volume_id: str, target_path: str) -> None:
        await self._call("NodeUnpublishVolume", self._node, csi.NodeUnpublishVolumeRequest(
            volume_id=volume_id, target_path=target_path))

    async def volume_stats(self, volume_id: str, volume_path: str, staging_path: str = "") -> dict[str, int]:
        resp = await self._call("NodeGetVolumeStats", self._node, csi.NodeGetVolumeStatsRequest(
            volume_id=volume_id, volume_path=volume_path, staging_target_path=staging_path), 10.0)
        out: dict[str, int] = {}
        for u in resp.usage:
            prefix = "bytes" if u.unit == csi.VolumeUsage.BYTES else "inodes" if u.unit == csi.VolumeUsage.INODES else ""
            if prefix:
                out.update({f"{prefix}_total": u.total, f"{prefix}_available": u.available, f"{prefix}_used": u.used})
        return out

    async def close(self) -> None:
        await self._channel.close()


def mount_capability(fs_type: str, mount_flags: list[str], access_mode: int) -> csi.VolumeCapability:
    return csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type=fs_type, mount_flags=mount_flags),
                                access_mode=csi.VolumeCapability.AccessMode(mode=access_mode))


# PersistentVolume accessModes -> CSI access mode, as the kubelet's CSI plugin maps them.
ACCESS_MODES = {
    "ReadWriteOnce": csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER,
    "ReadWriteOncePod": csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER,
    "ReadOnlyMany": csi.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY,
    "ReadWriteMany": csi.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER,
}
