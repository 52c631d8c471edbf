"""Turning a Pod into CRI sandbox and container configs, the way the kubelet fills them."""

from __future__ import annotations

from cri_api.v1 import api_pb2 as cri

from shared.cri import labels as L
from shared.config import NodeSettings
from shared.podspec import Container, Pod

_PROTOCOLS = {"TCP": cri.TCP, "UDP": cri.UDP, "SCTP": cri.SCTP}


def pod_hostname(pod: Pod) -> str:
    name = pod.spec.hostname or pod.metadata.name
    return name[:63].rstrip("-.")


def _dns_config(pod: Pod, settings: NodeSettings) -> cri.DNSConfig | None:
    """ClusterFirst with clusterDNS set gives the cluster's resolver; otherwise the host's."""
    k = settings.kubelet
    policy = pod.spec.dnsPolicy
    cluster_first = policy == "ClusterFirst" and not pod.spec.hostNetwork or policy == "ClusterFirstWithHostNet"
    if not (cluster_first and k.cluster_dns):
        return None  # runtime copies the host's resolv.conf
    searches = []
    if k.cluster_domain:
        ns = pod.metadata.namespace
        searches = [f"{ns}.svc.{k.cluster_domain}", f"svc.{k.cluster_domain}", k.cluster_domain]
    return cri.DNSConfig(servers=k.cluster_dns, searches=searches, options=["ndots:5"])


def _namespaces(pod: Pod) -> cri.NamespaceOption:
    return cri.NamespaceOption(network=cri.NODE if pod.spec.hostNetwork else cri.POD,
                               pid=cri.CONTAINER, ipc=cri.POD)


def pod_identity_labels(pod: Pod) -> dict[str, str]:
    return {L.POD_NAME: pod.metadata.name, L.POD_NAMESPACE: pod.metadata.namespace,
            L.POD_UID: pod.uid, L.MANAGED_BY: "true"}


def sandbox_config(pod: Pod, attempt: int, settings: NodeSettings) -> cri.PodSandboxConfig:
    m = pod.metadata
    ports = [
        cri.PortMapping(protocol=_PROTOCOLS[p.protocol], container_port=p.containerPort,
                        host_port=p.hostPort, host_ip=p.hostIP or "")
        for c in pod.spec.containers for p in c.ports if p.hostPort
    ]
    cfg = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name=m.name, uid=pod.uid, namespace=m.namespace, attempt=attempt),
        hostname=pod_hostname(pod),
        log_directory=L.pod_log_dir(settings.kubelet.pod_logs_dir, m.namespace, m.name, pod.uid),
        port_mappings=ports,
        labels={**m.labels, **pod_identity_labels(pod)},
        annotations=m.annotations,
        linux=cri.LinuxPodSandboxConfig(
            security_context=cri.LinuxSandboxSecurityContext(namespace_options=_namespaces(pod))),
    )
    dns = _dns_config(pod, settings)
    if dns is not None:
        cfg.dns_config.CopyFrom(dns)
    return cfg


def _field_ref(pod: Pod, path: str, pod_ip: str, node_name: str) -> str:
    m = pod.metadata
    simple = {"metadata.name": m.name, "metadata.namespace": m.namespace, "metadata.uid": pod.uid,
              "spec.nodeName": pod.spec.nodeName or node_name, "status.podIP": pod_ip,
              "spec.serviceAccountName": getattr(pod.spec, "serviceAccountName", "") or ""}
    if path in simple:
        return simple[path]
    for prefix, mapping in (("metadata.labels", m.labels), ("metadata.annotations", m.annotations)):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return mapping.get(path[len(prefix) + 2:-2], "")
    raise ValueError(f"unsupported fieldRef fieldPath {path!r}")


def container_env(pod: Pod, c: Container, pod_ip: str, node_name: str) -> list[cri.KeyValue]:
    out = []
    for e in c.env:
        if e.value is not None or not e.valueFrom:
            out.append(cri.KeyValue(key=e.name, value=e.value or ""))
        elif "fieldRef" in e.valueFrom:
            value = _field_ref(pod, e.valueFrom["fieldRef"].get("fieldPath", ""), pod_ip, node_name)
            out.append(cri.KeyValue(key=e.name, value=value))
        else:
            kind = next(iter(e.valueFrom))
            raise ValueError(f"env {e.name}: valueFrom.{kind} is not supported yet")
    return out


def container_config(pod: Pod, c: Container, attempt: int, image_ref: str, init: bool,
                     pod_ip: str, settings: NodeSettings) -> cri.ContainerConfig:
    cfg = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=c.name, attempt=attempt),
        image=cri.ImageSpec(image=image_ref, user_specified_image=c.image),
        command=c.command,
        args=c.args,
        working_dir=c.workingDir or "",
        envs=container_env(pod, c, pod_ip, settings.node_name),
        labels={**pod_identity_labels(pod), L.CONTAINER_NAME: c.name},
        annotations={
            L.RESTART_COUNT: str(attempt),
            L.TERMINATION_GRACE: str(pod.spec.terminationGracePeriodSeconds),
            L.TERMINATION_MESSAGE_PATH: c.terminationMessagePath,
            **({L.INIT_CONTAINER: "true"} if init else {}),
        },
        log_path=L.container_log_path(c.name, attempt),
        stdin=c.stdin,
        tty=c.tty,
        linux=cri.LinuxContainerConfig(
            security_context=cri.LinuxContainerSecurityContext(namespace_options=_namespaces(pod))),
    )
    return cfg
