"""A small directory-backed CSI node plugin for the tests, faithful to the CSI spec's node side.

Each volume is a directory <backing>/<volume_id>. With STAGE_UNSTAGE_VOLUME (the default) it is
bind-mounted at the staging path by NodeStageVolume and from there at each target path by
NodePublishVolume; without it, published straight from the backing directory. Every call is
appended as a JSON line to --log, so tests can check the order, paths and capabilities the node
agent used.

It registers the way a CSI driver with node-driver-registrar does: the Registration service on a
socket in the kubelet plugins registry directory, naming the CSI endpoint (a second socket).

    python -m tests.csi_plugin --name NAME --registry-dir DIR --csi-socket PATH --backing DIR --log FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path

import grpc

from shared.csi import csi, csi_grpc, registration, registration_grpc

RPC = csi.NodeServiceCapability.RPC


def _is_mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def _run(*argv: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {res.stderr.strip()}")


class Plugin(csi_grpc.IdentityServicer, csi_grpc.NodeServicer, registration_grpc.RegistrationServicer):
    def __init__(self, name: str, backing: Path, log: Path, stage: bool, csi_socket: str) -> None:
        self.name = name
        self.backing = backing
        self.log_path = log
        self.stage = stage
        self.csi_socket = csi_socket
        self.staged: dict[str, str] = {}  # volume id -> staging path

    def _log(self, method: str, **fields) -> None:
        with open(self.log_path, "a") as f:
            f.write(json.dumps({"method": method, **fields}) + "\n")

    @staticmethod
    async def _fail(context, code: grpc.StatusCode, message: str):
        await context.abort(code, message)

    # -- registration (what node-driver-registrar serves) -----------------------------------

    async def GetInfo(self, request, context):
        self._log("GetInfo")
        return registration.PluginInfo(type="CSIPlugin", name=self.name, endpoint=self.csi_socket,
                                       supported_versions=["1.0.0"])

    async def NotifyRegistrationStatus(self, request, context):
        self._log("NotifyRegistrationStatus", registered=request.plugin_registered, error=request.error)
        return registration.RegistrationStatusResponse()

    # -- identity ------------------------------------------------------------------------------

    async def GetPluginInfo(self, request, context):
        return csi.GetPluginInfoResponse(name=self.name, vendor_version="0.1.0")

    async def GetPluginCapabilities(self, request, context):
        return csi.GetPluginCapabilitiesResponse()

    async def Probe(self, request, context):
        resp = csi.ProbeResponse()
        resp.ready.value = True
        return resp

    # -- node ----------------------------------------------------------------------------------

    async def NodeGetInfo(self, request, context):
        self._log("NodeGetInfo")
        return csi.NodeGetInfoResponse(node_id=f"{self.name}-node")

    async def NodeGetCapabilities(self, request, context):
        caps = [RPC.GET_VOLUME_STATS] + ([RPC.STAGE_UNSTAGE_VOLUME] if self.stage else [])
        return csi.NodeGetCapabilitiesResponse(capabilities=[
            csi.NodeServiceCapability(rpc=RPC(type=c)) for c in caps])

    def _capability(self, cap) -> dict:
        return {"access_mode": csi.VolumeCapability.AccessMode.Mode.Name(cap.access_mode.mode),
                "fs_type": cap.mount.fs_type, "mount_flags": list(cap.mount.mount_flags),
                "kind": cap.WhichOneof("access_type")}

    async def NodeStageVolume(self, request, context):
        self._log("NodeStageVolume", volume_id=request.volume_id, staging_target_path=request.staging_target_path,
                  capability=self._capability(request.volume_capability),
                  volume_context=dict(request.volume_context), publish_context=dict(request.publish_context))
        if not self.stage:
            await self._fail(context, grpc.StatusCode.UNIMPLEMENTED, "this plugin does not stage")
        if not request.volume_id or not request.staging_target_path or not request.HasField("volume_capability"):
            await self._fail(context, grpc.StatusCode.INVALID_ARGUMENT,
                             "volume_id, staging_target_path and volume_capability are required")
        source = self.backing / request.volume_id
        source.mkdir(parents=True, exist_ok=True)
        os.makedirs(request.staging_target_path, exist_ok=True)
        if not _is_mounted(request.staging_target_path):  # idempotent, as the spec requires
            _run("mount", "--bind", str(source), request.staging_target_path)
        self.staged[request.volume_id] = request.staging_target_path
        return csi.NodeStageVolumeResponse()

    async def NodeUnstageVolume(self, request, context):
        self._log("NodeUnstageVolume", volume_id=request.volume_id, staging_target_path=request.staging_target_path)
        if _is_mounted(request.staging_target_path):
            _run("umount", request.staging_target_path)
        self.staged.pop(request.volume_id, None)
        return csi.NodeUnstageVolumeResponse()

    async def NodePublishVolume(self, request, context):
        self._log("NodePublishVolume", volume_id=request.volume_id, staging_target_path=request.staging_target_path,
                  target_path=request.target_path, readonly=request.readonly,
                  capability=self._capability(request.volume_capability),
                  volume_context=dict(request.volume_context))
        if not request.volume_id or not request.target_path or not request.HasField("volume_capability"):
            await self._fail(context, grpc.StatusCode.INVALID_ARGUMENT,
                             "volume_id, target_path and volume_capability are required")
        if request.staging_target_path:
            if not _is_mounted(request.staging_target_path):
                await self._fail(context, grpc.StatusCode.FAILED_PRECONDITION,
                                 f"staging path {request.staging_target_path} is not staged")
            source = request.staging_target_path
        else:
            source = str(self.backing / request.volume_id)
            os.makedirs(source, exist_ok=True)
        if not os.path.isdir(os.path.dirname(request.target_path)):
            await self._fail(context, grpc.StatusCode.FAILED_PRECONDITION, "the target path's parent must exist")
        os.makedirs(request.target_path, exist_ok=True)
        if not _is_mounted(request.target_path):
            _run("mount", "--bind", source, request.target_path)
            if request.readonly:
                _run("mount", "-o", "remount,bind,ro", request.target_path)
        return csi.NodePublishVolumeResponse()

    async def NodeUnpublishVolume(self, request, context):
        self._log("NodeUnpublishVolume", volume_id=request.volume_id, target_path=request.target_path)
        if _is_mounted(request.target_path):
            _run("umount", request.target_path)
        if os.path.isdir(request.target_path):
            os.rmdir(request.target_path)
        return csi.NodeUnpublishVolumeResponse()

    async def NodeGetVolumeStats(self, request, context):
        if not os.path.isdir(request.volume_path):
            await self._fail(context, grpc.StatusCode.NOT_FOUND, f"{request.volume_path} not found")
        st = os.statvfs(request.volume_path)
        return csi.NodeGetVolumeStatsResponse(usage=[
            csi.VolumeUsage(unit=csi.VolumeUsage.BYTES, total=st.f_blocks * st.f_frsize,
                            available=st.f_bavail * st.f_frsize, used=(st.f_blocks - st.f_bfree) * st.f_frsize),
            csi.VolumeUsage(unit=csi.VolumeUsage.INODES, total=st.f_files, available=st.f_ffree,
                            used=st.f_files - st.f_ffree)])


async def serve(args) -> None:
    plugin = Plugin(args.name, Path(args.backing), Path(args.log), not args.no_stage, args.csi_socket)
    Path(args.backing).mkdir(parents=True, exist_ok=True)
    csi_server = grpc.aio.server()
    csi_grpc.add_IdentityServicer_to_server(plugin, csi_server)
    csi_grpc.add_NodeServicer_to_server(plugin, csi_server)
    csi_server.add_insecure_port(f"unix://{args.csi_socket}")
    await csi_server.start()
    reg_socket = Path(args.registry_dir) / f"{args.name}-reg.sock"
    reg_socket.parent.mkdir(parents=True, exist_ok=True)
    reg_server = grpc.aio.server()
    registration_grpc.add_RegistrationServicer_to_server(plugin, reg_server)
    reg_server.add_insecure_port(f"unix://{reg_socket}")
    await reg_server.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await reg_server.stop(1)
    await csi_server.stop(1)
    reg_socket.unlink(missing_ok=True)
    Path(args.csi_socket).unlink(missing_ok=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True)
    p.add_argument("--registry-dir", required=True)
    p.add_argument("--csi-socket", required=True)
    p.add_argument("--backing", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--no-stage", action="store_true", help="do not offer STAGE_UNSTAGE_VOLUME")
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
