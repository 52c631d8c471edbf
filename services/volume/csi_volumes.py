"""CSI volumes on the node: inline ephemeral `csi:` volumes and PVCs bound to CSI PVs.

Setup: (attach check) -> NodeStageVolume to the global staging path, once per volume, when the
driver has STAGE_UNSTAGE_VOLUME and the volume is not ephemeral -> NodePublishVolume to the pod's
path. Teardown runs the other way: NodeUnpublishVolume, then NodeUnstageVolume once no pod on the
node publishes the volume any more. Each pod volume directory carries a vol_data.json naming its
driver, volume handle and staging path, so teardown works from the disk alone (after a restart,
or for a pod deleted while the volume service was down).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from services.volume import metrics as M
from services.volume.csi_client import ACCESS_MODES, CSINodeClient, mount_capability
from services.volume.objects import ObjectSource, ObjectUnavailable
from services.volume.paths import Layout
from services.volume.projection import VolumeSourceError
from services.volume.registry import PluginRegistry
from shared.csi import csi
from shared.host.mounts import is_mount_point, remove_tree
from shared.model.podspec import Pod, Volume
from shared.model.volume_plugins import CSI

log = logging.getLogger(__name__)

VOL_DATA = "vol_data.json"
PLUGIN = CSI


class AttachPending(VolumeSourceError):
    """The volume needs attaching and the attachment is not there yet (FailedAttachVolume)."""


@dataclass
class CSIVolume:
    driver: str
    volume_handle: str
    spec_name: str            # the directory name: the pod's volume name, or the PV name
    ephemeral: bool
    readonly: bool = False
    fs_type: str = ""
    mount_flags: list[str] = field(default_factory=list)
    access_mode: int = csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
    volume_context: dict[str, str] = field(default_factory=dict)
    publish_secret: tuple[str, str] | None = None  # (namespace, name)
    stage_secret: tuple[str, str] | None = None
    claim: tuple[str, str] | None = None           # (namespace, PVC name), for volume stats


@dataclass
class VolData:
    """What teardown needs, written beside the publish target before publishing."""

    driverName: str
    volumeHandle: str
    specVolID: str
    volumeLifecycleMode: str  # Persistent or Ephemeral
    stagingPath: str = ""
    podUID: str = ""
    claimNamespace: str = ""
    claimName: str = ""


def ephemeral_handle(pod_uid: str, volume_name: str) -> str:
    """The kubelet's handle for an inline volume: stable per pod and volume."""
    return "csi-" + hashlib.sha256((pod_uid + volume_name).encode()).hexdigest()


def attachment_name(volume_handle: str, driver: str, node: str) -> str:
    """The name the attach/detach controller gives a CSI VolumeAttachment."""
    return "csi-" + hashlib.sha256((volume_handle + driver + node).encode()).hexdigest()


def read_vol_data(vol_dir: Path) -> VolData | None:
    try:
        return VolData(**json.loads((vol_dir / VOL_DATA).read_text()))
    except (OSError, ValueError, TypeError):
        return None


class CSIVolumes:
    def __init__(self, layout: Layout, registry: PluginRegistry, objects: ObjectSource, node_name: str) -> None:
        self.layout = layout
        self.registry = registry
        self.objects = objects
        self.node_name = node_name

    # -- what the pod asks for ---------------------------------------------------------------

    async def resolve(self, pod: Pod, volume: Volume, objects: ObjectSource | None = None) -> CSIVolume:
        """objects: where this pod may read API objects from (static pods may not)."""
        objects = objects or self.objects
        src = volume.source
        if volume.kind == "csi":
            driver = src.get("driver", "")
            if not driver:
                raise VolumeSourceError("csi.driver is required")
            ctx = dict(src.get("volumeAttributes") or {})
            drv = await self._driver_object(driver)
            if drv is not None:
                modes = drv.get("spec", {}).get("volumeLifecycleModes") or ["Persistent"]
                if "Ephemeral" not in modes:
                    raise VolumeSourceError(f'CSIDriver "{driver}" does not support inline ephemeral volumes '
                                            f"(volumeLifecycleModes: {modes})")
                if drv.get("spec", {}).get("podInfoOnMount"):
                    ctx.update(self._pod_info(pod, ephemeral=True))
            ref = src.get("nodePublishSecretRef")
            return CSIVolume(driver=driver, volume_handle=ephemeral_handle(pod.uid, volume.name),
                             spec_name=volume.name, ephemeral=True, readonly=bool(src.get("readOnly")),
                             fs_type=src.get("fsType", ""), volume_context=ctx,
                             publish_secret=(pod.metadata.namespace, ref["name"]) if ref else None)
        claim_name = src.get("claimName", "")
        ns = pod.metadata.namespace
        try:
            pvc = await objects.persistent_volume_claim(ns, claim_name)
        except ObjectUnavailable as exc:
            raise VolumeSourceError(str(exc)) from None
        if pvc is None:
            raise VolumeSourceError(f'persistentvolumeclaim "{claim_name}" not found')
        pv_name = pvc.get("spec", {}).get("volumeName", "")
        if pvc.get("status", {}).get("phase") != "Bound" or not pv_name:
            raise VolumeSourceError(f'PVC {ns}/{claim_name} is not bound')
        pv = await self.objects.persistent_volume(pv_name)
        if pv is None:
            raise VolumeSourceError(f'persistentvolume "{pv_name}" not found')
        pv_csi = pv.get("spec", {}).get("csi")
        if not pv_csi:
            raise VolumeSourceError(f'persistentvolume "{pv_name}" is not a CSI volume; pykubelet mounts only '
                                    "CSI persistent volumes")
        modes = pv.get("spec", {}).get("accessModes") or ["ReadWriteOnce"]
        ctx = dict(pv_csi.get("volumeAttributes") or {})
        drv = await self._driver_object(pv_csi["driver"])
        if drv is not None and drv.get("spec", {}).get("podInfoOnMount"):
            ctx.update(self._pod_info(pod, ephemeral=False))
        def secret(ref: dict[str, str] | None) -> tuple[str, str] | None:
            return (ref.get("namespace", ns), ref["name"]) if ref else None
        return CSIVolume(driver=pv_csi["driver"], volume_handle=pv_csi["volumeHandle"], spec_name=pv_name,
                         ephemeral=False, readonly=bool(src.get("readOnly") or pv_csi.get("readOnly")),
                         fs_type=pv_csi.get("fsType", ""),
                         mount_flags=list(pv.get("spec", {}).get("mountOptions") or []),
                         access_mode=ACCESS_MODES.get(modes[0], csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER),
                         volume_context=ctx, publish_secret=secret(pv_csi.get("nodePublishSecretRef")),
                         stage_secret=secret(pv_csi.get("nodeStageSecretRef")), claim=(ns, claim_name))

    async def _driver_object(self, driver: str) -> dict[str, Any] | None:
        try:
            return await self.objects.csi_driver(driver)
        except ObjectUnavailable as exc:
            raise VolumeSourceError(str(exc)) from None

    @staticmethod
    def _pod_info(pod: Pod, ephemeral: bool) -> dict[str, str]:
        return {"csi.storage.k8s.io/pod.name": pod.metadata.name,
                "csi.storage.k8s.io/pod.namespace": pod.metadata.namespace,
                "csi.storage.k8s.io/pod.uid": pod.uid,
                "csi.storage.k8s.io/serviceAccount.name": pod.spec.serviceAccountName or "default",
                "csi.storage.k8s.io/ephemeral": str(ephemeral).lower()}

    async def _secret(self, ref: tuple[str, str] | None) -> dict[str, str]:
        if ref is None:
            return {}
        try:
            obj = await self.objects.secret(*ref)
        except ObjectUnavailable as exc:
            raise VolumeSourceError(str(exc)) from None
        if obj is None:
            raise VolumeSourceError(f'secret "{ref[1]}" in namespace "{ref[0]}" not found')
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}

    def _client(self, driver: str) -> CSINodeClient:
        client = self.registry.get(driver)
        if client is None:
            raise VolumeSourceError(f"driver name {driver} not found in the list of registered CSI drivers "
                                    f"(is its node plugin running and registered under {self.layout.registry}?)")
        return client

    # -- setup / teardown ----------------------------------------------------------------------

    async def setup(self, pod: Pod, vol: CSIVolume) -> Path:
        """Stage (if needed) and publish; returns the path containers mount."""
        vol_dir = self.layout.volume_dir(pod.uid, PLUGIN, vol.spec_name)
        target = vol_dir / "mount"
        if is_mount_point(target):
            return target  # published before (by this process or an earlier one)
        client = self._client(vol.driver)
        plugin = f"{PLUGIN}:{vol.driver}"
        publish_context: dict[str, str] = {}
        if not vol.ephemeral:
            publish_context = await self._attachment(vol)
        capability = mount_capability(vol.fs_type, vol.mount_flags, vol.access_mode)
        staging = ""
        if client.stages and not vol.ephemeral:
            staging = str(await self._stage(client, vol, capability, publish_context, plugin))
        vol_dir.mkdir(parents=True, exist_ok=True)
        data = VolData(driverName=vol.driver, volumeHandle=vol.volume_handle, specVolID=vol.spec_name,
                       volumeLifecycleMode="Ephemeral" if vol.ephemeral else "Persistent", stagingPath=staging,
                       podUID=pod.uid, claimNamespace=vol.claim[0] if vol.claim else "",
                       claimName=vol.claim[1] if vol.claim else "")
        (vol_dir / VOL_DATA).write_text(json.dumps(asdict(data)))
        secrets = await self._secret(vol.publish_secret)
        with M.timed(plugin, "volume_mount"):
            await client.publish(vol.volume_handle, staging, str(target), capability, vol.readonly,
                                 vol.volume_context, publish_context, secrets)
        log.info("pod %s: CSI volume %s (%s %s) published at %s", pod.full_name, vol.spec_name, vol.driver,
                 vol.volume_handle, target)
        return target

    async def _attachment(self, vol: CSIVolume) -> dict[str, str]:
        drv = await self._driver_object(vol.driver)
        if drv is not None and drv.get("spec", {}).get("attachRequired") is False:
            return {}
        name = attachment_name(vol.volume_handle, vol.driver, self.node_name)
        try:
            va = await self.objects.volume_attachment(name)
        except ObjectUnavailable as exc:
            raise AttachPending(str(exc)) from None
        status = (va or {}).get("status") or {}
        if not status.get("attached"):
            why = (status.get("attachError") or {}).get("message") or "not attached yet"
            raise AttachPending(f'AttachVolume.Attach for volume "{vol.spec_name}": VolumeAttachment {name}: {why} '
                                f'(CSIDriver "{vol.driver}" requires attach; set attachRequired: false if it '
                                "does not)")
        return dict(status.get("attachmentMetadata") or {})

    async def _stage(self, client: CSINodeClient, vol: CSIVolume, capability: csi.VolumeCapability,
                     publish_context: dict[str, str],
                     plugin: str) -> Path:
        base = self.layout.csi_staging_dir(vol.driver, vol.volume_handle)
        staging = base / "globalmount"
        marker = base / VOL_DATA
        if marker.exists() and json.loads(marker.read_text()).get("staged"):
            return staging
        staging.mkdir(parents=True, exist_ok=True)
        info = {"driverName": vol.driver, "volumeHandle": vol.volume_handle, "staged": False}
        marker.write_text(json.dumps(info))
        secrets = await self._secret(vol.stage_secret)
        with M.timed(plugin, "mount_device"):
            await client.stage(vol.volume_handle, str(staging), capability, vol.volume_context, publish_context,
                               secrets)
        marker.write_text(json.dumps({**info, "staged": True}))
        log.info("CSI volume %s (%s) staged at %s", vol.volume_handle, vol.driver, staging)
        return staging

    async def teardown(self, vol_dir: Path) -> None:
        """Unpublish one pod's CSI volume, and unstage it when no other pod publishes it."""
        target = vol_dir / "mount"
        data = read_vol_data(vol_dir)
        if data is None:
            if is_mount_point(target):
                raise VolumeSourceError(f"{target} is mounted but {vol_dir / VOL_DATA} is missing: cannot tell "
                                        "which CSI driver to ask to unpublish it; unmount it by hand")
            remove_tree(vol_dir)
            return
        client = self._client(data.driverName)
        with M.timed(f"{PLUGIN}:{data.driverName}", "volume_unmount"):
            await client.unpublish(data.volumeHandle, str(target))
        remove_tree(vol_dir)
        if data.claimName:
            M.forget_volume_stats(data.claimNamespace, data.claimName)
        log.info("CSI volume %s (%s) unpublished from %s", data.volumeHandle, data.driverName, target)
        if data.stagingPath and not self._published_elsewhere(data.stagingPath):
            await self._unstage(client, data)

    def _published_elsewhere(self, staging: str) -> bool:
        for vol_data in self.layout.pods.glob(f"*/volumes/{PLUGIN.replace('/', '~')}/*/{VOL_DATA}"):
            other = read_vol_data(vol_data.parent)
            if other is not None and other.stagingPath == staging:
                return True
        return False

    async def _unstage(self, client: CSINodeClient, data: VolData) -> None:
        staging = Path(data.stagingPath)
        with M.timed(f"{PLUGIN}:{data.driverName}", "unmount_device"):
            await client.unstage(data.volumeHandle, str(staging))
        remove_tree(staging.parent)
        log.info("CSI volume %s (%s) unstaged from %s", data.volumeHandle, data.driverName, staging)

    async def volume_stats(self, vol_dir: Path) -> tuple[VolData, dict[str, int]] | None:
        """Usage of a published PVC volume: NodeGetVolumeStats when the driver offers it."""
        data = read_vol_data(vol_dir)
        if data is None or not data.claimName:
            return None
        client = self.registry.get(data.driverName)
        if client is None or not client.has_volume_stats:
            return None
        return data, await client.volume_stats(data.volumeHandle, str(vol_dir / "mount"), data.stagingPath)
