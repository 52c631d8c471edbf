"""The systemd cgroup driver's side of pod-sync: kubepods.slice, the QoS tier slices and each pod's
slice, made and changed through systemd's D-Bus API as the kubelet's cgroup manager does (runc's
systemd manager: StartTransientUnit for a new slice, SetUnitProperties for a change, StopUnit
when the pod is gone).

systemd owns every cgroup below a slice it runs: it writes cpu.weight, cpu.max, memory.max and
pids.max from the unit's properties, and writes them again from those properties whenever it
re-realizes the tree (a daemon-reload, another unit starting beside). A value written straight
into the files would be undone then, so the settings go to systemd as properties, and systemd
writes the files.

On cgroup v1 systemd does the same in each controller's tree (cpu, memory, pids) from the
legacy properties (properties(legacy=True)); the trees it does not manage (cpuset, hugetlb) are
made by the runtime below the slice's path when a container needs them.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from jeepney import DBusAddress, DBusErrorResponse, new_method_call
from jeepney.io.blocking import DBusConnection, open_dbus_connection
from jeepney.wrappers import unwrap_msg

from shared.model.cgroup_names import SYSTEMD, on_host, slice_unit

log = logging.getLogger(__name__)

MANAGER = DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1",
                      interface="org.freedesktop.systemd1.Manager")
CALL_TIMEOUT = 10.0
# How long a new slice may take to appear as a cgroup (systemd runs the start job at once).
START_TIMEOUT = 10.0
INFINITY = 2**64 - 1  # systemd's "no limit" for the uint64 properties
USEC_PER_SEC = 1_000_000
UNIT_EXISTS = "org.freedesktop.systemd1.UnitExists"
NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"


class SlicesError(RuntimeError):
    """systemd refused or did not answer; the message says which slice and why."""


class BusError(Exception):
    """An error reply of systemd's: its D-Bus name (org.freedesktop.systemd1.UnitExists) and words."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.name, self.detail = name, detail


class SystemBus:
    """Calls to systemd's manager on the system bus, one at a time (pod-sync's threads share it);
    a lost connection (the bus restarted) is made again once. The unit tests' fake is
    services/pod_sync/fake_systemd.py."""

    def __init__(self, bus: str = "SYSTEM") -> None:
        self.bus = bus
        self._conn: DBusConnection | None = None
        self._lock = threading.Lock()

    def call(self, method: str, signature: str, body: tuple[Any, ...]) -> tuple[Any, ...]:
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._conn is None:
                        self._conn = open_dbus_connection(bus=self.bus)
                    reply = self._conn.send_and_get_reply(new_method_call(MANAGER, method, signature, body),
                                                          timeout=CALL_TIMEOUT)
                    return tuple(unwrap_msg(reply))
                except DBusErrorResponse as exc:
                    raise BusError(str(exc.name), " ".join(map(str, exc.data))) from None
                except (OSError, ConnectionError, TimeoutError) as exc:
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = None
                    if attempt == 2:
                        raise SlicesError(f"systemd did not answer {method} on the system bus: {exc}") from exc
        raise AssertionError("unreachable")


class SliceSettings(Protocol):
    """What a slice is given (PodCgroupConfig fits): None means no limit."""

    @property
    def cpu_shares(self) -> int: ...
    @property
    def cpu_quota(self) -> int | None: ...
    @property
    def memory_limit(self) -> int | None: ...
    @property
    def pids_limit(self) -> int | None: ...
    @property
    def memory_high(self) -> int | None: ...
    @property
    def memory_min(self) -> int | None: ...
    @property
    def memory_low(self) -> int | None: ...


def properties(settings: SliceSettings, cpu_period: int, weight: int, pids: bool = True,
               memory: bool = True, legacy: bool = False) -> list[tuple[str, tuple[str, Any]]]:
    """The unit properties of a slice's resources. pids=False / memory=False leave those limits
    as they are (a resize does not touch pids.max; a QoS tier has only a weight).

    legacy (cgroup v1) takes the properties runc's systemd manager gives there, as the kubelet's
    slices get them: CPUShares, since systemd would turn a CPUWeight into shares on a coarser
    scale (weight x 1024 / 100), and MemoryLimit; v1 has no memory.high, min or low."""
    quota = settings.cpu_quota
    props: list[tuple[str, tuple[str, Any]]] = [
        ("CPUShares", ("t", settings.cpu_shares)) if legacy else ("CPUWeight", ("t", weight)),
        ("CPUQuotaPerSecUSec", ("t", INFINITY if quota is None else quota * USEC_PER_SEC // cpu_period)),
    ]
    if quota is not None:
        props.append(("CPUQuotaPeriodUSec", ("t", cpu_period)))
    if memory:
        limit = INFINITY if settings.memory_limit is None else settings.memory_limit
        props.append(("MemoryLimit" if legacy else "MemoryMax", ("t", limit)))
        for prop, value in (("MemoryHigh", settings.memory_high), ("MemoryMin", settings.memory_min),
                            ("MemoryLow", settings.memory_low)):
            if value is not None and not legacy:
                props.append((prop, ("t", value)))
    if pids:
        props.append(("TasksMax", ("t", INFINITY if settings.pids_limit is None else settings.pids_limit)))
    return props


_ACCOUNTING = [("CPUAccounting", ("b", True)), ("MemoryAccounting", ("b", True)), ("TasksAccounting", ("b", True)),
               ("IOAccounting", ("b", True))]


class SystemdSlices:
    """The node's slices, through `bus` (systemd's manager)."""

    def __init__(self, cgroup_root: Path, bus: SystemBus | None = None) -> None:
        self.cgroup_root = cgroup_root
        self.bus = bus if bus is not None else SystemBus()
        # cgroup v1 (systemd's legacy or hybrid layout): each controller has its own tree.
        self.legacy = not (cgroup_root / "cgroup.controllers").is_file()

    def apply(self, name: str, props: list[tuple[str, tuple[str, Any]]], description: str) -> None:
        """Make the slice of cgroup `name` ("/kubepods/burstable/pod<uid>") with `props`, or
        change them when it runs already."""
        unit = slice_unit(name)
        start = [("Description", ("s", description)), ("DefaultDependencies", ("b", False)), *_ACCOUNTING, *props]
        try:
            self.bus.call("StartTransientUnit", "ssa(sv)a(sa(sv))", (unit, "replace", start, []))
        except BusError as exc:
            if exc.name != UNIT_EXISTS:
                raise SlicesError(f"systemd refused to start {unit}: {exc}") from None
            self._set(unit, props)
            if self._cgroup(name).is_dir():
                return
            # Known to systemd but stopped (a pod's slice, stopped and not yet collected; a
            # parent slice loaded implicitly): start it as it is now.
            self._start(unit)
        self._wait_for(name, unit)

    def change(self, unit: str, props: list[tuple[str, tuple[str, Any]]]) -> None:
        """Set `props` on a unit that runs already (one pykubelet did not make, as system.slice)."""
        self._set(unit, props)

    def _cgroup(self, name: str) -> Path:
        # On v1, the cpu tree's: every slice pykubelet starts asks for CPU accounting.
        base = self.cgroup_root / "cpu" if self.legacy else self.cgroup_root
        return base / on_host(name, SYSTEMD).lstrip("/")

    def _start(self, unit: str) -> None:
        try:
            self.bus.call("StartUnit", "ss", (unit, "replace"))
        except BusError as exc:
            raise SlicesError(f"systemd refused to start {unit}: {exc}") from None

    def _set(self, unit: str, props: list[tuple[str, tuple[str, Any]]]) -> None:
        try:
            self.bus.call("SetUnitProperties", "sba(sv)", (unit, True, props))
        except BusError as exc:
            raise SlicesError(f"systemd refused to change {unit}: {exc}") from None

    def _wait_for(self, name: str, unit: str) -> None:
        path = self._cgroup(name)
        deadline = time.monotonic() + START_TIMEOUT
        while not path.is_dir():
            if time.monotonic() > deadline:
                raise SlicesError(f"systemd started {unit} but its cgroup {path} did not appear in {START_TIMEOUT:.0f}s")
            time.sleep(0.02)

    def remove(self, name: str) -> None:
        """Stop the slice of cgroup `name` (its cgroup goes with it); gone already is fine."""
        unit = slice_unit(name)
        try:
            self.bus.call("StopUnit", "ss", (unit, "replace"))
        except BusError as exc:
            if exc.name != NO_SUCH_UNIT:
                log.warning("systemd did not stop %s: %s", unit, exc)
        except SlicesError as exc:
            log.warning("%s", exc)
