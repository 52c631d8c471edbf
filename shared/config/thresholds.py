"""Eviction thresholds and reserved resources, parsed from the kubelet's config fields.

evictionHard/evictionSoft map a signal to a quantity ("100Mi") or a percentage of the signal's
capacity ("10%"); a signal is "met" when what is available falls below it. Errors name the field
and the entry, as the kubelet's do. Used by eviction (the decisions), pod-sync (allocatable for
admission) and status-reporter (Node allocatable).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.model.durations import to_seconds
from shared.model.quantity import parse_quantity

# Every signal the kubelet knows, and the resource it starves (what ranking and messages name).
SIGNAL_RESOURCES = {
    "memory.available": "memory",
    "allocatableMemory.available": "memory",
    "nodefs.available": "ephemeral-storage",
    "nodefs.inodesFree": "inodes",
    "imagefs.available": "ephemeral-storage",
    "imagefs.inodesFree": "inodes",
    "pid.available": "pids",
}
# The node condition each signal drives.
SIGNAL_CONDITIONS = {
    "memory.available": "MemoryPressure",
    "allocatableMemory.available": "MemoryPressure",
    "nodefs.available": "DiskPressure",
    "nodefs.inodesFree": "DiskPressure",
    "imagefs.available": "DiskPressure",
    "imagefs.inodesFree": "DiskPressure",
    "pid.available": "PIDPressure",
}
# The pressure conditions, in the order the kubelet reports and names them.
PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")
MEMORY_SIGNALS = frozenset(s for s, r in SIGNAL_RESOURCES.items() if r == "memory")
# The kubelet's evictionHard default. Setting evictionHard replaces it as a whole, as in 1.20.
DEFAULT_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%",
                         "nodefs.inodesFree": "5%", "imagefs.available": "15%", "imagefs.inodesFree": "5%"}
RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")


@dataclass(frozen=True)
class Amount:
    """A quantity, or a fraction of some capacity."""

    quantity: int | None = None
    fraction: float | None = None

    def of(self, capacity: int) -> int:
        if self.quantity is not None:
            return self.quantity
        return int(capacity * (self.fraction or 0.0))


@dataclass(frozen=True)
class Threshold:
    signal: str
    value: Amount
    hard: bool
    written: str = ""  # as in the config, for views and messages
    grace_period: float = 0.0  # soft thresholds: how long the signal must stay met
    min_reclaim: Amount = Amount(quantity=0)

    @property
    def resource(self) -> str:
        return SIGNAL_RESOURCES[self.signal]

    @property
    def condition(self) -> str:
        return SIGNAL_CONDITIONS[self.signal]


def parse_amount(text: object, what: str) -> Amount:
    if not isinstance(text, (str, int)) or isinstance(text, bool):
        raise ValueError(f"{what}: {text!r} is not a quantity or a percentage")
    s = str(text).strip()
    if s.endswith("%"):
        try:
            pct = float(s[:-1])
        except ValueError:
            raise ValueError(f"{what}: {s!r} is not a percentage") from None
        if not 0 <= pct <= 100:
            raise ValueError(f"{what}: percentage {s!r} must be between 0% and 100%")
        return Amount(fraction=pct / 100)
    try:
        q = parse_quantity(s)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    return Amount(quantity=int(q))


def _signal(name: str, field: str) -> str:
    if name not in SIGNAL_RESOURCES:
        raise ValueError(f"{field}: unsupported eviction signal {name!r} (known: {', '.join(SIGNAL_RESOURCES)})")
    return name


def check_signal_map(values: dict[str, object], field: str) -> dict[str, object]:
    """Validate one of evictionHard/evictionSoft/evictionMinimumReclaim."""
    for name, value in values.items():
        parse_amount(value, f"{field}[{_signal(name, field)}]")
    return values


def check_grace_periods(values: dict[str, object], field: str) -> dict[str, float]:
    out = {}
    for name, value in values.items():
        try:
            seconds = to_seconds(value)
        except ValueError as exc:
            raise ValueError(f"{field}[{_signal(name, field)}]: {exc}") from None
        if seconds < 0:
            raise ValueError(f"{field}[{name}]: must not be negative")
        out[name] = seconds
    return out


def parse_thresholds(hard: dict[str, str], soft: dict[str, str], soft_grace: dict[str, float],
                     min_reclaim: dict[str, str]) -> list[Threshold]:
    reclaim = {k: parse_amount(v, f"evictionMinimumReclaim[{k}]") for k, v in min_reclaim.items()}
    out = [Threshold(s, parse_amount(v, f"evictionHard[{s}]"), True, str(v),
                     min_reclaim=reclaim.get(s, Amount(quantity=0))) for s, v in hard.items()]
    for s, v in soft.items():
        if s not in soft_grace:
            raise ValueError(f"evictionSoft[{s}]: needs a grace period in evictionSoftGracePeriod")
        out.append(Threshold(s, parse_amount(v, f"evictionSoft[{s}]"), False, str(v), soft_grace[s],
                             reclaim.get(s, Amount(quantity=0))))
    return out


def check_reserved(values: dict[str, object], field: str) -> dict[str, object]:
    for name, value in values.items():
        if name not in RESERVABLE:
            raise ValueError(f"{field}: cannot reserve {name!r} (only {', '.join(RESERVABLE)})")
        try:
            parse_quantity(value)  # type: ignore[arg-type]
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{field}[{name}]: {exc}") from None
    return values


def hard_eviction_reservation(thresholds: list[Threshold], memory_capacity: int, disk_capacity: int) -> dict[str, int]:
    """What the hard memory.available and nodefs.available thresholds keep out of allocatable."""
    out = {"memory": 0, "ephemeral-storage": 0}
    for t in thresholds:
        if t.hard and t.signal == "memory.available":
            out["memory"] = t.value.of(memory_capacity)
        elif t.hard and t.signal == "nodefs.available":
            out["ephemeral-storage"] = t.value.of(disk_capacity)
    return out
