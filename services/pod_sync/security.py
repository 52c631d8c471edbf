"""A pod's isolation as the kubelet asks the runtime for it: namespaces (hostNetwork, hostPID,
hostIPC, shareProcessNamespace), users and groups, runAsNonRoot, privileges, capabilities and
seccomp. (Which sysctls a pod may set: shared/model/sysctls.py.)"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from cri_api.v1 import api_pb2 as cri

from shared.model.cpusets import parse_cpuset
from shared.model.podspec import Container, Pod, SeccompProfile, SELinuxOptions

# What the kubelet has the runtime hide (masked) and make read-only in /proc and /sys of every
# container whose procMount is Default (pkg/securitycontext/util.go); none for Unmasked. The
# runtime leaves them as they are for a privileged container.
MASKED_PATHS = ("/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
                "/sys/devices/virtual/powercap")
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
POSSIBLE_CPUS = Path("/sys/devices/system/cpu/possible")


@functools.cache
def masked_paths() -> tuple[str, ...]:
    """MASKED_PATHS, and each possible CPU's thermal_throttle directory where the host has one."""
    try:
        cpus = sorted(parse_cpuset(POSSIBLE_CPUS.read_text().strip()))
    except (OSError, ValueError):
        cpus = []
    throttle = [p for cpu in cpus if Path(p := f"/sys/devices/system/cpu/cpu{cpu}/thermal_throttle").exists()]
    return (*MASKED_PATHS, *throttle)


def has_privileged_container(pod: Pod) -> bool:
    """The kubelet's HasPrivilegedContainer: init, app or ephemeral. The sandbox must be
    privileged for the runtime to run any privileged container in it."""
    return any(c.securityContext is not None and c.securityContext.privileged for c in pod.spec.all_containers)


def groups_policy(pod: Pod) -> "cri.SupplementalGroupsPolicy.ValueType":
    """securityContext.supplementalGroupsPolicy as CRI says it: Strict, else Merge (the runtime
    also gives the groups the image's /etc/group lists for the user)."""
    return cri.Strict if pod.spec.securityContext.supplementalGroupsPolicy == "Strict" else cri.Merge


def seccomp_dir(root_dir: Path) -> Path:
    """Where Localhost seccomp profiles live, as the kubelet's <root-dir>/seccomp."""
    return root_dir / "seccomp"


def supplemental_groups(pod: Pod) -> list[int]:
    """supplementalGroups, plus fsGroup: the group the pod's volume files belong to."""
    psc = pod.spec.securityContext
    groups = list(psc.supplementalGroups)
    if psc.fsGroup is not None and psc.fsGroup not in groups:
        groups.append(psc.fsGroup)
    return groups


def namespaces(pod: Pod) -> cri.NamespaceOption:
    pid = cri.NODE if pod.spec.hostPID else cri.POD if pod.spec.shareProcessNamespace else cri.CONTAINER
    return cri.NamespaceOption(network=cri.NODE if pod.spec.hostNetwork else cri.POD, pid=pid,
                               ipc=cri.NODE if pod.spec.hostIPC else cri.POD)


def _seccomp(profile: SeccompProfile | None, directory: Path) -> cri.SecurityProfile | None:
    if profile is None:
        return None  # the kubelet 1.20's default: the runtime's unconfined
    if profile.type == "RuntimeDefault":
        return cri.SecurityProfile(profile_type=cri.SecurityProfile.RuntimeDefault)
    if profile.type == "Unconfined":
        return cri.SecurityProfile(profile_type=cri.SecurityProfile.Unconfined)
    # The path was checked to be relative without '..' when the pod was read.
    return cri.SecurityProfile(profile_type=cri.SecurityProfile.Localhost,
                               localhost_ref=str(directory / (profile.localhostProfile or "")))


def sandbox_security_context(pod: Pod, seccomp_directory: Path) -> cri.LinuxSandboxSecurityContext:
    sc = cri.LinuxSandboxSecurityContext(namespace_options=namespaces(pod), privileged=has_privileged_container(pod))
    psc = pod.spec.securityContext
    if psc.runAsUser is not None:
        sc.run_as_user.value = psc.runAsUser
    if psc.runAsGroup is not None:
        sc.run_as_group.value = psc.runAsGroup
    sc.supplemental_groups.extend(supplemental_groups(pod))
    sc.supplemental_groups_policy = groups_policy(pod)
    profile = _seccomp(psc.seccompProfile, seccomp_directory)
    if profile is not None:
        sc.seccomp.CopyFrom(profile)
    if psc.seLinuxOptions is not None:
        sc.selinux_options.CopyFrom(_selinux(psc.seLinuxOptions))
    return sc


def _selinux(o: SELinuxOptions) -> cri.SELinuxOption:
    return cri.SELinuxOption(user=o.user, role=o.role, type=o.type, level=o.level)


def effective(pod: Pod, c: Container, field: str) -> Any:
    """A securityContext field as the container gets it: its own, else the pod's."""
    mine = getattr(c.securityContext, field, None) if c.securityContext is not None else None
    return mine if mine is not None else getattr(pod.spec.securityContext, field, None)


def needs_image_user(pod: Pod, c: Container) -> bool:
    """runAsNonRoot without a runAsUser: only the image can say who the container runs as."""
    return bool(effective(pod, c, "runAsNonRoot")) and effective(pod, c, "runAsUser") is None


def check_run_as_non_root(pod: Pod, c: Container, image: cri.Image | None) -> None:
    """The kubelet's runAsNonRoot check, with its words: ValueError (CreateContainerConfigError)
    when the container would run as root. An image that names no user runs as root."""
    if not effective(pod, c, "runAsNonRoot"):
        return
    who = f'(pod: "{pod.metadata.name}_{pod.metadata.namespace}({pod.uid})", container: {c.name})'
    run_as_user = effective(pod, c, "runAsUser")
    if run_as_user is not None:
        if run_as_user == 0:
            raise ValueError(f"container's runAsUser breaks non-root policy {who}")
        return
    uid = image.uid.value if image is not None and image.HasField("uid") else None
    username = image.username if image is not None else ""
    if uid is None and username:
        raise ValueError(f"container has runAsNonRoot and image has non-numeric user ({username}), "
                         f"cannot verify user is non-root {who}")
    if uid is None or uid == 0:
        raise ValueError(f"container has runAsNonRoot and image will run as root {who}")


def container_security_context(pod: Pod, c: Container, seccomp_directory: Path,
                               seccomp_default: bool = False) -> cri.LinuxContainerSecurityContext:
    """seccomp_default (seccompDefault): RuntimeDefault for a container that names no profile,
    neither its own nor the pod's, as the kubelet does."""
    csc = c.securityContext
    unmasked = csc is not None and csc.procMount == "Unmasked"
    sc = cri.LinuxContainerSecurityContext(namespace_options=namespaces(pod),
                                           masked_paths=() if unmasked else masked_paths(),
                                           readonly_paths=() if unmasked else READONLY_PATHS)
    run_as_user, run_as_group = effective(pod, c, "runAsUser"), effective(pod, c, "runAsGroup")
    if run_as_user is not None:
        sc.run_as_user.value = run_as_user
    if run_as_group is not None:
        sc.run_as_group.value = run_as_group
    sc.supplemental_groups.extend(supplemental_groups(pod))
    sc.supplemental_groups_policy = groups_policy(pod)
    if csc is not None:
        sc.privileged = bool(csc.privileged)
        sc.readonly_rootfs = bool(csc.readOnlyRootFilesystem)
        if csc.allowPrivilegeEscalation is False:
            sc.no_new_privs = True
        if csc.capabilities is not None:
            sc.capabilities.add_capabilities.extend(csc.capabilities.add)
            sc.capabilities.drop_capabilities.extend(csc.capabilities.drop)
    profile = _seccomp(effective(pod, c, "seccompProfile"), seccomp_directory)
    if profile is None and seccomp_default:
        profile = cri.SecurityProfile(profile_type=cri.SecurityProfile.RuntimeDefault)
    if profile is not None:
        sc.seccomp.CopyFrom(profile)
    selinux = effective(pod, c, "seLinuxOptions")
    if selinux is not None:
        sc.selinux_options.CopyFrom(_selinux(selinux))
    return sc
