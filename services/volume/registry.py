"""Finding CSI node plugins the way the kubelet's plugin watcher does.

A plugin (or its node-driver-registrar) puts a unix socket in the plugins registry directory and
serves the kubelet plugin registration API on it. For each new socket pykubelet calls GetInfo
(type "CSIPlugin", driver name, CSI endpoint, versions), then NodeGetInfo and NodeGetCapabilities
on the CSI endpoint, and tells the plugin the outcome with NotifyRegistrationStatus. A socket that
disappears unregisters its driver.
"""

from __future__ import annotations

import asyncio
import logging
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import grpc

from services.volume.csi_client import CSIError, CSINodeClient
from shared.csi import registration, registration_grpc
from shared.tasks.dir_watch import Change, DirectoryWatch

log = logging.getLogger(__name__)

# The registry is watched with inotify, as the kubelet's plugin watcher does (fsnotify); this
# rescan only catches what inotify dropped.
RESCAN_PERIOD = 30.0
REGISTRATION_TIMEOUT = 10.0


@dataclass
class _Socket:
    mtime: float
    driver: str = ""
    error: str = ""


class PluginRegistry:
    def __init__(self, directory: Path, on_change: Callable[[str], None] | None = None) -> None:
        self.directory = directory
        self.drivers: dict[str, CSINodeClient] = {}
        self._sockets: dict[Path, _Socket] = {}
        self.on_change = on_change  # called with the driver name when one registers
        self.scanned = asyncio.Event()  # the registry directory was looked at once

    def get(self, driver: str) -> CSINodeClient | None:
        return self.drivers.get(driver)

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for path, s in sorted(self._sockets.items()):
            client = self.drivers.get(s.driver)
            out.append({"socket": str(path), "driver": s.driver, "error": s.error,
                        "endpoint": client.endpoint if client else "", "nodeID": client.node_id if client else "",
                        "stageUnstage": bool(client and client.stages)})
        return out

    def _scan(self) -> dict[Path, float]:
        found: dict[Path, float] = {}
        if not self.directory.is_dir():
            return found
        for entry in self.directory.rglob("*"):
            if entry.name.startswith("."):
                continue
            try:
                st = entry.lstat()
            except OSError:
                continue
            if stat.S_ISSOCK(st.st_mode):
                found[entry] = st.st_mtime
        return found

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Watching before scanning: a socket made during the scan is the next change.
            async with DirectoryWatch(self.directory, recursive=True) as watch:
                await self.scan_once()
                self.scanned.set()
                until = loop.time() + RESCAN_PERIOD
                while (left := until - loop.time()) > 0:
                    change = await watch.next_change(left)
                    if change is Change.TIMEOUT:
                        break
                    await self.scan_once()
                    if change is Change.GONE:
                        break

    async def scan_once(self) -> None:
        found = self._scan()
        for path in list(self._sockets):
            if path not in found:
                await self._unregister(path)
        for path, mtime in found.items():
            known = self._sockets.get(path)
            if known is None or known.mtime != mtime:
                await self._register(path, mtime)

    async def _register(self, path: Path, mtime: float) -> None:
        entry = self._sockets[path] = _Socket(mtime=mtime)
        channel = grpc.aio.insecure_channel(f"unix://{path}")
        stub = registration_grpc.RegistrationStub(channel)
        try:
            info = await stub.GetInfo(registration.InfoRequest(), timeout=REGISTRATION_TIMEOUT)
            error = self._check(info)
            client = None
            if not error:
                client = CSINodeClient(info.name, info.endpoint or str(path))
                try:
                    await client.probe(REGISTRATION_TIMEOUT)
                except CSIError as exc:
                    error = f"CSI driver {info.name} at {client.endpoint}: {exc}"
                    await client.close()
            try:
                await stub.NotifyRegistrationStatus(registration.RegistrationStatus(
                    plugin_registered=not error, error=error), timeout=REGISTRATION_TIMEOUT)
            except grpc.aio.AioRpcError as exc:
                log.warning("plugin at %s: NotifyRegistrationStatus failed: %s", path, exc.details())
            if error or client is None:
                entry.error = error
                log.warning("plugin at %s not registered: %s", path, error)
                return
            old = self.drivers.pop(info.name, None)
            if old is not None:
                await old.close()
            self.drivers[info.name] = client
            entry.driver = info.name
            log.info("CSI driver %s registered (endpoint %s, node id %s, stage/unstage %s)", info.name,
                     client.endpoint, client.node_id, client.stages)
            if self.on_change:
                self.on_change(info.name)
        except grpc.aio.AioRpcError as exc:
            entry.error = f"GetInfo failed: {exc.details() or exc.code().name}"
            log.warning("plugin socket %s: %s", path, entry.error)
        finally:
            await channel.close()

    @staticmethod
    def _check(info: Any) -> str:
        if info.type != "CSIPlugin":
            return f"plugin type {info.type!r} is not handled by pykubelet (only CSIPlugin)"
        if not info.name:
            return "plugin reported an empty name"
        if not any(v.split(".")[0] in ("1", "v1") for v in info.supported_versions):
            return f"no supported CSI version in {list(info.supported_versions)} (pykubelet speaks CSI 1.x)"
        return ""

    async def _unregister(self, path: Path) -> None:
        entry = self._sockets.pop(path)
        if entry.driver and self.drivers.get(entry.driver):
            client = self.drivers.pop(entry.driver)
            await client.close()
            log.info("CSI driver %s unregistered (socket %s removed)", entry.driver, path)

    async def close(self) -> None:
        for client in self.drivers.values():
            await client.close()
        self.drivers.clear()
