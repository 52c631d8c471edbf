"""Turning a Pod into CRI sandbox and container configs, the way the kubelet fills them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from cri_api.v1 import api_pb2 as cri

from services.pod_sync import env_files
from services.pod_sync.dns import dns_config
from services.pod_sync.env_sources import EnvObjects
from services.pod_sync.etc_hosts import ETC_HOSTS
from services.pod_sync.exec_strings import ExecStrings
from services.pod_sync.memory_qos import (
    MEMORY_HIGH,
    MEMORY_OOM_GROUP,
    MemoryProtection,
    MemoryThrottling,
    container_memory_high,
    container_memory_protection,
)
from services.pod_sync.resize import annotation as resize_annotation
from services.pod_sync.resources import CGROUP_ROOT, CPU_PERIOD, container_resources, pod_cgroup_parent
from services.pod_sync.security import container_security_context, sandbox_security_context, seccomp_dir
from services.pod_sync.systemd_slices import SystemdSlices
from shared.config.settings import NodeSettings
from shared.host.node_dirs import private_dir
from shared.host.safe_paths import beneath
from shared.host.swap import NodeSwap
from shared.model import recursive_read_only
from shared.model.cgroup_names import KUBEPODS, on_host
from shared.model.downward_api import metadata_field, resource_field
from shared.model.podspec import ENV_NAME, Container, EphemeralContainer, Pod
from shared.model.qos import qos_class
from shared.runtime.cri import labels as L


class SubPathMounter(Protocol):
    def mount(self, pod_uid: str, volume: str, volume_path: Path, container: str, index: int,
              sub_path: str) -> Path: ...


_PROTOCOLS = {"TCP": cri.TCP, "UDP": cri.UDP, "SCTP": cri.SCTP}


@dataclass(frozen=True)
class NodeFacts:
    """What container configs need to know about the node; read once at start."""

    name: str
    ip: str
    cpu_millicores: int
    memory_bytes: int
    oom_floor: int | None  # lowest oom_score_adj allowed here, None when unrestricted
    pods_dir: Path         # <root>/pods: per-pod files such as termination-message logs
    cgroup_root: Path = CGROUP_ROOT  # where pod cgroups are made (services/pod_sync/pod_cgroup.py)
    kubepods: str = KUBEPODS  # the pods' cgroup, below cgroupRoot (cgroupfs name)
    # The systemd cgroup driver's connection to systemd; None with the cgroupfs driver.
    cgroup_slices: SystemdSlices | None = None
    seccomp_default: bool = False    # seccompDefault: RuntimeDefault for containers naming no profile
    labels: dict[str, str] = field(default_factory=dict)  # --node-labels, matched by admission
    # memoryManagerPolicy Static: the NUMA nodes (a single-NUMA host's "0") Guaranteed containers'
    # memory is pinned to; "": not pinned.
    guaranteed_mems: str = ""
    # The node's swap and memorySwap.swapBehavior (services/pod_sync/swap.py); None: no swap settings.
    swap: NodeSwap | None = None
    # memoryThrottlingFactor on cgroup v2 (services/pod_sync/memory_qos.py); None: no memory.high.
    memory_throttling: MemoryThrottling | None = None
    # memoryReservationPolicy on cgroup v2 (memory_qos.py); None (cgroup v1): no memory.min/low.
    memory_protection: MemoryProtection | None = None
    cpu_cfs_quota: bool = True  # cpuCFSQuota: false gives CPU limits no CFS quota (containers and pods)
    cpu_cfs_period: int = CPU_PERIOD  # cpuCFSQuotaPeriod, microseconds (containers and pods)
    # cgroup v2 without singleProcessOOMKill: a container's OOM kill takes all of its processes.
    oom_group: bool = False


def linux_resources(pod: Pod, c: Container, qos: str, node: NodeFacts, cpuset: str = "") -> cri.LinuxContainerResources:
    """A container's CPU, memory, swap and OOM settings on this node, at creation and on each update."""
    res = container_resources(c, qos, node.memory_bytes, node.oom_floor, pod, cpuset, node.guaranteed_mems, node.swap,
                              node.cpu_cfs_quota, node.cpu_cfs_period)
    if node.memory_throttling is not None and (high := container_memory_high(c, pod, node.memory_throttling)):
        res.unified[MEMORY_HIGH] = str(high)
    if node.memory_protection is not None:
        res.unified.update(container_memory_protection(c, pod, node.memory_protection))
    if node.oom_group:
        res.unified[MEMORY_OOM_GROUP] = "1"
    return res


def pod_hostname(pod: Pod) -> str:
    """The kubelet's: hostnameOverride, else hostname, else the pod's name; at most 63 characters,
    without a trailing '-' or '.' once cut."""
    name = pod.spec.hostnameOverride or pod.spec.hostname or pod.metadata.name
    return name[:63].rstrip("-.")


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
        # A host-network pod shares the node's UTS namespace: it keeps the node's hostname.
        hostname="" if pod.spec.hostNetwork else pod_hostname(pod),
        log_directory=L.pod_log_dir(settings.kubelet.pod_logs_dir, m.namespace, m.name, pod.uid),
        port_mappings=ports,
        labels={**m.labels, **pod_identity_labels(pod)},
        annotations=m.annotations,
        linux=cri.LinuxPodSandboxConfig(
            # The cgroup's path for the driver: /kubepods/... or /kubepods.slice/... (the runtime's
            # driver matches: containerd's SystemdCgroup).
            cgroup_parent=on_host(pod_cgroup_parent(pod, qos_class(pod), settings.kubelet.kubepods),
                                  settings.kubelet.cgroup_driver),
            security_context=sandbox_security_context(pod, seccomp_dir(settings.root_dir)),
            sysctls={x.name: x.value for x in pod.spec.securityContext.sysctls}),
    )
    dns = dns_config(pod, settings)
    if dns is not None:
        cfg.dns_config.CopyFrom(dns)
    return cfg


def _field_ref(pod: Pod, path: str, pod_ip: str, node: NodeFacts) -> str:
    status = {"spec.nodeName": pod.spec.nodeName or node.name, "status.podIP": pod_ip,
              "status.podIPs": pod_ip, "status.hostIP": node.ip, "status.hostIPs": node.ip,
              "spec.serviceAccountName": pod.spec.serviceAccountName or ""}
    if path in status:
        return status[path]
    return metadata_field(pod, path)


def container_path(pod: Pod, c: Container) -> str:
    """The container's field path in errors: spec.containers[1], spec.initContainers[0]."""
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for index, other in enumerate(getattr(pod.spec, kind)):
            if other.name == c.name:
                return f"spec.{kind}[{index}]"
    return f"container {c.name}"


def container_env(pod: Pod, c: Container, pod_ip: str, node: NodeFacts, objects: EnvObjects | None = None,
                  warn: Callable[[str, str], None] | None = None,
                  strings: ExecStrings | None = None, volumes: dict[str, Any] | None = None) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom first, then env (a later
    value overrides; $(NAME) expands from what is defined so far, then the service variables),
    then the service variables nothing overrode. warn(reason, message) gets the envFrom keys
    skipped for being invalid names. Every value is counted in `strings` (exec_strings.py): an
    environment past the limits is an ExecStringsTooLarge naming the variable, never built.
    volumes: the pod's pod_volumes rows, where a fileKeyRef's file is read (env_files.py)."""
    objects = objects or EnvObjects()
    strings = strings or ExecStrings(container_path(pod, c))
    ns = pod.metadata.namespace
    services = dict(objects.services)
    env: dict[str, str] = {}

    def lookup(name: str) -> str | None:
        value = env.get(name)
        return services.get(name) if value is None else value

    for index, src in enumerate(c.envFrom):
        kind, ref, data = (("configMap", src.configMapRef, objects.config_maps) if src.configMapRef is not None
                           else ("secret", src.secretRef, objects.secrets))
        if ref is None:
            raise ValueError(f"envFrom[{index}] names neither a configMap nor a secret")
        values = data.get(ref.name)
        if values is None:
            if ref.optional:
                continue
            raise ValueError(f'{kind.lower()}s "{ref.name}" not found')
        invalid = []
        for key, value in values.items():
            name = src.prefix + key
            if not ENV_NAME.match(name):
                invalid.append(name)
                continue
            env[name] = strings.env(name, value, f"envFrom[{index}]")
        if invalid and warn is not None:
            warn("InvalidEnvironmentVariableNames",
                 f"Keys [{', '.join(sorted(invalid))}] from the EnvFrom {kind} {ns}/{ref.name} were skipped "
                 f"since they are considered invalid environment variable names.")
    for index, e in enumerate(c.env):
        if e.value or not e.valueFrom:
            value = strings.env(e.name, e.value or "", f"env[{index}]", lookup)
        else:
            found = (_file_value(e.valueFrom["fileKeyRef"], volumes or {}) if "fileKeyRef" in e.valueFrom
                     else _value_from(pod, c, e.valueFrom, pod_ip, node, objects))
            if found is None:
                continue  # an optional key or object that is missing
            value = strings.env(e.name, found, f"env[{index}]")
        services.pop(e.name, None)
        env[e.name] = value
    for name, value in services.items():
        if name not in env:
            env[name] = strings.env(name, value, "env (service variable)")
    return env


def _value_from(pod: Pod, c: Container, src: dict[str, Any], pod_ip: str, node: NodeFacts, objects: EnvObjects) -> str | None:
    if "fieldRef" in src:
        return _field_ref(pod, src["fieldRef"].get("fieldPath", ""), pod_ip, node)
    if "resourceFieldRef" in src:
        return resource_field(pod, c, src["resourceFieldRef"], node.cpu_millicores, node.memory_bytes)
    kind, ref = next(iter(src.items()))
    label, data = ("ConfigMap", objects.config_maps) if kind == "configMapKeyRef" else ("Secret", objects.secrets)
    optional = bool(ref.get("optional"))
    values = data.get(ref["name"])
    if values is None:
        if optional:
            return None
        raise ValueError(f'{label.lower()}s "{ref["name"]}" not found')
    if ref["key"] not in values:
        if optional:
            return None
        raise ValueError(f"couldn't find key {ref['key']} in {label} {pod.metadata.namespace}/{ref['name']}")
    value: str = values[ref["key"]]
    return value


def _file_value(ref: dict[str, Any], volumes: dict[str, Any]) -> str | None:
    """A fileKeyRef's value, as the kubelet reads it: None for an optional key the file lacks
    (or sets empty); ValueError in the kubelet's words otherwise."""
    row = volumes.get(ref["volumeName"])
    if row is None or not row.ready:
        raise ValueError(f'cannot find the volume "{ref["volumeName"]}" referenced by FileKeyRef')
    volume = Path(row.host_path)
    try:
        value = env_files.parse_env(env_files.read_env_file(volume, ref["path"]), ref["key"])
    except env_files.EnvFileError as exc:
        raise ValueError(f"couldn't parse env file: {exc}") from None
    if value == "":
        if ref.get("optional"):
            return None
        raise ValueError(f'environment variable key "{ref["key"]}" not found in file '
                         f'"{volume / ref["path"].lstrip("/")}"')
    return value


def termination_log_path(node: NodeFacts, pod: Pod, c: Container, attempt: int) -> Path:
    return beneath(node.pods_dir, pod.uid, "containers", c.name, f"{attempt}.termination-log")


# A volumeMount's mountPropagation as the kubelet asks the runtime for it (translateMountPropagation):
# private unless the pod says otherwise. Bidirectional needs a privileged container (podspec.py)
# and, as HostToContainer, the root dir on a shared mount (shared/host/propagation.py).
PROPAGATION = {None: cri.PROPAGATION_PRIVATE, "None": cri.PROPAGATION_PRIVATE,
               "HostToContainer": cri.PROPAGATION_HOST_TO_CONTAINER, "Bidirectional": cri.PROPAGATION_BIDIRECTIONAL}

# The kubelet always mounts these read-only: their content is managed by the node agent.
_ALWAYS_READ_ONLY = ("configMap", "secret", "downwardAPI", "projected")


def volume_mounts(pod: Pod, c: Container, volumes: dict[str, Any], subpaths: SubPathMounter | None,
                  images: dict[str, cri.ImageSpec] | None = None, rro_supported: bool = False) -> list[cri.Mount]:
    """CRI bind mounts for the container's volumeMounts; `volumes` are the pod's pod_volumes rows
    (all ready: pod-sync starts nothing before), each with its mountPropagation (PROPAGATION).
    A subPath is mounted from its own bind mount, made safely (shared/host/subpath.py).
    `images` are the image volumes' pulled images (image_volumes.py): the runtime mounts those,
    read-only, a subPath of one included. rro_supported: the runtime's default handler makes
    recursive read-only mounts (a mount's recursiveReadOnly is resolved against it)."""
    kinds = {v.name: v.kind for v in pod.spec.volumes}
    mounts = []
    for index, m in enumerate(c.volumeMounts):
        try:
            recursive = recursive_read_only.resolve(m, rro_supported)
        except recursive_read_only.RecursiveReadOnlyError as exc:
            raise ValueError(f"failed to resolve recursive read-only mode: {exc}") from None
        row = volumes.get(m.name)
        if row is None or not row.ready:
            raise ValueError(f"volume {m.name!r} is not set up")
        if kinds.get(m.name) == "image":
            image = (images or {}).get(m.name)
            if image is None:
                raise ValueError(f"image volume {m.name!r} has no pulled image")
            mounts.append(cri.Mount(container_path=m.mountPath, image=image, image_sub_path=m.subPath,
                                    readonly=True, recursive_read_only=recursive,
                                    propagation=PROPAGATION[m.mountPropagation]))
            continue
        host = row.host_path
        if m.subPath:
            if subpaths is None:
                raise ValueError(f"subPath {m.subPath!r} of volume {m.name!r}: no subPath mounter")
            host = str(subpaths.mount(pod.uid, m.name, Path(row.host_path), c.name, index, m.subPath))
        mounts.append(cri.Mount(container_path=m.mountPath, host_path=host,
                                readonly=m.readOnly or kinds.get(m.name) in _ALWAYS_READ_ONLY,
                                recursive_read_only=recursive, propagation=PROPAGATION[m.mountPropagation]))
    return mounts


def container_config(pod: Pod, c: Container, attempt: int, image_ref: str, init: bool,
                     pod_ip: str, node: NodeFacts, volumes: dict[str, Any] | None = None,
                     objects: EnvObjects | None = None,
                     warn: Callable[[str, str], None] | None = None,
                     etc_hosts: Path | None = None,
                     subpaths: SubPathMounter | None = None,
                     target_id: str | None = None, cpuset: str = "",
                     images: dict[str, cri.ImageSpec] | None = None,
                     rro_supported: bool = False) -> cri.ContainerConfig:
    """etc_hosts: the pod's managed hosts file, bind-mounted at /etc/hosts (etc_hosts.py);
    subpaths: makes the bind mounts of subPath volumeMounts; target_id: the container whose
    process namespace an ephemeral container joins; images: the image volumes' images;
    rro_supported: the runtime makes recursive read-only mounts."""
    strings = ExecStrings(container_path(pod, c))
    env = container_env(pod, c, pod_ip, node, objects, warn, strings, volumes)
    command = [strings.arg(x, f"command[{i}]", env.get) for i, x in enumerate(c.command)]
    args = [strings.arg(x, f"args[{i}]", env.get) for i, x in enumerate(c.args)]
    qos = qos_class(pod)
    term_log = termination_log_path(node, pod, c, attempt)
    private_dir(term_log.parent)
    term_log.touch()
    # As the kubelet: world-writable, so a container running as any user can leave its message.
    term_log.chmod(0o666)
    cfg = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=c.name, attempt=attempt),
        image=cri.ImageSpec(image=image_ref, user_specified_image=c.image),
        command=command,
        args=args,
        working_dir=c.workingDir or "",
        envs=[cri.KeyValue(key=k, value=v) for k, v in env.items()],
        # The termination log last, as the kubelet: mounted over anything else at that path, it
        # is the file the container writes its message to and the one read back (runtime_view.py).
        mounts=[*volume_mounts(pod, c, volumes or {}, subpaths, images, rro_supported),
                *([cri.Mount(container_path=ETC_HOSTS, host_path=str(etc_hosts))] if etc_hosts else []),
                cri.Mount(container_path=c.terminationMessagePath, host_path=str(term_log))],
        labels={**pod_identity_labels(pod), L.CONTAINER_NAME: c.name},
        annotations={
            L.RESTART_COUNT: str(attempt),
            L.CONTAINER_HASH: L.container_hash(c.image),
            L.TERMINATION_GRACE: str(pod.spec.terminationGracePeriodSeconds),
            L.TERMINATION_MESSAGE_PATH: c.terminationMessagePath,
            L.TERMINATION_MESSAGE_POLICY: c.terminationMessagePolicy,
            **({L.INIT_CONTAINER: "true"} if init else {}),
            **({} if isinstance(c, EphemeralContainer) else {L.RESOURCES: resize_annotation(pod, c)}),
        },
        log_path=L.container_log_path(c.name, attempt),
        stdin=c.stdin,
        stdin_once=c.stdinOnce,
        tty=c.tty,
        linux=cri.LinuxContainerConfig(
            resources=linux_resources(pod, c, qos, node, cpuset),
            security_context=container_security_context(pod, c, seccomp_dir(node.pods_dir.parent),
                                                        node.seccomp_default)),
    )
    ns = cfg.linux.security_context.namespace_options
    if target_id and ns.pid == cri.CONTAINER:
        # A pod whose containers share one process namespace (or the node's) needs no target.
        ns.pid, ns.target_id = cri.TARGET, target_id
    return cfg
