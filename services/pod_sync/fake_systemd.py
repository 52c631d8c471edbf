"""A fake of systemd's manager for the unit tests of the systemd cgroup driver: it keeps the
slices it was asked for with their properties and, as systemd does, makes each one's cgroup
directory and writes the files the properties set, under a temp root: one tree (cgroup v2, a
root with cgroup.controllers), or the cpu, memory and pids trees (cgroup v1) otherwise."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from services.pod_sync.systemd_slices import INFINITY, NO_SUCH_UNIT, UNIT_EXISTS, BusError
from shared.model.cgroup_names import slice_path

_FILES = {"CPUWeight": "cpu.weight", "MemoryMax": "memory.max", "MemoryHigh": "memory.high", "MemoryMin": "memory.min",
          "MemoryLow": "memory.low", "TasksMax": "pids.max"}
_V1_FILES = {"CPUShares": "cpu/cpu.shares", "MemoryLimit": "memory/memory.limit_in_bytes",
             "MemoryMax": "memory/memory.limit_in_bytes", "TasksMax": "pids/pids.max"}


class FakeSystemdBus:
    def __init__(self, cgroup_root: Path) -> None:
        self.root = cgroup_root
        self.units: dict[str, dict[str, Any]] = {}  # running slices and their properties
        self.calls: list[tuple[str, str]] = []      # (method, unit)
        self.refuse: dict[str, str] = {}            # unit -> error name to answer with

    def call(self, method: str, signature: str, body: tuple[Any, ...]) -> tuple[Any, ...]:
        unit = body[0]
        self.calls.append((method, unit))
        if unit in self.refuse:
            raise BusError(self.refuse[unit], f"refused {unit}")
        if method == "StartTransientUnit":
            if unit in self.units:
                raise BusError(UNIT_EXISTS, f"Unit {unit} was already loaded or has a fragment file.")
            self.units[unit] = {}
            self._set(unit, body[2])
        elif method == "SetUnitProperties":
            if unit not in self.units:
                raise BusError(NO_SUCH_UNIT, f"Unit {unit} not loaded.")
            self._set(unit, body[2])
        elif method == "StopUnit":
            if self.units.pop(unit, None) is None:
                raise BusError(NO_SUCH_UNIT, f"Unit {unit} not loaded.")
            for controller in ("cpu", "memory", "pids") if self._v1 else ("",):
                shutil.rmtree(self._dir(unit, controller), ignore_errors=True)
        else:
            raise BusError("org.freedesktop.DBus.Error.UnknownMethod", method)
        return ("/org/freedesktop/systemd1/job/1",)

    @property
    def _v1(self) -> bool:
        return not (self.root / "cgroup.controllers").is_file()

    def _dir(self, unit: str, controller: str = "") -> Path:
        base = self.root / controller if self._v1 else self.root
        return base / slice_path(unit).lstrip("/")

    def _set(self, unit: str, props: list[tuple[str, tuple[str, Any]]]) -> None:
        if self._v1:
            self._set_v1(unit, props)
            return
        d = self._dir(unit)
        d.mkdir(parents=True, exist_ok=True)
        for name, (_, value) in props:
            self.units[unit][name] = value
            if name in _FILES:
                (d / _FILES[name]).write_text("max" if value == INFINITY else str(value))
        quota = self.units[unit].get("CPUQuotaPerSecUSec")
        if quota is not None:
            period = self.units[unit].get("CPUQuotaPeriodUSec", 100_000)
            (d / "cpu.max").write_text(f"{'max' if quota == INFINITY else quota * period // 1_000_000} {period}")

    def _set_v1(self, unit: str, props: list[tuple[str, tuple[str, Any]]]) -> None:
        for controller in ("cpu", "memory", "pids"):
            self._dir(unit, controller).mkdir(parents=True, exist_ok=True)
        for name, (_, value) in props:
            self.units[unit][name] = value
            if name in _V1_FILES:
                controller, file = _V1_FILES[name].split("/")
                (self._dir(unit, controller) / file).write_text(
                    ("max" if name == "TasksMax" else "9223372036854771712") if value == INFINITY else str(value))
        quota = self.units[unit].get("CPUQuotaPerSecUSec")
        if quota is not None:
            period = self.units[unit].get("CPUQuotaPeriodUSec", 100_000)
            cpu = self._dir(unit, "cpu")
            (cpu / "cpu.cfs_period_us").write_text(str(period))
            (cpu / "cpu.cfs_quota_us").write_text("-1" if quota == INFINITY else str(quota * period // 1_000_000))
