"""Whose CNI network the pods get. pykubelet writes a bridge network for its pod CIDR
(cni_config.py) into <root>/cni/net.d, which its own containerd reads. A runtime that reads
another directory (the host's containerd and /etc/cni/net.d on a kubeadm node, or `pykubelet up
--cni-conf-dir`) takes its network from whatever CNI agent writes there (Calico, Cilium,
Flannel: a DaemonSet's privileged pod): then pykubelet writes nothing and, as the kubelet, only
reports the runtime's NetworkReady, naming the directory and the config in use."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Callable

from shared.model.json_types import JSONObject
from shared.runtime.cri import CRIError, RuntimeService

log = logging.getLogger(__name__)

# The runtime's config is asked again this often (a restarted runtime may read another dir).
ASK_EVERY = 30.0
# The files libcni (and so containerd) takes as network configs, the first by name in use.
CONFIG_SUFFIXES = (".conf", ".conflist", ".json")


def runtime_conf_dir(config: JSONObject) -> str:
    """containerd's CRI config (verbose Status, 1.x and 2.x alike): cni.confDir; "" if absent."""
    cni = config.get("cni")
    conf_dir = cni.get("confDir") if isinstance(cni, dict) else None
    return conf_dir if isinstance(conf_dir, str) and conf_dir.startswith("/") else ""


def config_in_use(conf_dir: Path) -> Path | None:
    """The network config the runtime loads from conf_dir: the first by name (names only are
    read; the files belong to the CNI agent)."""
    try:
        names = sorted(n for n in os.listdir(conf_dir) if n.endswith(CONFIG_SUFFIXES))
    except OSError:
        return None
    return conf_dir / names[0] if names else None


class RuntimeCNI:
    def __init__(self, runtime: RuntimeService, own_dir: Path, every: float = ASK_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.runtime = runtime
        self.own_dir = own_dir
        self.every = every
        self.clock = clock
        self._asked_at: float | None = None
        self._dir = ""

    async def agent_dir(self) -> Path | None:
        """The runtime's CNI conf dir when it is not pykubelet's own; None when it is ours or
        the runtime does not say (pykubelet's network then, as before)."""
        now = self.clock()
        if self._asked_at is None or now - self._asked_at >= self.every:
            try:
                found = runtime_conf_dir(await self.runtime.runtime_config())
            except CRIError as exc:
                log.debug("runtime config not available: %s", exc)
                found = self._dir
            else:
                self._asked_at = now
            if found != self._dir:
                log.info("the container runtime reads CNI configs from %s%s", found or "(it does not say)",
                         "" if not found or self._same(found) else
                         ": pods get the network a CNI agent writes there; pykubelet writes none")
            self._dir = found
        if not self._dir or self._same(self._dir):
            return None
        return Path(self._dir)

    def _same(self, found: str) -> bool:
        return os.path.realpath(found) == os.path.realpath(self.own_dir)
