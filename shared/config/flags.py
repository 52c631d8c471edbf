"""The kubelet's command line (Kubernetes 1.37): every flag works or is refused by name.

Each flag of the kubelet 1.37 (cmd/kubelet/app/options: KubeletFlags, the KubeletConfiguration
flags, the logging flags and the global ones) is one `Flag` here, in one of three kinds:
- a configuration flag: it sets a KubeletConfiguration field on top of the --config file, as
  the kubelet's flag precedence does; the field is then implemented or refused exactly as in the
  file (shared/config/refused.py), and the error names the flag too;
- a node flag: it sets a NodeSettings value (--kubeconfig, --node-ip, --node-labels, ...);
- a refused flag: accepted only at the kubelet's default, anything else stops the start with
  the reason.
The kubelet's deprecation notices are printed as the kubelet prints them: every configuration
flag is deprecated in favour of the config file, except the few the kubelet keeps.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable

from shared.model.go_text import go_parse_bool

log = logging.getLogger("pykubelet.flags")

CONFIG_DEPRECATED = ("This parameter should be set via the config file specified by the Kubelet's --config flag. "
                     "See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more "
                     "information.")
_REMOVED_GC = "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."


class FlagError(ValueError):
    """A flag's value the kubelet would not parse, or a refused flag set to something else than
    its default."""


@dataclass(frozen=True)
class Flag:
    name: str
    kind: str                  # how the value parses: see PARSERS
    field: str = ""            # the KubeletConfiguration field (dotted json path) it sets
    setting: str = ""          # or the NodeSettings value it sets (shared.config.settings.settings_from_args)
    refused: str = ""          # or why pykubelet does not implement it: accepted only at `default`
    default: Any = None
    deprecated: str = ""       # the kubelet's deprecation notice, printed when the flag is given
    path: bool = False         # a file or directory: made absolute where the flag is read

    @property
    def dest(self) -> str:
        # A node flag keeps the plain name callers read (args.kubeconfig, args.root_dir).
        return self.setting or "kf_" + self.name.replace("-", "_")

    @property
    def single(self) -> bool:
        """Stored as one string (the last given), not as the list of every occurrence."""
        return bool(self.setting) and self.kind in ("str", "path")


def _bool(raw: str) -> bool:
    # Go's strconv.ParseBool, which pflag uses.
    try:
        return go_parse_bool(raw)
    except ValueError:
        raise FlagError(f"{raw!r} is not a boolean (true or false)") from None


def _int(raw: str) -> int:
    try:
        return int(raw, 10)
    except ValueError:
        raise FlagError(f"{raw!r} is not an integer") from None


def _items(raw: str) -> list[str]:
    return [s.strip() for s in raw.split(",") if s.strip()]


def _pairs(raw: str, sep: str) -> dict[str, str]:
    out = {}
    for item in _items(raw):
        key, found, value = item.partition(sep)
        if not found or not key.strip():
            raise FlagError(f"{item!r} is not of the form KEY{sep}VALUE")
        out[key.strip()] = value.strip()
    return out


def _map(raw: str) -> dict[str, str]:
    return _pairs(raw, "=")


def _map_nosplit(raw: str) -> dict[str, str]:
    key, found, value = raw.partition("=")
    if not found or not key.strip():
        raise FlagError(f"{raw!r} is not of the form KEY=VALUE")
    return {key.strip(): value.strip()}


def _langle(raw: str) -> dict[str, str]:
    return _pairs(raw, "<")


def _gates(raw: str) -> dict[str, bool]:
    return {k: _bool(v) for k, v in _pairs(raw, "=").items()}


def _headers(raw: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, value in ((i.partition(":")[0].strip(), i.partition(":")[2].strip()) for i in _items(raw)):
        if not key:
            raise FlagError(f"{raw!r} is not a list of NAME:VALUE")
        out.setdefault(key, []).append(value)
    return out


def _taints(raw: str) -> list[dict[str, str]]:
    # "key=value:Effect" or "key:Effect", as the kubelet's RegisterWithTaintsVar.
    out = []
    for item in _items(raw):
        kv, found, effect = item.rpartition(":")
        if not found or not kv:
            raise FlagError(f"{item!r} is not of the form KEY[=VALUE]:EFFECT")
        key, _, value = kv.partition("=")
        out.append({"key": key, "value": value, "effect": effect})
    return out


def _reserved_memory(raw: str) -> list[dict[str, Any]]:
    node, found, limits = raw.partition(":")
    if not found:
        raise FlagError(f"{raw!r} is not of the form NUMA-NODE:RESOURCE=QUANTITY[,...]")
    return [{"numaNode": _int(node.strip()), "limits": _map(limits)}]


# kind: (parse one occurrence, how repeated occurrences combine)
PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "str": (str, "last"), "path": (str, "last"), "bool": (_bool, "last"), "int": (_int, "last"),
    "duration": (str, "last"), "list": (_items, "extend"), "map": (_map, "merge"),
    "map-nosplit": (_map_nosplit, "merge"), "langle": (_langle, "merge"), "gates": (_gates, "merge"),
    "headers": (_headers, "merge"), "taints": (_taints, "extend"), "reserved-memory": (_reserved_memory, "extend"),
}


def _c(name: str, kind: str, field: str, deprecated: str = CONFIG_DEPRECATED) -> Flag:
    return Flag(name, kind, field=field, deprecated=deprecated, path=kind == "path")


def _n(name: str, kind: str, setting: str) -> Flag:
    return Flag(name, kind, setting=setting, path=kind == "path")


def _r(name: str, kind: str, default: Any, refused: str, deprecated: str = "") -> Flag:
    return Flag(name, kind, refused=refused, default=default, deprecated=deprecated)


_CREDS = "pykubelet pulls with the pod's imagePullSecrets and the node's registry configuration in containerd"
_CGROUPS = "pykubelet leaves the runtime and itself in the cgroups their service manager put them in"

FLAGS: tuple[Flag, ...] = (
    # KubeletFlags
    _n("config", "path", "config"),
    _r("config-dir", "str", "", "pykubelet reads one --config file; merge drop-ins into it"),
    _n("kubeconfig", "path", "kubeconfig"),
    _n("bootstrap-kubeconfig", "path", "bootstrap_kubeconfig"),
    _n("hostname-override", "str", "hostname_override"),
    _n("node-ip", "str", "node_ip"),
    _n("cert-dir", "path", "cert_dir"),
    _r("cloud-provider", "str", "", "pykubelet runs without a cloud provider; set providerID (--provider-id) "
                                    "for one that names the node"),
    _n("root-dir", "path", "root_dir"),
    _c("seccomp-default", "bool", "seccompDefault", deprecated=""),
    _n("node-labels", "map", "node_labels"),
    _r("lock-file", "str", "", "pykubelet's supervisor (or systemd) keeps one instance of each service"),
    _r("exit-on-lock-contention", "bool", False, "pykubelet takes no lock file"),
    _r("minimum-container-ttl-duration", "duration", "0s", "exited containers are removed with their pod; the "
       "last instance of each is kept for its logs", _REMOVED_GC),
    _r("maximum-dead-containers-per-container", "int", 1, "the last exited instance of each container is kept "
       "for --previous logs", _REMOVED_GC),
    _r("maximum-dead-containers", "int", -1, "exited containers are not capped node-wide", _REMOVED_GC),
    _r("experimental-mounter-path", "str", "", "volumes are mounted by pykubelet's volume service or a CSI driver",
       "will be removed in 1.25 or later. in favor of using CSI."),
    _r("experimental-allocatable-ignore-eviction", "bool", False, "hard eviction thresholds are always taken off "
       "allocatable", "will be removed in 1.25 or later."),
    _r("runtime-cgroups", "str", "", _CGROUPS),
    _r("image-credential-provider-config", "str", "", _CREDS),
    _r("image-credential-provider-bin-dir", "str", "", _CREDS),
    # The global flags: cadvisor's and the version.
    _r("housekeeping-interval", "duration", "10s", "pykubelet reads container statistics from the runtime "
                                                   "when they are asked for"),
    # KubeletConfiguration
    _c("enable-server", "bool", "enableServer"),
    _c("fail-swap-on", "bool", "failSwapOn"),
    _c("pod-manifest-path", "path", "staticPodPath"),
    _c("sync-frequency", "duration", "syncFrequency"),
    _c("file-check-frequency", "duration", "fileCheckFrequency"),
    _c("http-check-frequency", "duration", "httpCheckFrequency"),
    _c("manifest-url", "str", "staticPodURL"),
    _c("manifest-url-header", "headers", "staticPodURLHeader"),
    _c("address", "str", "address"),
    _c("port", "int", "port"),
    _c("read-only-port", "int", "readOnlyPort"),
    _c("fail-cgroupv1", "bool", "failCgroupV1", deprecated=""),
    _c("container-runtime-endpoint", "str", "containerRuntimeEndpoint"),
    _c("image-service-endpoint", "str", "imageServiceEndpoint"),
    _c("anonymous-auth", "bool", "authentication.anonymous.enabled"),
    _c("authentication-token-webhook", "bool", "authentication.webhook.enabled"),
    _c("authentication-token-webhook-cache-ttl", "duration", "authentication.webhook.cacheTTL"),
    _c("client-ca-file", "path", "authentication.x509.clientCAFile"),
    _c("authorization-mode", "str", "authorization.mode"),
    _c("authorization-webhook-cache-authorized-ttl", "duration", "authorization.webhook.cacheAuthorizedTTL"),
    _c("authorization-webhook-cache-unauthorized-ttl", "duration", "authorization.webhook.cacheUnauthorizedTTL"),
    _c("tls-cert-file", "path", "tlsCertFile"),
    _c("tls-private-key-file", "path", "tlsPrivateKeyFile"),
    _c("rotate-server-certificates", "bool", "serverTLSBootstrap"),
    _c("tls-cipher-suites", "list", "tlsCipherSuites"),
    _c("tls-min-version", "str", "tlsMinVersion"),
    _c("rotate-certificates", "bool", "rotateCertificates"),
    _c("registry-qps", "int", "registryPullQPS"),
    _c("registry-burst", "int", "registryBurst"),
    _c("event-qps", "int", "eventRecordQPS"),
    _c("event-burst", "int", "eventBurst"),
    _c("enable-debugging-handlers", "bool", "enableDebuggingHandlers"),
    _c("contention-profiling", "bool", "enableContentionProfiling"),
    _c("healthz-port", "int", "healthzPort"),
    _c("healthz-bind-address", "str", "healthzBindAddress"),
    _c("oom-score-adj", "int", "oomScoreAdj"),
    _c("cluster-domain", "str", "clusterDomain"),
    _c("volume-plugin-dir", "path", "volumePluginDir"),
    _c("cluster-dns", "list", "clusterDNS"),
    _c("streaming-connection-idle-timeout", "duration", "streamingConnectionIdleTimeout"),
    _c("node-status-update-frequency", "duration", "nodeStatusUpdateFrequency"),
    _c("minimum-image-ttl-duration", "duration", "imageMinimumGCAge"),
    _c("image-gc-high-threshold", "int", "imageGCHighThresholdPercent"),
    _c("image-gc-low-threshold", "int", "imageGCLowThresholdPercent"),
    _c("volume-stats-agg-period", "duration", "volumeStatsAggPeriod"),
    _c("feature-gates", "gates", "featureGates"),
    _c("kubelet-cgroups", "str", "kubeletCgroups"),
    _c("system-cgroups", "str", "systemCgroups"),
    _c("provider-id", "str", "providerID", deprecated=""),
    _c("cgroups-per-qos", "bool", "cgroupsPerQOS"),
    _c("cgroup-driver", "str", "cgroupDriver"),
    _c("cgroup-root", "str", "cgroupRoot"),
    _c("cpu-manager-policy", "str", "cpuManagerPolicy"),
    _c("cpu-manager-policy-options", "map-nosplit", "cpuManagerPolicyOptions"),
    _c("cpu-manager-reconcile-period", "duration", "cpuManagerReconcilePeriod"),
    _c("qos-reserved", "map", "qosReserved"),
    _c("topology-manager-policy", "str", "topologyManagerPolicy"),
    _c("runtime-request-timeout", "duration", "runtimeRequestTimeout"),
    _c("hairpin-mode", "str", "hairpinMode"),
    _c("max-pods", "int", "maxPods"),
    _c("pod-cidr", "str", "podCIDR"),
    _c("pod-max-pids", "int", "podPidsLimit"),
    _c("resolv-conf", "path", "resolvConf"),
    _c("runonce", "bool", "runOnce"),
    _c("cpu-cfs-quota", "bool", "cpuCFSQuota"),
    _c("cpu-cfs-quota-period", "duration", "cpuCFSQuotaPeriod"),
    _c("enable-controller-attach-detach", "bool", "enableControllerAttachDetach"),
    _c("make-iptables-util-chains", "bool", "makeIPTablesUtilChains"),
    _c("container-log-max-size", "str", "containerLogMaxSize"),
    _c("container-log-max-files", "int", "containerLogMaxFiles"),
    _c("allowed-unsafe-sysctls", "list", "allowedUnsafeSysctls"),
    _c("node-status-max-images", "int", "nodeStatusMaxImages"),
    _c("kernel-memcg-notification", "bool", "kernelMemcgNotification"),
    _c("local-storage-capacity-isolation", "bool", "localStorageCapacityIsolation"),
    _c("max-open-files", "int", "maxOpenFiles"),
    _c("kube-api-content-type", "str", "contentType"),
    _c("kube-api-qps", "int", "kubeAPIQPS"),
    _c("kube-api-burst", "int", "kubeAPIBurst"),
    _c("serialize-image-pulls", "bool", "serializeImagePulls"),
    _c("eviction-hard", "langle", "evictionHard"),
    _c("eviction-soft", "langle", "evictionSoft"),
    _c("eviction-soft-grace-period", "map", "evictionSoftGracePeriod"),
    _c("eviction-pressure-transition-period", "duration", "evictionPressureTransitionPeriod"),
    _c("eviction-max-pod-grace-period", "int", "evictionMaxPodGracePeriod"),
    _c("eviction-minimum-reclaim", "map", "evictionMinimumReclaim"),
    _c("pods-per-core", "int", "podsPerCore"),
    _c("protect-kernel-defaults", "bool", "protectKernelDefaults"),
    _c("reserved-cpus", "str", "reservedSystemCPUs"),
    _c("topology-manager-scope", "str", "topologyManagerScope"),
    _c("topology-manager-policy-options", "map", "topologyManagerPolicyOptions"),
    _c("system-reserved", "map", "systemReserved"),
    _c("kube-reserved", "map", "kubeReserved"),
    _c("enforce-node-allocatable", "list", "enforceNodeAllocatable"),
    _c("system-reserved-cgroup", "str", "systemReservedCgroup"),
    _c("kube-reserved-cgroup", "str", "kubeReservedCgroup"),
    _c("memory-manager-policy", "str", "memoryManagerPolicy"),
    _c("reserved-memory", "reserved-memory", "reservedMemory"),
    _c("register-node", "bool", "registerNode"),
    _c("register-with-taints", "taints", "registerWithTaints"),
    # The logging flags (component-base logs/api/v1), set in the config's `logging`.
    _c("logging-format", "str", "logging.format"),
    _c("log-flush-frequency", "duration", "logging.flushFrequency", deprecated=""),
    _c("v", "int", "logging.verbosity", deprecated=""),
    _c("vmodule", "list", "logging.vmodule", deprecated=""),
    _c("log-text-split-stream", "bool", "logging.options.text.splitStream"),
    _c("log-text-info-buffer-size", "str", "logging.options.text.infoBufferSize"),
    _c("log-json-split-stream", "bool", "logging.options.json.splitStream"),
    _c("log-json-info-buffer-size", "str", "logging.options.json.infoBufferSize"),
)

BY_NAME = {f.name: f for f in FLAGS}

# Parts of an implemented field that only their default passes (shared.config.settings.LoggingConfig).
REFUSED_PARTS = {"logging.vmodule": "one verbosity for every service",
                 "logging.options.text.splitStream": "one output stream",
                 "logging.options.text.infoBufferSize": "no buffering",
                 "logging.options.json.splitStream": "one output stream",
                 "logging.options.json.infoBufferSize": "no buffering"}


def add_kubelet_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("the kubelet's flags (configuration flags override --config; "
                                  "docs/kubelet-flags.md says which pykubelet implements)")
    for f in FLAGS:
        names = ["--v", "-v"] if f.name == "v" else [f"--{f.name}"]
        # pflag's booleans take no separate value: `--fail-swap-on` or `--fail-swap-on=false`.
        extra: dict[str, Any] = {"nargs": "?", "const": "true"} if f.kind == "bool" else {}
        g.add_argument(*names, dest=f.dest, action="store" if f.single else "append", metavar=f.kind.upper(),
                       help=_help(f), **extra)
    g.add_argument("--version", action="store_true", dest="kf_version", help="print the version and exit")


def _help(f: Flag) -> str:
    if f.field:
        return f"sets {f.field}"
    if f.refused:
        return f"not implemented: {f.refused}"
    return {"config": "KubeletConfiguration YAML file (kubelet.config.k8s.io/v1beta1)",
            "kubeconfig": "join the cluster this kubeconfig points at (cluster mode)",
            "bootstrap-kubeconfig": "while --kubeconfig is missing or its certificate expired: request a "
                                    "client certificate with this kubeconfig's credentials and write --kubeconfig",
            "hostname-override": "node name (default: this host's name)",
            "node-ip": "the node's InternalIP (default: the address of the default route's interface)",
            "cert-dir": "where the serving certificate is kept (default <root-dir>/pki)",
            "root-dir": "pykubelet state directory (default /var/lib/pykubelet)",
            "node-labels": "labels the node registers with, KEY=VALUE,... (kubernetes.io labels: the "
                           "kubelet's allowed set only)"}[f.name]


def parsed_values(args: argparse.Namespace) -> dict[str, Any]:
    """Flag name -> its value, for every kubelet flag given (repeats combined as pflag does)."""
    out: dict[str, Any] = {}
    for f in FLAGS:
        raws = getattr(args, f.dest, None)
        if raws is None or raws == []:
            continue
        if isinstance(raws, str):
            raws = [raws]
        parse, combine = PARSERS[f.kind]
        value: Any = None
        for raw in raws:
            try:
                one = parse(raw)
            except FlagError as exc:
                raise FlagError(f"--{f.name}: {exc}") from None
            if combine == "last" or value is None:
                value = one
            elif combine == "extend":
                value = [*value, *one]
            else:
                value = {**value, **one}
        if f.path and value:
            value = os.path.abspath(value)
        out[f.name] = value
    return out


def refused_flags(values: dict[str, Any]) -> list[str]:
    """The refused flags given at something else than the kubelet's default."""
    errors = []
    for name, value in values.items():
        f = BY_NAME[name]
        if f.refused and value != f.default:
            errors.append(f"--{name}={value} is not implemented by pykubelet ({f.refused}); remove the flag "
                          f"or give the kubelet's default ({f.default!r})")
    return errors


def warn_deprecated(values: dict[str, Any]) -> None:
    for name in values:
        if BY_NAME[name].deprecated:
            log.warning("Flag --%s has been deprecated, %s", name, BY_NAME[name].deprecated)


def apply_config_flags(data: dict[str, Any], values: dict[str, Any]) -> dict[str, str]:
    """Set each configuration flag's field in the config document `data` (the flag wins over the
    file, and a flag's map or list replaces the file's whole value, as in the kubelet). Returns
    top-level field -> the flag that set it, for error messages."""
    by_field = {}
    for name, value in values.items():
        f = BY_NAME[name]
        if not f.field or (name == "seccomp-default" and not value):
            continue  # the kubelet ORs --seccomp-default with the file's seccompDefault
        *parents, leaf = f.field.split(".")
        section = data
        for p in parents:
            if not isinstance(section.get(p), dict):
                section[p] = {}
            section[p] = dict(section[p])  # the file's nested sections stay untouched
            section = section[p]
        section[leaf] = value
        by_field[f.field.split(".")[0]] = name
    return by_field


def forwarded_argv(args: argparse.Namespace, skip: frozenset[str] = frozenset()) -> list[str]:
    """The kubelet flags given, but `skip`, as `--name=value` again, for the services a supervisor
    starts (paths made absolute: a service's working directory is not the caller's)."""
    argv = []
    for f in FLAGS:
        raws = getattr(args, f.dest, None)
        if f.name in skip or raws is None:
            continue
        for one in [raws] if isinstance(raws, str) else raws:
            argv.append(f"--{f.name}={os.path.abspath(one) if f.path and one else one}")
    return argv
