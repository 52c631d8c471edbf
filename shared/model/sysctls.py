"""Which sysctls a pod may set, as the kubelet decides: the safe set, plus what
allowedUnsafeSysctls lets in (names, or prefixes ending in '*'), and only sysctls of a namespace
the pod does not share with the host."""

from __future__ import annotations

from shared.model.podspec import SYSCTL_NAME, Pod

# Sysctls any pod may set (the kubelet 1.20's safe set); others need allowedUnsafeSysctls.
SAFE_SYSCTLS = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range")
# Which kernel namespace a sysctl lives in; one in none of them cannot be set per pod.
_SYSCTL_NAMESPACES = {"kernel.sem": "ipc"}
_SYSCTL_PREFIX_NAMESPACES = {"kernel.shm": "ipc", "kernel.msg": "ipc", "fs.mqueue.": "ipc", "net.": "net"}


def sysctl_namespace(name: str) -> str:
    """"ipc", "net", or "" for a sysctl that is not namespaced."""
    if name in _SYSCTL_NAMESPACES:
        return _SYSCTL_NAMESPACES[name]
    return next((ns for prefix, ns in _SYSCTL_PREFIX_NAMESPACES.items() if name.startswith(prefix)), "")


def forbidden_sysctl(pod: Pod, allowed_unsafe: list[str]) -> str:
    """Why the pod's sysctls cannot be set (the kubelet's words), or ''. allowed_unsafe: names
    and prefixes ending in '*' (allowedUnsafeSysctls)."""
    for s in pod.spec.securityContext.sysctls:
        allowed = s.name in SAFE_SYSCTLS or any(
            s.name == p or (p.endswith("*") and s.name.startswith(p[:-1])) for p in allowed_unsafe)
        if not allowed:
            return f'"{s.name}" not whitelisted'
        ns = sysctl_namespace(s.name)
        if (ns == "net" and pod.spec.hostNetwork) or (ns == "ipc" and pod.spec.hostIPC):
            return f'"{s.name}" not allowed with host {ns} enabled'
    return ""


def check_allowed_unsafe(patterns: list[str]) -> list[str]:
    """allowedUnsafeSysctls: each a sysctl name or a prefix ending in '*', of a namespaced sysctl."""
    for p in patterns:
        name = p[:-1] if p.endswith("*") else p
        if len(p) > 253 or not SYSCTL_NAME.match(name.rstrip(".")):
            raise ValueError(f"{p[:80]!r} is not a sysctl name or a prefix ending in '*'")
        if not sysctl_namespace(name):
            raise ValueError(f"the sysctl {p!r} is not known to be namespaced")
    return patterns
