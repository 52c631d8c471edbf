"""User namespaces for pods with `hostUsers: false`, as the kubelet makes them.

Each such pod gets a block of idsPerPod (userNamespaces.idsPerPod, 65536 by default) host UIDs
and GIDs, mapped from 0 in the pod: root in the pod is an unprivileged ID on the node, and no
two pods share a block. The blocks are cut from the kubelet user's subordinate IDs (`getsubids
kubelet`, from /etc/subuid and /etc/subgid) when that user exists, else from everything above
the first block (IDs below idsPerPod stay the host's).

A pod's block is written to <root>/pods/<uid>/userns, in the kubelet's format, before its
sandbox is made: a restarted pod-sync (or a kubelet taking over the node) reads the files back
and gives every pod the block it had. A block is freed when its pod is neither wanted nor in the
runtime any more.

The runtime does the rest: the sandbox and every container join the pod's namespace, and each
volume is mounted ID-mapped (the CRI mount carries the mappings), so files keep the IDs the pod
sees. The default runtime handler must say it supports user namespaces (containerd 2.0 and
newer do); otherwise the pod's sandbox is refused with the kubelet's words.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cri_api.v1 import api_pb2 as cri

from shared.host.node_dirs import private_dir
from shared.model.podspec import POD_UID
from shared.runtime.cri import RuntimeService

log = logging.getLogger(__name__)

UNIT = 65536  # the size of one namespace's IDs, and what idsPerPod is a multiple of
MAPPINGS_FILE = "userns"
KUBELET_USER = "kubelet"
GETSUBIDS_TIMEOUT = 10.0
NO_RUNTIME_SUPPORT = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"


class UserNamespaceError(Exception):
    """A pod's user namespace cannot be made; the message says why."""


@dataclass(frozen=True)
class IdRange:
    first: int
    length: int


def parse_getsubids(output: str) -> IdRange:
    """`getsubids kubelet` prints one line, "0: kubelet 65536 2147483648": the range's start and length."""
    lines = output.strip("\n").split("\n")
    if len(lines) != 1:
        raise UserNamespaceError(f"getsubids printed {len(lines)} lines, not one: {output[:200]!r}")
    parts = lines[0].split()
    if len(parts) != 4 or not parts[2].isdigit() or not parts[3].isdigit():
        raise UserNamespaceError(f"getsubids printed {lines[0][:200]!r}, not \"N: user first length\"")
    first, length = int(parts[2]), int(parts[3])
    if first >= 2**32 or length >= 2**32:
        raise UserNamespaceError(f"getsubids printed IDs beyond 32 bits: {lines[0][:200]!r}")
    return IdRange(first, length)


def kubelet_id_range(ids_per_pod: int, run: Callable[[list[str]], str] | None = None,
                     has_user: Callable[[str], bool] | None = None, getsubids: str | None = None) -> IdRange:
    """The host IDs pods' namespaces are cut from, found as the kubelet finds them: the
    kubelet user's subordinate IDs when that user and getsubids exist, else all IDs from
    ids_per_pod up."""
    default = IdRange(ids_per_pod, 2**32 - ids_per_pod)
    if not (has_user or _user_exists)(KUBELET_USER):
        return default
    tool = getsubids if getsubids is not None else shutil.which("getsubids")
    if not tool:
        return default
    call = run or _run
    uids, gids = call([tool, KUBELET_USER]), call([tool, "-g", KUBELET_USER])
    if uids != gids:
        raise UserNamespaceError(f"the subordinate UIDs and GIDs of user {KUBELET_USER!r} differ: "
                                 f"{uids.strip()!r} and {gids.strip()!r}; give it the same range in "
                                 "/etc/subuid and /etc/subgid")
    return parse_getsubids(uids)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=GETSUBIDS_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserNamespaceError(f"{' '.join(argv)} failed: {exc}") from None
    if done.returncode != 0:
        raise UserNamespaceError(f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()[:200]}")
    return done.stdout


class UserNamespaces:
    """The blocks of host IDs given to pods, kept in their pod directories."""

    def __init__(self, pods_dir: Path, ids_per_pod: int, ids: IdRange, max_pods: int) -> None:
        # The kubelet's checks, in its words: every block whole and aligned, enough for maxPods.
        if ids_per_pod % UNIT != 0:
            raise UserNamespaceError(f"kubelet user namespace length {ids_per_pod} is not a multiple of {UNIT}")
        if ids.first % ids_per_pod != 0:
            raise UserNamespaceError(f"kubelet user assigned ID {ids.first} is not a multiple of {ids_per_pod}")
        if ids.first < ids_per_pod:
            raise UserNamespaceError(f"kubelet user assigned ID {ids.first} must be greater or equal to "
                                     f"{ids_per_pod}")
        if ids.length % ids_per_pod != 0:
            raise UserNamespaceError(f"kubelet user assigned IDs length {ids.length} is not a multiple of "
                                     f"{ids_per_pod}")
        if ids.length // ids_per_pod < max_pods:
            raise UserNamespaceError(f"kubelet user assigned IDs are not enough to support {max_pods} pods")
        self.pods_dir = pods_dir
        self.size = ids_per_pod
        self._offset = ids.first // ids_per_pod  # the first block's index among all IDs
        self._blocks = ids.length // ids_per_pod
        self._by_pod: dict[str, int] = {}  # pod UID -> its block's first host ID
        self._used: set[int] = set()  # blocks taken, counted from the first
        self._next = 0  # where the search for a free block starts (round-robin, as a bitmap's)

    # -- the files ------------------------------------------------------------------------------

    def recover(self) -> None:
        """Take back every block a pod directory's userns file records (a previous run's)."""
        if not self.pods_dir.is_dir():
            return
        for pod_dir in sorted(self.pods_dir.iterdir()):
            if not pod_dir.is_dir() or not POD_UID.match(pod_dir.name):
                continue
            try:
                self._read(pod_dir.name)
            except UserNamespaceError as exc:
                # One bad file must not stop the node: that pod's block is not reused, and its
                # sandbox will say why.
                log.warning("pod %s: %s", pod_dir.name, exc)

    def _file(self, uid: str) -> Path:
        if not POD_UID.match(uid):
            raise UserNamespaceError(f"{uid[:80]!r} is not a pod UID")
        return self.pods_dir / uid / MAPPINGS_FILE

    def _read(self, uid: str) -> int | None:
        """The block recorded for the pod (taken again), or None when it has none."""
        path = self._file(uid)
        try:
            if path.is_symlink() or not path.is_file():
                return None
            text = path.read_text()[:4096]
        except OSError as exc:
            raise UserNamespaceError(f"cannot read {path}: {exc}") from None
        first = self._parse(text, path)
        self._take(uid, first, path)
        return first

    def _parse(self, text: str, path: Path) -> int:
        try:
            data = json.loads(text)
            uids, gids = data["uidMappings"], data["gidMappings"]
        except (ValueError, KeyError, TypeError):
            raise UserNamespaceError(f"invalid user namespace mappings file {path}") from None
        if not isinstance(uids, list) or len(uids) != 1 or uids != gids:
            raise UserNamespaceError(f"{path}: one mapping, the same for UIDs and GIDs, is expected")
        mapping = uids[0]
        if not isinstance(mapping, dict) or mapping.get("containerId") != 0:
            raise UserNamespaceError(f"{path}: ID 0 of the pod must be mapped")
        first, length = mapping.get("hostId"), mapping.get("length")
        if not isinstance(first, int) or length != self.size:
            raise UserNamespaceError(f"{path}: the mapping's length is {length}, not idsPerPod ({self.size})")
        return first

    def _take(self, uid: str, first: int, path: Path) -> None:
        index = first // self.size - self._offset
        if first % self.size != 0 or not 0 <= index < self._blocks:
            raise UserNamespaceError(f"{path}: host ID {first} is outside the node's user namespace IDs")
        if self._by_pod.get(uid) == first:
            return
        if uid in self._by_pod:
            raise UserNamespaceError(f"{path}: the pod already has the IDs from {self._by_pod[uid]}")
        if index in self._used:
            raise UserNamespaceError(f"{path}: the IDs from {first} are another pod's")
        self._used.add(index)
        self._by_pod[uid] = first

    def _write(self, uid: str, first: int) -> None:
        path = self._file(uid)
        private_dir(path.parent)
        mapping = [{"hostId": first, "containerId": 0, "length": self.size}]
        tmp = path.with_name(f".{MAPPINGS_FILE}.tmp")
        tmp.write_text(json.dumps({"uidMappings": mapping, "gidMappings": mapping}))
        with open(tmp) as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)  # whole or absent: a crash never leaves half a mapping
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- giving and taking back -----------------------------------------------------------------

    def first_id(self, uid: str) -> int:
        """The pod's block's first host ID: the one it has, else a free one, recorded first."""
        if uid in self._by_pod:
            return self._by_pod[uid]
        recorded = self._read(uid)
        if recorded is not None:
            return recorded
        free = next((i % self._blocks for i in range(self._next, self._next + self._blocks)
                     if i % self._blocks not in self._used), None)
        if free is None:
            raise UserNamespaceError("could not find an empty slot to allocate a user namespace")
        first = (free + self._offset) * self.size
        self._write(uid, first)
        self._used.add(free)
        self._by_pod[uid] = first
        self._next = free + 1
        return first

    def release(self, uid: str) -> None:
        first = self._by_pod.pop(uid, None)
        if first is None:
            return
        self._used.discard(first // self.size - self._offset)
        try:
            self._file(uid).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("pod %s: removing its user namespace file: %s", uid, exc)
        log.info("pod %s: user namespace IDs from %d freed", uid, first)

    def release_all_but(self, known: set[str]) -> None:
        """Free the block of every pod not in `known` (wanted, or still in the runtime)."""
        for uid in [u for u in self._by_pod if u not in known]:
            self.release(uid)

    @property
    def allocated(self) -> dict[str, int]:
        return dict(self._by_pod)

    # -- CRI ------------------------------------------------------------------------------------

    async def options(self, uid: str, runtime: RuntimeService) -> cri.UserNamespace:
        """The CRI user namespace of a pod with hostUsers: false."""
        status = await runtime.status()
        handler = next((h for h in status.runtime_handlers if h.name == ""), None)
        if handler is None or not handler.features.user_namespaces:
            raise UserNamespaceError(NO_RUNTIME_SUPPORT)
        first = self.first_id(uid)
        mapping = cri.IDMapping(host_id=first, container_id=0, length=self.size)
        return cri.UserNamespace(mode=cri.POD, uids=[mapping], gids=[mapping])


def share_user_namespace(config: cri.ContainerConfig, sandbox: cri.PodSandboxConfig) -> None:
    """A container of a pod with its own user namespace joins it, and each of its mounts is
    ID-mapped the same way, as the kubelet asks the runtime."""
    userns = sandbox.linux.security_context.namespace_options.userns_options
    if not sandbox.linux.security_context.namespace_options.HasField("userns_options") or userns.mode != cri.POD:
        return
    config.linux.security_context.namespace_options.userns_options.CopyFrom(userns)
    for mount in config.mounts:
        mount.uidMappings.extend(userns.uids)
        mount.gidMappings.extend(userns.gids)


def for_node(pods_dir: Path, ids_per_pod: int, max_pods: int) -> UserNamespaces | str:
    """The node's user namespaces, with the blocks its pods already have; or why there are none
    (said for each pod with hostUsers: false, while every other pod runs: the kubelet would not
    start at all)."""
    try:
        namespaces = UserNamespaces(pods_dir, ids_per_pod, kubelet_id_range(ids_per_pod), max_pods)
        namespaces.recover()
    except (UserNamespaceError, OSError) as exc:
        log.error("user namespaces are unavailable, pods with hostUsers: false will not start: %s", exc)
        return f"user namespaces are unavailable on this node: {exc}"
    return namespaces
