"""A cgroup's block I/O per device, as cAdvisor reads it for the kubelet's /metrics/cadvisor
(container_fs_{reads,writes}_bytes_total, container_fs_{reads,writes}_total,
container_blkio_device_usage_total).

v1: the first of the bfq, cfq and throttle files (recursive first) that has a device line, as
runc's blkio reader takes them; "MAJ:MIN Op N" lines, the closing "Total N" skipped. v2: io.stat's
rbytes/wbytes (bytes read and written) and rios/wios (operations), and, where the iocost
controller weighs the device (io.cost.qos), cost.usage, cost.wait, cost.indebt and cost.indelay
(microseconds; container_fs_io_cost_*_seconds_total). Devices are by major:minor; node-api names
them (services/node_api/hostfs.py block_device_names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from shared.host.cgroups import CgroupReader

# (bytes file, operations file) of cgroup v1's blkio controller, in the order runc tries them.
V1_FILES = (("blkio.bfq.io_service_bytes_recursive", "blkio.bfq.io_serviced_recursive"),
            ("blkio.bfq.io_service_bytes", "blkio.bfq.io_serviced"),
            ("blkio.io_service_bytes_recursive", "blkio.io_serviced_recursive"),
            ("blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_serviced_recursive"),
            ("blkio.throttle.io_service_bytes", "blkio.throttle.io_serviced"))
V2_KEYS = {"rbytes": ("bytes", "Read"), "wbytes": ("bytes", "Write"),
           "rios": ("ops", "Read"), "wios": ("ops", "Write")}
COST_KEYS = ("usage", "wait", "indebt", "indelay")  # io.stat's cost.KEY, in microseconds

Device = tuple[int, int]


@dataclass
class DeviceIO:
    major: int
    minor: int
    service_bytes: dict[str, int] = field(default_factory=dict)  # operation -> bytes
    serviced: dict[str, int] = field(default_factory=dict)  # operation -> count
    cost: dict[str, int] = field(default_factory=dict)  # COST_KEYS -> microseconds (v2 with iocost)


def _device(text: str) -> Device | None:
    major, _, minor = text.partition(":")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


def _v1_lines(path: Path) -> list[tuple[Device, str, int]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3 and (dev := _device(fields[0])) is not None and fields[2].isdigit():
            out.append((dev, fields[1], int(fields[2])))
    return out


def read_io(reader: CgroupReader, cgroup: str) -> list[DeviceIO] | None:
    """Per device, by major:minor; None for a name that is not a cgroup's."""
    try:
        d = reader.path("io" if reader.version == 2 else "blkio", cgroup)
    except ValueError:
        return None
    devices: dict[Device, DeviceIO] = {}

    def entry(dev: Device) -> DeviceIO:
        return devices.setdefault(dev, DeviceIO(*dev))

    if reader.version == 2:
        try:
            text = (d / "io.stat").read_text()
        except OSError:
            return []
        for line in text.splitlines():
            fields = line.split()
            if not fields or (dev := _device(fields[0])) is None:
                continue
            for pair in fields[1:]:
                key, _, raw = pair.partition("=")
                if key in V2_KEYS and raw.isdigit():
                    kind, op = V2_KEYS[key]
                    (entry(dev).service_bytes if kind == "bytes" else entry(dev).serviced)[op] = int(raw)
                elif key.startswith("cost.") and key[5:] in COST_KEYS and raw.isdigit():
                    entry(dev).cost[key[5:]] = int(raw)
        return list(devices.values())
    for bytes_file, ops_file in V1_FILES:
        lines = _v1_lines(d / bytes_file)
        if not lines:
            continue
        for dev, op, value in lines:
            entry(dev).service_bytes[op] = value
        for dev, op, value in _v1_lines(d / ops_file):
            entry(dev).serviced[op] = value
        break
    return list(devices.values())
