"""Network readiness: our CNI config is written and the runtime says its network is ready (its
NetworkReady condition, as pod-sync records the runtime's status: shared/store/runtime_status.py).
Where the runtime reads a CNI agent's directory instead of ours (runtime_cni.py), only the
runtime's word counts, as with the kubelet."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Callable

from sqlalchemy.exc import DatabaseError

from services.network.cni_config import write_conflist
from services.network.runtime_cni import RuntimeCNI, config_in_use
from shared.bus.client import Bus
from shared.bus.messages import NetworkChanged
from shared.host.cni import cni_conf_dir, cni_ipam_dir
from shared.store import NetworkStatus, Store
from shared.store.models import utcnow

log = logging.getLogger(__name__)

# Looked at again when pod-sync records a change in the runtime's status (RuntimeStatusChanged),
# and every 5 s once ready, every second until then, so a lost event costs that long at most.
READY_PERIOD, NOT_READY_PERIOD = 5.0, 1.0


def choose_pod_cidr(node_cidr: str | None, configured: str) -> str:
    """In cluster mode the Node's spec.podCIDR wins; the configured one is the fallback."""
    return node_cidr or configured


class NetworkManager:
    def __init__(self, store: Store, bus: Bus, runtime_network: Callable[[], tuple[bool, str]], pod_cidr: str,
                 root_dir: Path, period: float = READY_PERIOD, not_ready_period: float = NOT_READY_PERIOD,
                 runtime_cni: RuntimeCNI | None = None, hairpin: bool = True) -> None:
        self.store = store
        self.bus = bus
        self.runtime_network = runtime_network  # (ready, why not) of the runtime's NetworkReady
        self.wake = asyncio.Event()
        self.configured_pod_cidr = pod_cidr
        self.pod_cidr = pod_cidr
        self.conf_dir, self.ipam_dir = cni_conf_dir(root_dir), cni_ipam_dir(root_dir)
        self.period, self.not_ready_period = period, not_ready_period
        self.runtime_cni = runtime_cni  # None: the runtime reads our directory (tests' fakes)
        self.hairpin = hairpin  # hairpinMode other than none: pods' bridge ports in hairpin mode
        self._last: tuple[bool, str] | None = None
        self._written: tuple[str, bool, str, str, str] | None = None

    def use_node_pod_cidr(self, node_cidr: str) -> None:
        chosen = choose_pod_cidr(node_cidr, self.configured_pod_cidr)
        if chosen != self.pod_cidr:
            log.info("pod CIDR %s from the Node's spec.podCIDR", chosen)
            self.pod_cidr = chosen
            self.wake.set()

    def ensure_config(self) -> Path | None:
        if not self.pod_cidr:
            return None
        path, changed = write_conflist(self.conf_dir, self.pod_cidr, self.ipam_dir, self.hairpin)
        if changed:
            log.info("wrote CNI config %s for pod CIDR %s", path, self.pod_cidr)
        return path

    async def reconcile(self) -> None:
        agent_dir = await self.runtime_cni.agent_dir() if self.runtime_cni is not None else None
        path = self.ensure_config() if agent_dir is None else config_in_use(agent_dir)
        if path is None and agent_dir is None:
            ready, reason = False, "NoPodCIDR"
            message = "podCIDR is not set: set podCIDR in the kubelet config (or --pod-cidr)"
        else:
            ready, message = self.runtime_network()
            reason = "" if ready else "NetworkPluginNotReady"
            if not ready:
                message = f"container runtime network not ready: {message}"
                if agent_dir is not None:
                    message += (f" (the runtime reads CNI configs from {agent_dir}: the network is the one a CNI "
                                f"agent writes there{', none is there yet' if path is None else ''})")
        row = (self.pod_cidr, ready, reason, message if not ready else "ok", str(path or ""))
        if row != self._written:  # a write only when something changed: no store commit per poll
            # In a thread: the write may wait out another service's lock on the store.
            await self.store.run(self.store.upsert, NetworkStatus, {"id": 1}, {
                "pod_cidr": row[0], "ready": row[1], "reason": row[2], "message": row[3], "conf_path": row[4],
                "updated_at": utcnow()})
            self._written = row
        if self._last != (ready, message):
            self._last = (ready, message)
            log.info("network %s%s", "ready" if ready else "not ready: ", "" if ready else message)
            await self.bus.publish(NetworkChanged(ready=ready))

    def ready(self) -> tuple[bool, str]:
        if self._last is None:
            return False, "not reconciled yet"
        return self._last[0], "ok" if self._last[0] else self._last[1]

    async def run(self, on_synced: Callable[[], None] = lambda: None) -> None:
        while True:
            try:
                await self.reconcile()
                on_synced()
            except OSError as exc:
                log.error("cannot write CNI config in %s: %s", self.conf_dir, exc)
            except DatabaseError as exc:  # a full disk: the next round tries again
                log.error("cannot record the network state in the store: %s", exc.orig)
            try:
                await asyncio.wait_for(self.wake.wait(),
                                       self.period if self._last and self._last[0] else self.not_ready_period)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()
