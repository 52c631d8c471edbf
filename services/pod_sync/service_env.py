"""Service environment variables, as the kubelet injects them (pkg/kubelet/envvars).

For every service with a cluster IP in the pod's namespace (when spec.enableServiceLinks, the
default) and always for the `kubernetes` service of the `default` namespace:
NAME_SERVICE_HOST, NAME_SERVICE_PORT, NAME_SERVICE_PORT_<PORTNAME> for named ports, and the
Docker-link style NAME_PORT, NAME_PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR}.
"""

from __future__ import annotations

from typing import Any, Iterable

MASTER_NAMESPACE = "default"
MASTER_SERVICES = frozenset({"kubernetes"})


def _var(name: str) -> str:
    return name.replace("-", "_").upper()


def _cluster_ip(svc: dict[str, Any]) -> str:
    ip = (svc.get("spec") or {}).get("clusterIP") or ""
    return "" if ip == "None" else ip


def _host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def from_service(svc: dict[str, Any]) -> dict[str, str]:
    ip = _cluster_ip(svc)
    ports = (svc.get("spec") or {}).get("ports") or []
    if not ip or not ports:
        return {}
    prefix = _var(svc["metadata"]["name"])
    env = {f"{prefix}_SERVICE_HOST": ip, f"{prefix}_SERVICE_PORT": str(ports[0]["port"])}
    for p in ports:
        if p.get("name"):
            env[f"{prefix}_SERVICE_PORT_{_var(p['name'])}"] = str(p["port"])
    for i, p in enumerate(ports):
        proto = (p.get("protocol") or "TCP").upper()
        url = f"{proto.lower()}://{_host_port(ip, p['port'])}"
        if i == 0:
            env[f"{prefix}_PORT"] = url
        base = f"{prefix}_PORT_{p['port']}_{proto}"
        env.update({base: url, f"{base}_PROTO": proto.lower(), f"{base}_PORT": str(p["port"]), f"{base}_ADDR": ip})
    return env


def service_env(services: Iterable[dict[str, Any]], namespace: str, enable_links: bool) -> dict[str, str]:
    """The variables for a pod in `namespace`; services without a cluster IP give none."""
    chosen: dict[str, dict[str, Any]] = {}
    for svc in services:
        meta = svc.get("metadata") or {}
        name, ns = meta.get("name", ""), meta.get("namespace", "")
        if not _cluster_ip(svc):
            continue
        if ns == MASTER_NAMESPACE and name in MASTER_SERVICES:
            chosen.setdefault(name, svc)
        elif ns == namespace and enable_links:
            chosen[name] = svc
    env: dict[str, str] = {}
    for name in sorted(chosen):
        env.update(from_service(chosen[name]))
    return env
