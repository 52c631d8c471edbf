"""Where the node's cgroups live for each cgroup driver (cgroupDriver), as the kubelet names them.

pykubelet speaks of its cgroups by their cgroupfs names: "/kubepods", "/kubepods/burstable",
"/kubepods/burstable/pod<uid>". With the cgroupfs driver that is also where they are under the
cgroup mount. With the systemd driver each is a slice unit whose name joins the parts with "-"
(a "-" inside a part becomes "_", since systemd reads "-" as nesting): kubepods-burstable-pod<uid>
.slice, which systemd keeps at /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>
.slice. That expanded path is also what the runtime is given as a sandbox's cgroup parent (the
kubelet's CgroupName.ToSystemd).
"""

from __future__ import annotations

import re

CGROUPFS, SYSTEMD = "cgroupfs", "systemd"
DRIVERS = (CGROUPFS, SYSTEMD)
SLICE = ".slice"
_PART = re.compile(r"[A-Za-z0-9_.:-]+")


KUBEPODS = "/kubepods"


def kubepods_name(cgroup_root: str) -> str:
    """The pods' cgroup below cgroupRoot, as the kubelet places it: /kubepods for the default
    ("" or "/"), /custom/kubepods for "/custom"."""
    return "/" + "/".join([*_parts(cgroup_root), "kubepods"])


def _parts(name: str) -> list[str]:
    parts = [p for p in name.split("/") if p]
    for p in parts:
        if not _PART.fullmatch(p) or p in (".", ".."):
            raise ValueError(f"not a cgroup name: {name!r}")
    return parts


def slice_units(name: str) -> list[str]:
    """The slice units from the top down to `name`: "/kubepods/burstable" ->
    ["kubepods.slice", "kubepods-burstable.slice"]."""
    escaped = [p.replace("-", "_") for p in _parts(name)]
    return ["-".join(escaped[:i + 1]) + SLICE for i in range(len(escaped))]


def slice_unit(name: str) -> str:
    """The slice unit of `name`; the root is systemd's "-.slice"."""
    units = slice_units(name)
    return units[-1] if units else "-" + SLICE


def on_host(name: str, driver: str) -> str:
    """The cgroup's path under the cgroup mount (v2), or under each controller's (v1)."""
    if driver == CGROUPFS:
        parts = _parts(name)
        return "/" + "/".join(parts)
    if driver == SYSTEMD:
        return "/" + "/".join(slice_units(name))
    raise ValueError(f"unknown cgroup driver {driver!r}: {' or '.join(DRIVERS)}")


def container_cgroup(pod_cgroup: str, container_id: str) -> str:
    """A container's cgroup below its pod's, as containerd names it: the container's ID with the
    cgroupfs driver, a cri-containerd-<id>.scope unit with the systemd one."""
    if pod_cgroup.endswith(SLICE):
        return f"{pod_cgroup}/cri-containerd-{container_id}.scope"
    return f"{pod_cgroup}/{container_id}"


def slice_path(unit: str) -> str:
    """Where systemd keeps a slice unit's cgroup: "kubepods-burstable.slice" ->
    "/kubepods.slice/kubepods-burstable.slice" (systemd's slice expansion)."""
    if not unit.endswith(SLICE) or unit == "-" + SLICE:
        raise ValueError(f"not a slice unit below the root: {unit!r}")
    parts = unit.removesuffix(SLICE).split("-")
    if any(not p for p in parts):
        raise ValueError(f"not a slice unit name: {unit!r}")
    return "/" + "/".join("-".join(parts[:i + 1]) + SLICE for i in range(len(parts)))
