"""The node's configuration: the kubelet's own KubeletConfiguration file plus pykubelet settings.

The file format is kubelet.config.k8s.io/v1beta1 so an existing kubelet config works here.
Fields pykubelet implements are typed and validated; the kubelet's other fields are accepted only
at the kubelet's default (shared/config/refused.py), any other value of them is an error naming
the field and what pykubelet does instead; anything else is an error naming it.
Command-line flags override the file, as with the kubelet.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import socket
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from shared.config.cpu_policy_options import CPUPolicyOptions, parse_cpu_policy_options
from shared.config.defaults import drop_zero_values
from shared.config.feature_gates import GATES
from shared.config.flags import (
    FlagError,
    add_kubelet_flags,
    apply_config_flags,
    parsed_values,
    refused_flags,
    warn_deprecated,
)
from shared.config.refused import refused_settings
from shared.config.server import ServerConfig
from shared.config.thresholds import (
    DEFAULT_EVICTION_HARD,
    Threshold,
    check_grace_periods,
    check_reserved,
    check_signal_map,
    parse_thresholds,
)
from shared.config.topology_policy_options import check_topology_policy_options
from shared.model import safe_yaml
from shared.model.cgroup_names import SLICE, kubepods_name, slice_path
from shared.model.cpusets import CPUSetError, parse_cpuset
from shared.model.durations import format_duration, parse_duration, to_seconds
from shared.model.go_text import go_quote
from shared.model.image_names import allowlist_pattern
from shared.model.ip import ip_address
from shared.model.podspec import DNS1123_SUBDOMAIN
from shared.model.quantity import to_bytes
from shared.model.sysctls import check_allowed_unsafe
from shared.model.version import PREVIOUS_MINOR

# A cgroup path from the root: "/" then parts, none of them "." or "..".
# imagePullCredentialsVerificationPolicy's values, in the kubelet's order.
PULL_VERIFICATION_POLICIES = ("NeverVerify", "NeverVerifyPreloadedImages", "NeverVerifyAllowlistedImages",
                              "AlwaysVerify")
# hairpinMode's values (the kubelet's HairpinNone, HairpinVeth, PromiscuousBridge).
HAIRPIN_MODES = ("none", "hairpin-veth", "promiscuous-bridge")
_CGROUP_PATH = re.compile(r"(/(?!\.{1,2}(?:/|$))[A-Za-z0-9_.@:-]+)+")

log = logging.getLogger(__name__)


def _check_reserved_slice(field: str, cgroup: str) -> None:
    """With the systemd driver a reserved cgroup is a slice unit, named by where systemd keeps it
    (the kubelet takes the unit from the last part): /system.slice, /kube.slice/kube-reserved.slice.
    A path elsewhere would name one unit and check another cgroup."""
    unit = cgroup.rsplit("/", 1)[-1]
    if not unit.endswith(SLICE) or unit == "-" + SLICE:
        raise ValueError(f"{field} {cgroup!r}: with cgroupDriver systemd it names a slice unit, as /system.slice")
    try:
        kept = slice_path(unit)
    except ValueError as exc:
        raise ValueError(f"{field} {cgroup!r}: {exc}") from None
    if kept != cgroup:
        raise ValueError(f"{field} {cgroup!r}: systemd keeps the slice {unit} at {kept}; give that path")

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"
# Below this, a process could not hold its store, bus and admin sockets and its logs open.
MIN_OPEN_FILES = 1024
# Fields the kubelet refuses below zero: the file's name and the flag its message names.
NOT_NEGATIVE = {"registry_pull_qps": ("registryPullQPS", "registry-qps"),
                "registry_burst": ("registryBurst", "registry-burst"),
                "pods_per_core": ("podsPerCore", "pods-per-core"),
                "max_open_files": ("maxOpenFiles", "max-open-files")}


class ConfigError(ValueError):
    """A configuration problem; the message names the field and what to do."""


class CrashLoopBackOffConfig(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    # KubeletCrashLoopBackOffMax: the cap of the restart back-off (kubelet default 300s).
    max_container_restart_period: float = 300.0
    # pykubelet extension: the first back-off step (the kubelet hard-codes 10s).
    initial_container_restart_period: float = 10.0

    @field_validator("max_container_restart_period", "initial_container_restart_period", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return to_seconds(v)


_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token


class MemoryReservation(BaseModel):
    """One entry of reservedMemory: what the memory manager keeps back on a NUMA node."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    numa_node: int = Field(ge=0)
    limits: dict[str, str | int]

    @field_validator("limits")
    @classmethod
    def _limits(cls, v: dict[str, str | int]) -> dict[str, str | int]:
        for name, value in v.items():
            if name != "memory":
                raise ValueError(f"{name}: only memory is implemented by pykubelet (no hugepages)")
            to_bytes(value)  # ValueError: not a quantity
        return v


class ShutdownGracePeriodByPodPriority(BaseModel):
    """How long the pods of this priority and up (to the next entry) get when the node shuts down."""

    model_config = ConfigDict(extra="forbid")
    priority: int = Field(ge=-(2**31), le=2**31 - 1)
    shutdown_grace_period_seconds: int = Field(default=0, alias="shutdownGracePeriodSeconds", ge=0)


class MemorySwapConfiguration(BaseModel):
    """memorySwap: what swap containers may use (services/pod_sync/swap.py)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    swap_behavior: str = ""

    @field_validator("swap_behavior")
    @classmethod
    def _behavior(cls, v: str) -> str:
        if v not in ("", "NoSwap", "LimitedSwap"):  # the kubelet's check, in its words
            raise ValueError(f'invalid configuration: memorySwap.swapBehavior "{v}" must be one of: "", '
                             '"LimitedSwap" or "NoSwap"')
        return v


class UserNamespacesConfig(BaseModel):
    """userNamespaces: the host IDs each pod with hostUsers: false gets
    (services/pod_sync/user_namespaces.py)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    ids_per_pod: int | None = Field(default=None, alias="idsPerPod")

    @field_validator("ids_per_pod")
    @classmethod
    def _ids_per_pod(cls, v: int | None) -> int | None:
        if v is None:
            return v
        if v < 65536:  # the kubelet's checks, in its words
            raise ValueError("invalid configuration: userNamespaces.idsPerPod must not be less than 65536")
        if v % 65536 != 0:
            raise ValueError("invalid configuration: userNamespaces.idsPerPod must be a multiple of 65536")
        if v > 2**32 - 1:
            raise ValueError(f"invalid configuration: userNamespaces.idsPerPod must not be more than {2**32 - 1}")
        return v

    @property
    def ids(self) -> int:
        return self.ids_per_pod or 65536


class TracingConfig(BaseModel):
    """tracing: the kubelet's OpenTelemetry spans (its pod syncs and runtime calls), exported over
    OTLP/gRPC without TLS, as the kubelet's (shared/tracing/spans.py)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    # Unset: the OTLP gRPC default, localhost:4317. A gRPC target: host:port, dns:///host:port,
    # unix:///path or unix-abstract:name.
    endpoint: str | None = None
    # Of a million new traces, how many are sampled; 0 (unset): only those a caller sampled.
    sampling_rate_per_million: int | None = Field(default=None, alias="samplingRatePerMillion")

    @field_validator("sampling_rate_per_million")
    @classmethod
    def _rate(cls, v: int | None) -> int | None:
        if v is not None and v < 0:  # the kubelet's checks, in its words
            raise ValueError(f"tracing.samplingRatePerMillion: Invalid value: {v}: sampling rate must be positive")
        if v is not None and v > 1_000_000:
            raise ValueError(f"tracing.samplingRatePerMillion: Invalid value: {v}: sampling rate per million must "
                             "be less than or equal to one million")
        return v

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if any(ch.isspace() or ord(ch) < 0x20 for ch in v):
            raise ValueError(f"tracing.endpoint: {v!r} has whitespace or control characters")
        # The kubelet's check: without "//" the endpoint is a dns target; it must parse as a URL.
        target = v if "//" in v else f"dns://{v}"
        try:
            url = urlsplit(target)
            url.port  # noqa: B018 (parses the port, as Go's url.Parse does)
        except ValueError as exc:
            raise ValueError(f"tracing.endpoint: Invalid value: {target!r}: {exc}") from None
        if url.scheme not in ("dns", "unix", "unix-abstract"):
            raise ValueError(f"tracing.endpoint: Invalid value: {target!r}: unsupported scheme: {url.scheme}.  Options "
                             "are none, dns, unix, or unix-abstract.  See "
                             "https://github.com/grpc/grpc/blob/master/doc/naming.md")
        if "//" in v and url.scheme == "dns" and url.netloc:
            # dns://SERVER/host:port asks a given DNS server: Go's gRPC does, Python's does not.
            raise ValueError(f"tracing.endpoint: {v!r} names a DNS server (dns://SERVER/...), which pykubelet's "
                             "exporter cannot use; give host:port or dns:///host:port")
        return v

    @property
    def target(self) -> str:
        return self.endpoint or "localhost:4317"

    @property
    def rate(self) -> float:
        return (self.sampling_rate_per_million or 0) / 1_000_000


class Taint(BaseModel):
    """A taint the Node is registered with (registerWithTaints), checked as the API server
    checks a Node's taints."""

    model_config = ConfigDict(extra="forbid")
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        prefix, _, name = v.rpartition("/")
        if not (name and len(name) <= 63 and _NAME.match(name)) or (
                prefix and not (len(prefix) <= 253 and DNS1123_SUBDOMAIN.match(prefix))):
            raise ValueError(f"{v!r} is not a qualified name (an optional DNS subdomain and '/', then at most "
                             "63 letters, digits, '-', '_' or '.')")
        return v

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        if v and not (len(v) <= 63 and _NAME.match(v)):
            raise ValueError(f"{v!r} is not a valid label value (at most 63 letters, digits, '-', '_' or '.')")
        return v


DEFAULT_LOG_OPTIONS: dict[str, Any] = {"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}}


class LoggingConfig(BaseModel):
    """The kubelet's `logging` (component-base LoggingConfiguration): the services' log format
    and verbosity (shared/process/log_format.py). Records are written as they happen, so any
    flushFrequency holds; the rest of the kubelet's options have no counterpart and are refused
    unless at their default."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    format: Literal["text", "json"] = "text"
    flush_frequency: float = 5.0
    # klog's -v: 0-3 log what pykubelet logs at INFO, 4 and more its DEBUG detail too.
    verbosity: int = Field(default=0, ge=0)
    vmodule: list[Any] = Field(default_factory=list)
    # The kubelet's effective options: no buffering, one stream (what pykubelet does).
    options: dict[str, Any] = Field(default_factory=lambda: dict(DEFAULT_LOG_OPTIONS))

    @field_validator("flush_frequency", mode="before")
    @classmethod
    def _flush(cls, v: Any) -> float:
        return to_seconds(v)

    @field_validator("vmodule")
    @classmethod
    def _vmodule(cls, v: list[Any]) -> list[Any]:
        if v:
            raise ValueError("per-file verbosity is not implemented by pykubelet (one verbosity for every "
                             "service); remove it")
        return v

    @field_validator("options")
    @classmethod
    def _options(cls, v: dict[str, Any]) -> dict[str, Any]:
        at_default = {"infoBufferSize": ("0", ""), "splitStream": ("False",)}
        for name, opts in v.items():
            if name not in ("json", "text") or not isinstance(opts, dict) or any(
                    str(val) not in at_default.get(k, ()) for k, val in opts.items()):
                raise ValueError(f"{name}: only infoBufferSize \"0\" (no buffering) and splitStream false (one "
                                 "stream) are implemented by pykubelet")
        return dict(DEFAULT_LOG_OPTIONS)  # every option is at its default: the same as none given


def _camel_field(info: ValidationInfo) -> str:
    """The file's (camelCase) name of the field a field validator is validating."""
    assert info.field_name is not None  # always set for a field validator
    return to_camel(info.field_name)


# What the kubelet 1.37 at its default feature gates says of these fields when set at all.
_REFUSED_WHEN_SET = {
    "run_once": "invalid configuration: runOnce (--runOnce) true, Runonce mode has been deprecated and should not be "
                "set",
    "default_pod_sysctls": "invalid configuration: DefaultPodSysctls feature gate is required for Kubelet "
                           "configuration option defaultPodSysctls",
}


def _percentage_problem(value: str) -> str:
    """The kubelet's parsePercentage (cm/container_manager.go): what is wrong with a qosReserved
    value, "" when nothing."""
    if not value.endswith("%"):
        return f"percentage expected, got '{value}'"
    number = value.rstrip("%")
    if not re.fullmatch(r"[+-]?[0-9]+", number) or abs(int(number)) >= 2**63:
        return f"invalid number in percentage '{value}'"
    if not 0 <= int(number) <= 100:
        return "percentage must be between 0 and 100"
    return ""


class KubeletConfiguration(ServerConfig):
    """The implemented subset of KubeletConfiguration, with the kubelet's defaults."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: str = KIND
    static_pod_path: str = ""
    pod_logs_dir: str = "/var/log/pods"
    pod_cidr: str = Field(default="", alias="podCIDR")
    cluster_dns: list[str] = Field(default_factory=list, alias="clusterDNS")
    cluster_domain: str = ""
    container_runtime_endpoint: str = "unix:///run/containerd/containerd.sock"
    # The CRI ImageService's endpoint; empty: containerRuntimeEndpoint's (shared/runtime/cri/client.py).
    image_service_endpoint: str = ""
    sync_frequency: float = 60.0
    file_check_frequency: float = 20.0
    # Static pods from a URL too (services/pod_sync/url_source.py), fetched every httpCheckFrequency.
    static_pod_url: str = Field(default="", alias="staticPodURL")
    static_pod_url_header: dict[str, list[str]] = Field(default_factory=dict, alias="staticPodURLHeader")
    http_check_frequency: float = 20.0
    # The CPU manager (services/pod_sync/cpu_manager.py): exclusive CPUs for whole-CPU Guaranteed
    # containers under `static`; reservedSystemCPUs are never given out and, when set, are the
    # node's CPU reservation (they replace systemReserved and kubeReserved cpu).
    # The node's healthz (services/node_api/healthz.py); port 0: none.
    healthz_port: int = Field(default=10248, ge=0, le=65535)
    healthz_bind_address: str = "127.0.0.1"
    # Each gate only at the kubelet 1.37's default for it (shared/config/feature_gates.py).
    feature_gates: dict[str, bool] = Field(default_factory=dict)
    cpu_manager_policy: Literal["none", "static"] = Field(default="none", alias="cpuManagerPolicy")
    reserved_system_cpus: str = Field(default="", alias="reservedSystemCPUs")
    cpu_manager_reconcile_period: float = Field(default=10.0, alias="cpuManagerReconcilePeriod")
    # The kubelet's iptables chains for other components (services/network/iptables_chains.py).
    # The two marks are only checked (0-31), as the kubelet 1.37 does: nothing uses them since
    # kube-proxy makes its own KUBE-MARK-* chains.
    make_iptables_util_chains: StrictBool = Field(default=True, alias="makeIPTablesUtilChains")
    iptables_masquerade_bit: int = Field(default=14, alias="iptablesMasqueradeBit")
    iptables_drop_bit: int = Field(default=15, alias="iptablesDropBit")
    # How the volume service learns of a change of a configMap or secret that pods' volumes use
    # (services/volume/api_objects.py): Watch, Cache (the Node's TTL annotation) or Get.
    config_map_and_secret_change_detection_strategy: str = Field(
        default="Watch", alias="configMapAndSecretChangeDetectionStrategy")
    # Checked as the kubelet 1.37 checks it (only the previous minor version), and then changes
    # nothing: no metric of the kubelet 1.37, nor of pykubelet, is hidden.
    show_hidden_metrics_for_version: str = Field(default="", alias="showHiddenMetricsForVersion")
    # As the kubelet 1.37 with its default feature gates takes them: runOnce true refused (the
    # mode is gone), defaultPodSysctls refused (its gate, DefaultPodSysctls, is off), qosReserved
    # parsed and then unused (its gate, QOSReserved, is off).
    run_once: StrictBool = Field(default=False, alias="runOnce")
    default_pod_sysctls: dict[str, str] = Field(default_factory=dict, alias="defaultPodSysctls")
    qos_reserved: dict[str, str] = Field(default_factory=dict, alias="qosReserved")
    # The static policy's options (shared/config/cpu_policy_options.py): full-pcpus-only and
    # strict-cpu-reservation; the others are refused.
    cpu_manager_policy_options: dict[str, str] = Field(default_factory=dict, alias="cpuManagerPolicyOptions")
    # The topology and memory managers, for a single-NUMA host (shared/host/checks.py refuses
    # anything but their defaults on a host with more NUMA nodes): every resource is on NUMA
    # node 0, so each topology policy admits what `none` admits, and the memory manager's Static
    # policy pins Guaranteed containers' memory to node 0 (cpuset.mems) with reservedMemory
    # accounting for the node's memory reservation.
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"] = "none"
    topology_manager_scope: Literal["container", "pod"] = "container"
    # Checked as the kubelet checks them (shared/config/topology_policy_options.py); on the one
    # NUMA node the policies run on here they change nothing, as in the kubelet.
    topology_manager_policy_options: dict[str, str] = Field(default_factory=dict,
                                                            alias="topologyManagerPolicyOptions")
    memory_manager_policy: Literal["None", "Static"] = "None"
    reserved_memory: list[MemoryReservation] = Field(default_factory=list)
    max_pods: int = 110
    # pids.max of every pod's cgroup (services/pod_sync/pod_cgroup.py); -1: no limit.
    pod_pids_limit: int = Field(default=-1, ge=-1)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    # RuntimeDefault seccomp for containers that name no profile (services/pod_sync/security.py).
    seccomp_default: StrictBool = False
    # The Node as registered in cluster mode (services/status_reporter/node_agent.py).
    register_node: StrictBool = True
    register_with_taints: list[Taint] = Field(default_factory=list)
    provider_id: str = Field(default="", alias="providerID")
    # The node's resolver file: dnsPolicy Default pods get it, ClusterFirst pods its search
    # domains after the cluster's (services/pod_sync/dns.py); "" for none.
    resolv_conf: str = "/etc/resolv.conf"
    # What the node checks of its host before it starts (shared/host/checks.py).
    fail_swap_on: StrictBool = True
    # NoSwap (the default) or LimitedSwap for containers (services/pod_sync/swap.py).
    memory_swap: MemorySwapConfiguration = Field(default_factory=MemorySwapConfiguration)
    # The IDs of pods with hostUsers: false (services/pod_sync/user_namespaces.py); None: 65536 each.
    user_namespaces: UserNamespacesConfig | None = None
    # OpenTelemetry spans of the services' pod syncs and runtime calls; None: none are made.
    tracing: TracingConfig | None = None
    protect_kernel_defaults: StrictBool = False
    # How pod and QoS cgroups are made (shared/model/cgroup_names.py): directories under /kubepods, or
    # slice units through systemd's D-Bus API (kubepods.slice and below) with the runtime told to
    # match (containerd's SystemdCgroup).
    cgroup_driver: Literal["cgroupfs", "systemd"] = "cgroupfs"
    # The cgroup the pods' /kubepods goes below ("" and "/": the root); it must exist already.
    cgroup_root: str = ""
    # memory.high for containers (and pods with pod-level resources) on cgroup v2: request +
    # factor x (limit - request) (services/pod_sync/memory_qos.py). Unset: none, as the kubelet 1.37.
    memory_throttling_factor: float | None = None
    # cgroup v2 memory protection from memory requests (services/pod_sync/memory_qos.py):
    # TieredReservation gives Guaranteed pods memory.min and Burstable pods memory.low; None
    # (the kubelet's default) sets neither and resets what a former TieredReservation left.
    memory_reservation_policy: str = "None"
    # The kubelet 1.35+ defaults this to true; pykubelet runs on cgroup v1 unless told not to.
    fail_cgroup_v1: StrictBool = Field(default=False, alias="failCgroupV1")
    runtime_request_timeout: float = 120.0
    # On cgroup v2, false or unset (the kubelet's default there) sets memory.oom.group on every
    # container's cgroup: an OOM kill takes the container's whole process group, not one process.
    # cgroup v1 has no such setting (one process is killed); false is refused there.
    single_process_oom_kill: StrictBool | None = Field(default=None, alias="singleProcessOOMKill")
    # Image pulls a second and at once (services/pod_sync/images.py); 0 qps: no limit.
    registry_pull_qps: float = Field(default=5, alias="registryPullQPS")
    registry_burst: int = 10
    # GET /logs/ on the kubelet API: the node's /var/log (services/node_api/system_logs.py), when
    # enableDebuggingHandlers is true too.
    enable_system_log_handler: StrictBool = True
    # GET /logs/?query=SERVICE: a service's journal, or its file in /var/log
    # (services/node_api/log_query.py); needs enableSystemLogHandler.
    enable_system_log_query: StrictBool = False
    # false: CPU limits get no CFS quota (containers and pod cgroups); shares still follow requests.
    cpu_cfs_quota: StrictBool = Field(default=True, alias="cpuCFSQuota")
    # false: the node reports no ephemeral-storage (capacity, allocatable; a pod requesting some
    # is not admitted) and enforces no local storage limit (emptyDir sizeLimit, ephemeral-storage
    # limits), as the kubelet.
    local_storage_capacity_isolation: StrictBool = True
    # true (cgroup v1): the kernel signals when memory use crosses a memory eviction threshold and
    # eviction runs at once (services/eviction/memcg_notifier.py); cgroup v2 has no such signal.
    kernel_memcg_notification: StrictBool = False
    # Which images already on the node a pod must show the credentials of before it may use them
    # (services/pod_sync/pull_records.py, the KubeletEnsureSecretPulledImages feature).
    image_pull_credentials_verification_policy: str = "NeverVerifyPreloadedImages"
    preloaded_images_verification_allowlist: list[str] = Field(default_factory=list)
    # How a pod reaches itself through a service or host port on pykubelet's bridge network
    # (services/network/cni_config.py): promiscuous-bridge and hairpin-veth put each pod's bridge
    # port in hairpin mode, none does not. A network another CNI agent writes is its own.
    hairpin_mode: str = "promiscuous-bridge"
    # The CFS period (cpu.cfs_period_us, cpu.max) of containers and pod cgroups, seconds; CPU
    # limits are quotas over it.
    cpu_cfs_quota_period: float = Field(default=0.1, alias="cpuCFSQuotaPeriod")
    # With podsPerCore set, the node's pod capacity is maxPods or podsPerCore per CPU, the lower.
    pods_per_core: int = 0
    # The kubelet's own OOM score and open-files limit, taken by every pykubelet process at start
    # (shared/process/self_limits.py) and by the systemd units (OOMScoreAdjust=, LimitNOFILE=).
    oom_score_adj: int = -999
    max_open_files: int = 1000000
    # pykubelet pulls in parallel by default (the kubelet serializes unless told otherwise).
    serialize_image_pulls: StrictBool = False
    max_parallel_image_pulls: int | None = 5
    container_log_max_size: str = "10Mi"
    container_log_max_files: int = 5
    # How often logs are checked for rotation, and how many containers' logs rotate at once
    # (services/pod_sync/log_rotation.py).
    container_log_monitor_interval: float = Field(default=10.0, ge=3.0)
    container_log_max_workers: int = Field(default=1, ge=1)
    kube_api_qps: float = Field(default=50, alias="kubeAPIQPS", gt=0)
    kube_api_burst: int = Field(default=100, alias="kubeAPIBurst", ge=1)
    node_status_update_frequency: float = 10.0
    # How many of the node's images (largest first) the Node's status.images lists; -1 for all.
    node_status_max_images: int = Field(default=50, ge=-1)
    node_status_report_frequency: float = 300.0
    node_lease_duration_seconds: int = Field(default=40, ge=1)
    event_record_qps: float = Field(default=50, alias="eventRecordQPS", ge=0)
    event_burst: int = Field(default=100, ge=1)
    crash_loop_back_off: CrashLoopBackOffConfig = Field(default_factory=CrashLoopBackOffConfig)
    # How often volume usage (kubelet_volume_stats_*) is measured.
    volume_stats_agg_period: float = 60.0
    # The kubelet API's serving certificate from a kubernetes.io/kubelet-serving CSR (cluster mode).
    server_tls_bootstrap: StrictBool = Field(default=False, alias="serverTLSBootstrap")
    # The client certificate renewed through kube-apiserver-client-kubelet CSRs (cluster mode).
    rotate_certificates: StrictBool = False
    # Eviction and node allocatable (shared.config.thresholds parses the maps).
    eviction_hard: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_EVICTION_HARD))
    # true: the config file's evictionHard keeps the default thresholds of the signals it does not
    # name (merged as the file is read, before the flags, as the kubelet does: merge_default_eviction).
    merge_default_eviction_settings: StrictBool = False
    eviction_soft: dict[str, str] = Field(default_factory=dict)
    eviction_soft_grace_period: dict[str, float] = Field(default_factory=dict)
    eviction_max_pod_grace_period: int = Field(default=0, ge=0)
    eviction_minimum_reclaim: dict[str, str] = Field(default_factory=dict)
    eviction_pressure_transition_period: float = 300.0
    kube_reserved: dict[str, str] = Field(default_factory=dict)
    system_reserved: dict[str, str] = Field(default_factory=dict)
    enforce_node_allocatable: list[str] = Field(default_factory=lambda: ["pods"])
    # The existing cgroups (cgroupfs paths such as /system.slice) that enforceNodeAllocatable's
    # system-reserved and kube-reserved limit to systemReserved and kubeReserved.
    system_reserved_cgroup: str = ""
    kube_reserved_cgroup: str = ""
    # The cgroup the node agent's processes run in (shared/host/kubelet_cgroup.py); "": where started.
    kubelet_cgroups: str = ""
    image_gc_high_threshold_percent: int = Field(default=85, alias="imageGCHighThresholdPercent", ge=0, le=100)
    image_gc_low_threshold_percent: int = Field(default=80, alias="imageGCLowThresholdPercent", ge=0, le=100)
    image_minimum_gc_age: float = Field(default=120.0, alias="imageMinimumGCAge")
    # Unused images older than this go whatever the disk usage; 0: no age limit.
    image_maximum_gc_age: float = Field(default=0.0, alias="imageMaximumGCAge", ge=0)
    # Graceful node shutdown (services/eviction/node_shutdown.py): a delay lock taken from
    # systemd-logind, and the node's pods stopped, lowest priority first, before it is let go.
    shutdown_grace_period: float = 0.0
    shutdown_grace_period_critical_pods: float = 0.0
    shutdown_grace_period_by_pod_priority: list[ShutdownGracePeriodByPodPriority] = Field(default_factory=list)
    # Sysctls pods may set beyond the safe set: names, or prefixes ending in '*'.
    allowed_unsafe_sysctls: list[str] = Field(default_factory=list)

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, v: str) -> str:
        if v != API_VERSION:
            raise ValueError(f"must be {API_VERSION!r}")
        return v

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v != KIND:
            raise ValueError(f"must be {KIND!r}")
        return v

    @field_validator("max_parallel_image_pulls")
    @classmethod
    def _parallel(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError("must be at least 1 (or unset for no limit)")
        return v

    @field_validator("container_log_max_size")
    @classmethod
    def _log_size(cls, v: str) -> str:
        from shared.model.quantity import to_bytes

        try:
            if to_bytes(v) < 1024:
                raise ValueError("must be at least 1Ki")
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("registry_pull_qps", "registry_burst", "pods_per_core", "max_open_files")
    @classmethod
    def _not_negative(cls, v: float, info: ValidationInfo) -> float:
        if v < 0:
            field, flag = NOT_NEGATIVE[str(info.field_name)]
            raise ValueError(f"{field} (--{flag}) {v:g} must not be a negative number")
        return v

    def inert_settings(self) -> list[str]:
        """Fields set to something else than their default that change nothing on this node, as
        they change nothing in the kubelet 1.37 at its default feature gates (or, for the topology
        manager's options, on a host with one NUMA node): each named, with why, so that the start
        says so instead of taking them silently."""
        inert = {
            "qosReserved": (self.qos_reserved, "its feature gate, QOSReserved, is off"),
            "topologyManagerPolicyOptions": (self.topology_manager_policy_options,
                                             "the topology manager's policies run here on one NUMA node only, where "
                                             "these options weigh nothing"),
            "showHiddenMetricsForVersion": (self.show_hidden_metrics_for_version,
                                            "no metric of the kubelet 1.37, nor of pykubelet, is hidden"),
            "iptablesMasqueradeBit": (self.iptables_masquerade_bit != 14, "nothing uses the mark since kube-proxy "
                                                                          "makes its own chains"),
            "iptablesDropBit": (self.iptables_drop_bit != 15, "nothing uses the mark since kube-proxy makes its "
                                                              "own chains"),
        }
        return [f"{name} is set but changes nothing, as in the kubelet 1.37: {why}"
                for name, (value, why) in inert.items() if value]

    def pod_capacity(self, cores: int) -> int:
        """The node's pod capacity, as the kubelet's: maxPods, capped at podsPerCore x cores when
        podsPerCore is set. What admission counts against and the Node's capacity.pods."""
        return min(self.max_pods, self.pods_per_core * cores) if self.pods_per_core > 0 else self.max_pods

    @field_validator("oom_score_adj")
    @classmethod
    def _oom_score_adj(cls, v: int) -> int:
        if not -1000 <= v <= 1000:
            raise ValueError(f"oomScoreAdj (--oom-score-adj) {v} must be between -1000 and 1000, inclusive")
        return v

    @field_validator("max_open_files")
    @classmethod
    def _max_open_files(cls, v: int) -> int:
        if v < MIN_OPEN_FILES:
            raise ValueError(f"maxOpenFiles (--max-open-files) {v} is below {MIN_OPEN_FILES}: pykubelet's processes "
                             "could not open their store, sockets and logs (0 is the default, 1000000)")
        return v

    @field_validator("container_log_max_files")
    @classmethod
    def _log_files(cls, v: int) -> int:
        if v < 2:
            raise ValueError("must be at least 2")
        return v

    @model_validator(mode="after")
    def _pull_settings(self) -> "KubeletConfiguration":
        if self.serialize_image_pulls and "max_parallel_image_pulls" in self.model_fields_set \
                and self.max_parallel_image_pulls not in (None, 1):
            raise ValueError("maxParallelImagePulls must be unset or 1 when serializeImagePulls is true")
        if self.image_maximum_gc_age and self.image_minimum_gc_age >= self.image_maximum_gc_age:
            raise ValueError(f"imageMaximumGCAge {format_duration(self.image_maximum_gc_age)} must be greater "
                             f"than imageMinimumGCAge {format_duration(self.image_minimum_gc_age)}")
        return self

    @field_validator("eviction_hard", "eviction_soft", "eviction_minimum_reclaim", mode="before")
    @classmethod
    def _signal_maps(cls, v: Any, info: ValidationInfo) -> dict[str, str]:
        if not isinstance(v, dict):
            raise ValueError("must be a map of eviction signal to quantity or percentage")
        return {str(k): str(val) for k, val in check_signal_map(v, _camel_field(info)).items()}

    @field_validator("eviction_soft_grace_period", mode="before")
    @classmethod
    def _grace_periods(cls, v: Any) -> dict[str, float]:
        if not isinstance(v, dict):
            raise ValueError("must be a map of eviction signal to duration")
        return check_grace_periods(v, "evictionSoftGracePeriod")

    @field_validator("kube_reserved", "system_reserved", mode="before")
    @classmethod
    def _reserved(cls, v: Any, info: ValidationInfo) -> dict[str, str]:
        if not isinstance(v, dict):
            raise ValueError("must be a map of resource name to quantity")
        return {str(k): str(val) for k, val in check_reserved(v, _camel_field(info)).items()}

    @field_validator("allowed_unsafe_sysctls")
    @classmethod
    def _unsafe_sysctls(cls, v: list[str]) -> list[str]:
        return check_allowed_unsafe(v)

    @field_validator("enforce_node_allocatable")
    @classmethod
    def _enforce(cls, v: list[str]) -> list[str]:
        for item in v:
            if item not in ("pods", "system-reserved", "kube-reserved", "none"):
                raise ValueError(f"unknown value {item!r} (use pods, system-reserved, kube-reserved or none)")
        if "none" in v and len(v) > 1:
            raise ValueError("'none' cannot be combined with other values")
        return v

    @field_validator("memory_throttling_factor")
    @classmethod
    def _memory_throttling_factor(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v <= 1.0:
            raise ValueError(f"invalid configuration: memoryThrottlingFactor {v} must be greater than 0 and less "
                             "than or equal to 1.0")
        return v

    @field_validator("memory_reservation_policy")
    @classmethod
    def _memory_reservation_policy(cls, v: str) -> str:
        if v not in ("None", "TieredReservation"):
            raise ValueError(f'invalid configuration: option "{v}" specified for memoryReservationPolicy. Valid '
                             'options are "None" or "TieredReservation"')
        return v

    @field_validator("cgroup_root")
    @classmethod
    def _cgroup_root(cls, v: str) -> str:
        # It becomes the path below /sys/fs/cgroup that every pod cgroup is made under.
        if v not in ("", "/") and not _CGROUP_PATH.fullmatch(v):
            raise ValueError(f"{v!r} is not a cgroup path: give it from the cgroup root, as /pykubelet (letters, "
                             "digits and . _ - @ : in each part; no '.' or '..' parts)")
        return v

    @model_validator(mode="after")
    def _systemd_cgroup_root(self) -> "KubeletConfiguration":
        if self.cgroup_driver == "systemd" and self.cgroup_root not in ("", "/"):
            raise ValueError(f"cgroupRoot {self.cgroup_root!r}: with cgroupDriver systemd pykubelet keeps "
                             "kubepods.slice at the root; leave cgroupRoot unset or use cgroupDriver cgroupfs")
        return self

    @property
    def kubepods(self) -> str:
        """The pods' cgroup (cgroupfs name): /kubepods, or below cgroupRoot."""
        return kubepods_name(self.cgroup_root)

    @field_validator("system_reserved_cgroup", "kube_reserved_cgroup", "kubelet_cgroups")
    @classmethod
    def _reserved_cgroup(cls, v: str) -> str:
        # It becomes a path below /sys/fs/cgroup that limits are written to.
        if v and not _CGROUP_PATH.fullmatch(v):
            raise ValueError(f"{v!r} is not a cgroup path: give it from the cgroup root, as /system.slice or "
                             "/kube/reserved (letters, digits and . _ - @ : in each part; no '.' or '..' parts)")
        return v

    @model_validator(mode="after")
    def _enforced_cgroups(self) -> "KubeletConfiguration":
        for key, field, cgroup in (("system-reserved", "systemReservedCgroup (--system-reserved-cgroup)",
                                    self.system_reserved_cgroup),
                                   ("kube-reserved", "kubeReservedCgroup (--kube-reserved-cgroup)",
                                    self.kube_reserved_cgroup)):
            if key not in self.enforce_node_allocatable:
                continue
            if not cgroup:
                raise ValueError(f'invalid configuration: {field} must be specified when "{key}" contained in '
                                 'enforceNodeAllocatable (--enforce-node-allocatable)')
            if self.cgroup_driver == "systemd":
                _check_reserved_slice(field, cgroup)
        return self

    @model_validator(mode="after")
    def _eviction(self) -> "KubeletConfiguration":
        if self.image_gc_low_threshold_percent >= self.image_gc_high_threshold_percent:
            raise ValueError(f"imageGCLowThresholdPercent ({self.image_gc_low_threshold_percent}) must be less "
                             f"than imageGCHighThresholdPercent ({self.image_gc_high_threshold_percent})")
        self.eviction_thresholds()  # a soft threshold without its grace period is an error
        return self

    def eviction_thresholds(self) -> list[Threshold]:
        return parse_thresholds(self.eviction_hard, self.eviction_soft, self.eviction_soft_grace_period,
                                self.eviction_minimum_reclaim)

    @property
    def enforces_pods_allocatable(self) -> bool:
        return "pods" in self.enforce_node_allocatable

    @property
    def image_pull_parallelism(self) -> int | None:
        return 1 if self.serialize_image_pulls else self.max_parallel_image_pulls

    @field_validator("sync_frequency", "file_check_frequency", "runtime_request_timeout",
                     "node_status_update_frequency", "node_status_report_frequency",
                     "volume_stats_agg_period", "eviction_pressure_transition_period", "image_minimum_gc_age", "image_maximum_gc_age",
                     "container_log_monitor_interval", "http_check_frequency", "cpu_manager_reconcile_period",
                     "shutdown_grace_period", "shutdown_grace_period_critical_pods", "cpu_cfs_quota_period",
                     mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return to_seconds(v)

    @model_validator(mode="after")
    def _shutdown(self) -> "KubeletConfiguration":
        # The kubelet's checks, in its words.
        total, critical = self.shutdown_grace_period, self.shutdown_grace_period_critical_pods
        if total < 0 or critical < 0 or critical > total:
            raise ValueError(f"shutdownGracePeriod {format_duration(total)} must be >= 0, "
                             f"shutdownGracePeriodCriticalPods {format_duration(critical)} must be >= 0 and <= "
                             "shutdownGracePeriod")
        if self.shutdown_grace_period_by_pod_priority and (total or critical):
            raise ValueError("Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the "
                             "same time")
        priorities = [p.priority for p in self.shutdown_grace_period_by_pod_priority]
        if len(set(priorities)) != len(priorities):
            raise ValueError("shutdownGracePeriodByPodPriority: each priority may be given once")
        return self

    @field_validator("run_once", "default_pod_sysctls")
    @classmethod
    def _refused_when_set(cls, v: Any, info: ValidationInfo) -> Any:
        if v:
            raise ValueError(_REFUSED_WHEN_SET[str(info.field_name)])
        return v

    @field_validator("qos_reserved")
    @classmethod
    def _qos_reserved(cls, v: dict[str, str]) -> dict[str, str]:
        for resource, value in sorted(v.items()):
            if resource != "memory":
                raise ValueError(f"--qos-reserved value failed to parse: cannot reserve {go_quote(resource)} resource")
            problem = _percentage_problem(value)
            if problem:
                raise ValueError(f"--qos-reserved value failed to parse: failed to parse percentage {go_quote(value)} "
                                 f"for {go_quote(resource)} resource: {problem}")
        return v

    @field_validator("cpu_manager_policy_options", "topology_manager_policy_options", "default_pod_sysctls",
                     "qos_reserved", mode="before")
    @classmethod
    def _null_map(cls, v: Any) -> Any:
        return {} if v is None else v  # Go's nil map: the default

    @field_validator("topology_manager_policy_options")
    @classmethod
    def _topology_options(cls, v: dict[str, str]) -> dict[str, str]:
        check_topology_policy_options(v)
        return v

    @model_validator(mode="after")
    def _cpu_policy_options(self) -> "KubeletConfiguration":
        self.cpu_policy_options  # noqa: B018  (parsed here so that a bad option stops the load)
        return self

    @property
    def cpu_policy_options(self) -> CPUPolicyOptions:
        """cpuManagerPolicyOptions as the CPU manager takes them."""
        return parse_cpu_policy_options(self.cpu_manager_policy_options, self.cpu_manager_policy)

    @field_validator("config_map_and_secret_change_detection_strategy")
    @classmethod
    def _change_detection(cls, v: str) -> str:
        if v not in ("Watch", "Cache", "Get"):
            raise ValueError(f"unknown configmap and secret manager mode: {v}")  # the kubelet's words
        return v

    @field_validator("show_hidden_metrics_for_version")
    @classmethod
    def _show_hidden_metrics(cls, v: str) -> str:
        if v and v != PREVIOUS_MINOR:
            raise ValueError(f"invalid showHiddenMetricsForVersion: showHiddenMetricsForVersion: Invalid value: "
                             f"{go_quote(v)}: must be omitted or have the value '{PREVIOUS_MINOR}'; only the previous "
                             "minor version is allowed")
        return v

    @field_validator("iptables_masquerade_bit", "iptables_drop_bit")
    @classmethod
    def _iptables_bit(cls, v: int, info: ValidationInfo) -> int:
        if not 0 <= v <= 31:
            name, flag = {"iptables_masquerade_bit": ("iptablesMasqueradeBit", "--iptables-masquerade-bit"),
                          "iptables_drop_bit": ("iptablesDropBit", "--iptables-drop-bit")}[str(info.field_name)]
            raise ValueError(f"invalid configuration: {name} ({flag}) {v} must be between 0 and 31, inclusive")
        return v

    @field_validator("hairpin_mode")
    @classmethod
    def _hairpin_mode(cls, v: str) -> str:
        if v not in HAIRPIN_MODES:
            raise ValueError(f"invalid configuration: option {go_quote(v)} specified for hairpinMode (--hairpin-mode). "
                             "Valid options are \"none\", \"hairpin-veth\" or \"promiscuous-bridge\"")
        return v

    @model_validator(mode="after")
    def _pull_verification(self) -> "KubeletConfiguration":
        policy, allowlist = self.image_pull_credentials_verification_policy, self.preloaded_images_verification_allowlist
        if policy not in PULL_VERIFICATION_POLICIES:
            raise ValueError(f"invalid configuration: option {go_quote(policy)} specified for "
                             "imagePullCredentialsVerificationPolicy. Valid options are " +
                             ", ".join(go_quote(p) for p in PULL_VERIFICATION_POLICIES[:-1]) +
                             f" or {go_quote(PULL_VERIFICATION_POLICIES[-1])}")
        if allowlist and policy != "NeverVerifyAllowlistedImages":
            raise ValueError("invalid configuration: can't set `preloadedImagesVerificationAllowlist` if "
                             "`imagePullCredentialsVertificationPolicy` is not \"NeverVerifyAllowlistedImages\"")
        for pattern in allowlist:
            if (problem := allowlist_pattern(pattern)) is not None:
                raise ValueError("invalid configuration: invalid image pattern in "
                                 f"`preloadedImagesVerificationAllowlist`: {problem}")
        return self

    @model_validator(mode="after")
    def _cfs_period(self) -> "KubeletConfiguration":
        if not 0.001 <= self.cpu_cfs_quota_period <= 1:
            raise ValueError(f"invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) "
                             f"{format_duration(self.cpu_cfs_quota_period)} must be between 1ms and 1sec, inclusive")
        return self

    @property
    def cpu_cfs_period_us(self) -> int:
        """cpuCFSQuotaPeriod in microseconds, as cgroups take it."""
        return round(self.cpu_cfs_quota_period * 1_000_000)

    @model_validator(mode="after")
    def _system_log_query(self) -> "KubeletConfiguration":
        if self.enable_system_log_query and not self.enable_system_log_handler:
            raise ValueError("invalid configuration: enableSystemLogHandler is required for enableSystemLogQuery")
        return self

    @model_validator(mode="after")
    def _memory_manager(self) -> "KubeletConfiguration":
        if self.reserved_memory and self.memory_manager_policy != "Static":
            raise ValueError("reservedMemory: only the memory manager's Static policy uses it; set memoryManagerPolicy "
                             "to Static or remove it")
        if self.memory_manager_policy == "Static" and not self.reserved_memory:
            raise ValueError("memoryManagerPolicy Static needs reservedMemory: the node's memory reservation "
                             "(systemReserved + kubeReserved + evictionHard memory.available) on NUMA node 0")
        return self

    @field_validator("feature_gates", mode="before")
    @classmethod
    def _feature_gates(cls, v: Any) -> dict[str, bool]:
        if v is None:
            return {}
        if not isinstance(v, dict) or not all(isinstance(g, bool) for g in v.values()):
            raise ValueError("must be a map of feature gate name to true or false")
        problems = []
        for name, value in sorted(v.items()):
            if name not in GATES:
                problems.append(f"unrecognized feature gate: {name}")
                continue
            default, locked = GATES[name]
            if value == default:
                continue
            if locked:
                problems.append(f"cannot set feature gate {name} to {str(value).lower()}, feature is locked to "
                                f"{str(default).lower()}")
            else:
                problems.append(f"{name}={str(value).lower()} is not implemented by pykubelet (it runs with {name} at "
                                f"the kubelet's default, {str(default).lower()}); remove it")
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("healthz_bind_address")
    @classmethod
    def _healthz_bind_address(cls, v: str) -> str:
        return ip_address(v, "127.0.0.1 keeps it to this host")

    @field_validator("reserved_system_cpus")
    @classmethod
    def _reserved_system_cpus(cls, v: str) -> str:
        try:
            parse_cpuset(v)
        except CPUSetError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("static_pod_url")
    @classmethod
    def _static_pod_url(cls, v: str) -> str:
        if v:
            url = urlsplit(v)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError(f"{v!r} is not an http:// or https:// URL")
        return v

    @field_validator("static_pod_url_header")
    @classmethod
    def _static_pod_url_header(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, values in v.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            for value in values:
                if any(c in value for c in "\r\n\0"):
                    raise ValueError(f"{name}: a header value may not hold a line break or NUL")
        return v

    @field_validator("max_pods")
    @classmethod
    def _max_pods(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v

    @field_validator("pod_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        if v:
            try:
                ipaddress.ip_network(v, strict=False)
            except ValueError as exc:
                raise ValueError(f"not a CIDR ({exc}); write it like '10.88.0.0/24'") from None
        return v

    @field_validator("cluster_dns")
    @classmethod
    def _dns(cls, v: list[str]) -> list[str]:
        return [ip_address(ip) for ip in v]

    @field_validator("container_runtime_endpoint", "image_service_endpoint")
    @classmethod
    def _endpoint(cls, v: str, info: ValidationInfo) -> str:
        if v == "" and info.field_name == "image_service_endpoint":
            return v
        if not v.startswith("unix://") or len(v) <= len("unix://"):
            raise ValueError("must be a unix socket URL like 'unix:///run/containerd/containerd.sock'")
        return v


# The kubelet's own labels and label namespaces: the only ones in kubernetes.io or k8s.io a node
# may register with (k8s.io/kubelet pkg/apis, as the NodeRestriction admission plugin enforces).
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch"})
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _first_error(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
    return str(exc)


def _check_label(key: str, value: str) -> None:
    Taint(key=key, value=value, effect="NoSchedule")  # a taint's key and value are a label's
    namespace = key.partition("/")[0] if "/" in key else ""
    reserved = any(namespace == d or namespace.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))
    allowed = key in KUBELET_LABELS or any(namespace == d or namespace.endswith("." + d)
                                           for d in KUBELET_LABEL_NAMESPACES)
    if reserved and not allowed:
        raise ValueError(f"{key!r} is in the 'kubernetes.io' or 'k8s.io' namespace: such labels must "
                         f"begin with an allowed prefix ({', '.join(KUBELET_LABEL_NAMESPACES)}) or be in the "
                         f"kubelet's set ({', '.join(sorted(KUBELET_LABELS))}); set other ones through the API")


class NodeSettings(BaseModel):
    """Everything a pykubelet process needs to know about its node."""

    kubelet: KubeletConfiguration = Field(default_factory=KubeletConfiguration)
    root_dir: Path = Path("/var/lib/pykubelet")
    nats_url: str = "nats://127.0.0.1:4222"
    node_name: str = Field(default_factory=lambda: socket.gethostname().lower())
    admin_port: int = 0  # 0: the service's default admin port
    admin_port_base: int = 0  # set: every service's admin port is base + its place (shared.process.admin)
    pleg_relist_period: float = 1.0
    kubeconfig: Path | None = None  # cluster mode when set
    # --bootstrap-kubeconfig: while the kubeconfig is missing (or its certificate expired), the
    # status-reporter gets a client certificate with this one's credentials and writes it.
    bootstrap_kubeconfig: Path | None = None
    node_ip: str = ""  # --node-ip; empty: the default route's address (shared.host.facts.node_ip)
    # This service's bus credentials (shared.bus.auth); None: <root-dir>/bus/<service>.json if
    # there is one, else anonymous.
    bus_credentials: Path | None = None
    cert_dir_flag: Path | None = None  # --cert-dir; None: <root-dir>/pki
    node_labels: dict[str, str] = Field(default_factory=dict)  # --node-labels, on top of the node's own

    @property
    def cert_dir(self) -> Path:
        """Where the serving certificate is kept, as the kubelet's --cert-dir."""
        return self.cert_dir_flag or self.root_dir / "pki"

    @field_validator("node_ip")
    @classmethod
    def _node_ip(cls, v: str) -> str:
        return ip_address(v) if v else v

    @property
    def cluster_mode(self) -> bool:
        return self.kubeconfig is not None
    # Fields pykubelet does not implement, given at the kubelet's default (shared/config/refused.py).
    at_default_fields: list[str] = Field(default_factory=list)

    @property
    def store_path(self) -> Path:
        return self.root_dir / "state.db"


def _format_validation_error(exc: ValidationError, source: str) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (not part of KubeletConfiguration v1beta1)"
        # Messages that already name their field (and the entry in it) stand as they are.
        parts.append(f"{loc}: {msg}" if loc and not msg.startswith(to_camel(loc)) else msg)
    return f"invalid kubelet config {source}: " + "; ".join(parts)


def load_kubelet_config(data: dict[str, Any], source: str = "(inline)") -> tuple[KubeletConfiguration, list[str]]:
    """Validate a parsed config document; return it and the fields pykubelet does not implement
    that it gives at the kubelet's default. Such a field at any other value is an error."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid kubelet config {source}: expected a mapping, got {type(data).__name__}")
    data = dict(data)
    drop_zero_values(data)  # a zero the kubelet reads as its default (shared/config/defaults.py)
    refused, at_default = refused_settings(data)
    if refused:
        raise ConfigError(f"invalid kubelet config {source}: " + "; ".join(refused))
    for k in at_default:
        data.pop(k)
    try:
        return KubeletConfiguration.model_validate(data), at_default
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, source)) from None


def merge_default_eviction(data: dict[str, Any]) -> dict[str, Any]:
    """mergeDefaultEvictionSettings: the kubelet's default evictionHard thresholds for the signals a
    config file's evictionHard leaves out (the kubelet does this as it loads the file: an
    --eviction-hard flag then replaces the whole map)."""
    hard = data.get("evictionHard")
    if data.get("mergeDefaultEvictionSettings") is True and isinstance(hard, dict):
        data["evictionHard"] = {**DEFAULT_EVICTION_HARD, **hard}
    return data


def read_config_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read kubelet config {p}: {exc.strerror}") from None
    try:
        data = safe_yaml.load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"kubelet config {p} is not valid YAML: {exc}") from None
    return data


def add_node_flags(parser: argparse.ArgumentParser) -> None:
    """The kubelet's command line (shared/config/flags.py) and pykubelet's own flags."""
    add_kubelet_flags(parser)
    g = parser.add_argument_group("pykubelet's own flags")
    g.add_argument("--nats-url", help="event bus URL (default nats://127.0.0.1:4222)")
    g.add_argument("--bus-credentials", help="this service's bus credentials file (JSON user/password, mode 0600; "
                                             "default <root-dir>/bus/<service>.json)")
    g.add_argument("--admin-port", type=int, help="loopback port of this service's admin app")
    g.add_argument("--admin-port-base", type=int,
                   help="admin ports of all services are this + their place in the start order")
    g.add_argument("--pod-logs-dir", help="container log directory (podLogsDir)")
    g.add_argument("--pleg-relist-period", help="how often pod-sync relists the runtime (default 1s)")


# Path fields that, like the kubelet's, are relative to the config file's directory.
PATH_FIELDS = ("staticPodPath", "podLogsDir", "resolvConf", "tlsCertFile", "tlsPrivateKeyFile",
               "authentication.x509.clientCAFile")


def _resolve_relative_paths(data: dict[str, Any], base: Path) -> None:
    for name in PATH_FIELDS:
        *parents, leaf = name.split(".")
        section: Any = data
        for p in parents:
            section = section.get(p) if isinstance(section, dict) else None
        if not isinstance(section, dict):
            continue
        value = section.get(leaf)
        if isinstance(value, str) and value and not value.startswith("/"):
            section[leaf] = str(base / value)


def settings_from_args(args: argparse.Namespace) -> NodeSettings:
    """Build NodeSettings from parsed flags: file first, then flags on top."""
    try:
        values = parsed_values(args)
    except FlagError as exc:
        raise ConfigError(str(exc)) from None
    kubelet, at_default = _kubelet_config(args, values)
    extra = {**_node_flags(args, values), **_kubeconfig_flags(args)}
    settings = NodeSettings(kubelet=kubelet, at_default_fields=at_default, **extra)
    for name in at_default:
        log.info("config field %s is at the kubelet's default; pykubelet does not implement other values of it", name)
    for line in kubelet.inert_settings():
        log.warning("config field %s", line)
    return settings


def _kubelet_config(args: argparse.Namespace, values: dict[str, Any]) -> tuple[KubeletConfiguration, list[str]]:
    """The KubeletConfiguration: --config's file, then the flags that set its fields; a refused
    field or a bad value names the flag that set it."""
    problems = refused_flags(values)
    data: dict[str, Any] = {}
    source = ""
    if getattr(args, "config", None):
        data = read_config_file(args.config)
        source = str(args.config)
        if not isinstance(data, dict):
            raise ConfigError(f"invalid kubelet config {source}: expected a mapping")
    data = merge_default_eviction(dict(data))
    if source:
        _resolve_relative_paths(data, Path(source).resolve().parent)
    if getattr(args, "pod_logs_dir", None):
        data["podLogsDir"] = os.path.abspath(args.pod_logs_dir)
    by_flag = apply_config_flags(data, values)
    # A refused field set by a flag: the error names the flag as well as the field.
    refused, _ = refused_settings({k: data[k] for k in by_flag})
    problems += [f"--{by_flag[e.partition(':')[0]]}: {e}" for e in refused]
    if problems:
        raise ConfigError("invalid kubelet flags: " + "; ".join(problems))
    warn_deprecated(values)
    try:
        return load_kubelet_config(data, source or "(flags)")
    except ConfigError as exc:
        named = [f"--{flag} sets {field}" for field, flag in by_flag.items() if field in str(exc)]
        raise ConfigError(f"{exc} ({'; '.join(named)})" if named else str(exc)) from None


def _node_flags(args: argparse.Namespace, values: dict[str, Any]) -> dict[str, Any]:
    """The node's own flags (not configuration fields), checked."""
    extra: dict[str, Any] = {}
    for flag, key, convert in (("root_dir", "root_dir", Path), ("nats_url", "nats_url", str),
                               ("bus_credentials", "bus_credentials", Path), ("admin_port", "admin_port", int),
                               ("admin_port_base", "admin_port_base", int)):
        if getattr(args, flag, None):
            extra[key] = convert(getattr(args, flag))
    if getattr(args, "hostname_override", None):
        extra["node_name"] = args.hostname_override.lower()
    if getattr(args, "node_ip", None):
        try:
            extra["node_ip"] = ip_address(args.node_ip.strip())
        except ValueError as exc:
            raise ConfigError(f"--node-ip: {exc}") from None
    if getattr(args, "cert_dir", None):
        extra["cert_dir_flag"] = Path(os.path.abspath(args.cert_dir))
    if values.get("node-labels"):
        for key, value in values["node-labels"].items():
            try:
                _check_label(key, value)
            except (ValueError, ValidationError) as exc:
                raise ConfigError(f"--node-labels: {key}={value}: {_first_error(exc)}") from None
        extra["node_labels"] = values["node-labels"]
    if getattr(args, "pleg_relist_period", None):
        try:
            extra["pleg_relist_period"] = parse_duration(args.pleg_relist_period)
        except ValueError as exc:
            raise ConfigError(f"--pleg-relist-period: {exc}") from None
    return extra


def _kubeconfig_flags(args: argparse.Namespace) -> dict[str, Any]:
    """--kubeconfig and --bootstrap-kubeconfig: one of them must be there to reach the API server."""
    extra: dict[str, Any] = {}
    bootstrap = getattr(args, "bootstrap_kubeconfig", None)
    if bootstrap:
        if not getattr(args, "kubeconfig", None):
            raise ConfigError("--bootstrap-kubeconfig needs --kubeconfig: the path the TLS bootstrap writes "
                              "the node's kubeconfig to")
        extra["bootstrap_kubeconfig"] = Path(os.path.abspath(bootstrap))
    if getattr(args, "kubeconfig", None):
        path = Path(os.path.abspath(args.kubeconfig))
        if not path.is_file():
            if not bootstrap:
                raise ConfigError(f"--kubeconfig {path}: no such file (give --bootstrap-kubeconfig too to "
                                  "have the node request a client certificate and write it)")
            if not Path(bootstrap).is_file():
                raise ConfigError(f"--kubeconfig {path} does not exist and --bootstrap-kubeconfig {bootstrap}: "
                                  "no such file; one of them is needed to reach the API server")
        extra["kubeconfig"] = path
    return extra
