"""The v1 Pod as pykubelet reads it: typed, validated and defaulted the kubelet's way.

Only fields pykubelet acts on are typed; other valid Pod fields pass through untouched (the
kubelet's decoder is not strict either). Validation errors name the field path as the API server
does ("spec.containers[0].image: field required").
"""

from __future__ import annotations

import json
import re
import threading
from decimal import Decimal
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shared.model import pod_limits, safe_yaml
from shared.model.go_text import go_quote
from shared.model.ip import ip_address
from shared.model.pod_limits import MAX_CONTAINERS
from shared.model.quantity import parse_quantity

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def dns_label(v: str) -> str:
    """Container and volume names: RFC 1123 labels, as the API server requires."""
    if len(v) > 63 or not DNS1123_LABEL.match(v):
        raise ValueError(f"{v!r} must be a lowercase RFC 1123 label (a-z, 0-9, '-', at most 63)")
    return v


class ManifestInvalid(ValueError):
    """A manifest that cannot become a pod; the message names the field. reason: the pod's
    status reason when it is refused for this ("" leaves it to the source)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


_ASKS_NOTHING: tuple[object, ...] = (None, False, "", [], {})


def one_of(v: str | None, allowed: tuple[str, ...]) -> str | None:
    """A field with a fixed set of values, refused in the API server's words (NotSupported)."""
    if v is not None and v not in allowed:
        supported = ", ".join(f'"{a}"' for a in sorted(allowed))
        raise ValueError(f"Unsupported value: {go_quote(v[:80])}: supported values: {supported}")
    return v


class _Model(BaseModel):
    """A part of a pod. A field pykubelet does not model is refused, with a reason naming it,
    unless it asks for nothing (empty, false, or a value in NO_OP) or another component acts on
    it (OTHERS_ACT_ON: the scheduler, the API server's admission): never silently dropped."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    OTHERS_ACT_ON: ClassVar[frozenset[str]] = frozenset()
    NO_OP: ClassVar[dict[str, tuple[Any, ...]]] = {}
    WHY_NOT: ClassVar[dict[str, str]] = {}
    REFUSE_UNKNOWN: ClassVar[bool] = True

    @model_validator(mode="after")
    def _refuse_unsupported(self) -> "_Model":
        if not self.REFUSE_UNKNOWN:
            return self
        for key, value in (self.model_extra or {}).items():
            if key in self.OTHERS_ACT_ON or value in _ASKS_NOTHING or value in self.NO_OP.get(key, ()):
                continue
            raise ValueError(f"{key}: {self.WHY_NOT.get(key, 'unknown field, or one pykubelet does not support')}")
        return self


ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")


def _file_key_ref(ref: Any) -> None:
    """The API server's rules for a fileKeyRef (validateFileKeySelector)."""
    if not isinstance(ref, dict):
        raise ValueError("fileKeyRef must be an object")
    unknown = sorted(set(ref) - {"key", "volumeName", "path", "optional"})
    if unknown:
        raise ValueError(f"fileKeyRef.{unknown[0]}: unknown field")
    key, volume, path = ref.get("key"), ref.get("volumeName"), ref.get("path")
    if not isinstance(key, str) or not key:
        raise ValueError("fileKeyRef.key: Required value")
    if "=" in key or not all(" " <= ch <= "~" for ch in key):
        raise ValueError(f"fileKeyRef.key: Invalid value: {go_quote(key[:80])}: a valid environment variable name "
                         "must consist only of printable ASCII characters other than '='")
    if not isinstance(volume, str) or not volume:
        raise ValueError("fileKeyRef.volumeName: Required value")
    if len(volume) > 63 or not DNS1123_LABEL.match(volume):
        raise ValueError(f"fileKeyRef.volumeName: Invalid value: {go_quote(volume[:80])}: must be a lowercase RFC "
                         "1123 label")
    if not isinstance(path, str) or not path:
        raise ValueError("fileKeyRef.path: Required value")
    if ".." in path.split("/") or "\0" in path:
        raise ValueError(f"fileKeyRef.path: Invalid value: {go_quote(path[:80])}: must not contain '..'")
    if not isinstance(ref.get("optional", False), bool):
        raise ValueError("fileKeyRef.optional must be true or false")


class EnvVar(_Model):
    name: str
    value: str | None = None
    valueFrom: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not ENV_NAME.match(v):
            raise ValueError(f"{v!r} is not a valid environment variable name")
        return v

    @field_validator("valueFrom")
    @classmethod
    def _one_source(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        unknown = sorted(set(v) - set(ENV_SOURCES))
        if unknown:
            raise ValueError(f"{unknown[0]} is not supported by pykubelet (supported: {', '.join(ENV_SOURCES)})")
        if len(v) != 1:
            raise ValueError(f"must have exactly one of {', '.join(ENV_SOURCES)}")
        for kind in ("configMapKeyRef", "secretKeyRef"):
            ref = v.get(kind)
            if ref is not None and (not isinstance(ref, dict) or not ref.get("name") or not ref.get("key")):
                raise ValueError(f"{kind} needs a name and a key")
        if "fileKeyRef" in v:
            _file_key_ref(v["fileKeyRef"])
        return v


class LocalObjectRef(_Model):
    name: str = Field(min_length=1)
    optional: bool = False


class EnvFromSource(_Model):
    prefix: str = ""
    configMapRef: LocalObjectRef | None = None
    secretRef: LocalObjectRef | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "EnvFromSource":
        if (self.configMapRef is None) == (self.secretRef is None):
            raise ValueError("must have exactly one of configMapRef, secretRef")
        if self.prefix and not ENV_NAME.match(self.prefix):
            raise ValueError(f"prefix {self.prefix!r} is not a valid environment variable name")
        return self


class ContainerPort(_Model):
    name: str | None = None
    containerPort: int = Field(ge=1, le=65535)
    hostPort: int | None = Field(default=None, ge=0, le=65535)
    hostIP: str | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"


class ResourceRequirements(_Model):
    requests: dict[str, str | int | float] = Field(default_factory=dict)
    limits: dict[str, str | int | float] = Field(default_factory=dict)

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, v: dict[str, str | int | float]) -> dict[str, str | int | float]:
        for name, q in v.items():
            try:
                parse_quantity(q)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return v

    @model_validator(mode="after")
    def _requests_within_limits(self) -> "ResourceRequirements":
        for name, limit in self.limits.items():
            if name in self.requests and parse_quantity(self.requests[name]) > parse_quantity(limit):
                raise ValueError(f"requests.{name} must be less than or equal to limits.{name}")
        return self

    def request(self, name: str) -> str | int | float | None:
        """The effective request: the API server defaults a missing request to the limit."""
        return self.requests.get(name, self.limits.get(name))


class ExecAction(_Model):
    command: list[str] = Field(min_length=1)


class HTTPHeader(_Model):
    name: str
    value: str


class HTTPGetAction(_Model):
    path: str = "/"
    port: int | str
    host: str | None = None
    scheme: Literal["HTTP", "HTTPS"] = "HTTP"
    httpHeaders: list[HTTPHeader] = Field(default_factory=list)


class SleepAction(_Model):
    seconds: int = Field(ge=0)


class TCPSocketAction(_Model):
    port: int | str
    host: str | None = None


class GRPCAction(_Model):
    port: int = Field(ge=1, le=65535)
    service: str | None = None


class Probe(_Model):
    exec: ExecAction | None = None
    httpGet: HTTPGetAction | None = None
    tcpSocket: TCPSocketAction | None = None
    grpc: GRPCAction | None = None
    initialDelaySeconds: int = Field(default=0, ge=0)
    periodSeconds: int = Field(default=10, ge=1)
    timeoutSeconds: int = Field(default=1, ge=1)
    successThreshold: int = Field(default=1, ge=1)
    failureThreshold: int = Field(default=3, ge=1)
    terminationGracePeriodSeconds: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one(self) -> "Probe":
        if sum(x is not None for x in (self.exec, self.httpGet, self.tcpSocket, self.grpc)) != 1:
            raise ValueError("must specify exactly one of exec, httpGet, tcpSocket or grpc")
        return self


class LifecycleHandler(_Model):
    exec: ExecAction | None = None
    httpGet: HTTPGetAction | None = None
    sleep: SleepAction | None = None

    @model_validator(mode="after")
    def _one(self) -> "LifecycleHandler":
        if sum(x is not None for x in (self.exec, self.httpGet, self.sleep)) != 1:
            raise ValueError("must specify exactly one of exec, httpGet or sleep")
        return self


class Lifecycle(_Model):
    postStart: LifecycleHandler | None = None
    preStop: LifecycleHandler | None = None


# A capability as the runtime takes it: a name with or without CAP_, or ALL (any case; the
# runtime rejects a name it does not know, with the container's CreateContainerError).
CAPABILITY = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


class Capabilities(_Model):
    add: list[str] = Field(default_factory=list, max_length=64)
    drop: list[str] = Field(default_factory=list, max_length=64)

    @field_validator("add", "drop")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not CAPABILITY.match(name):
                raise ValueError(f"{name[:80]!r} is not a capability name")
        return v


class SeccompProfile(_Model):
    type: Literal["RuntimeDefault", "Unconfined", "Localhost"]
    # Localhost: a file beneath the kubelet's seccomp dir (<root-dir>/seccomp), never outside it.
    localhostProfile: str | None = None

    @model_validator(mode="after")
    def _localhost(self) -> "SeccompProfile":
        if self.type == "Localhost":
            path = self.localhostProfile or ""
            parts = path.split("/")
            if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
                raise ValueError("localhostProfile must be a relative path beneath the seccomp profile "
                                 f"directory, without '..' (got {path[:100]!r})")
        elif self.localhostProfile is not None:
            raise ValueError("localhostProfile is only for type Localhost")
        return self


# A sysctl name as the API server validates it; the value is one line of printable text.
SYSCTL_NAME = re.compile(r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$")


class Sysctl(_Model):
    name: str
    value: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if len(v) > 253 or not SYSCTL_NAME.match(v):
            raise ValueError(f"{v[:80]!r} is not a sysctl name")
        return v

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        if len(v) > 4096 or any(ord(ch) < 32 and ch != "\t" for ch in v):
            raise ValueError("a sysctl value is one line of text")
        return v


class SELinuxOptions(_Model):
    """Handed to the runtime as the kubelet does; it applies them where SELinux is enabled."""
    user: str = Field(default="", pattern=r"^[A-Za-z0-9_.:-]*$", max_length=256)
    role: str = Field(default="", pattern=r"^[A-Za-z0-9_.:-]*$", max_length=256)
    type: str = Field(default="", pattern=r"^[A-Za-z0-9_.:-]*$", max_length=256)
    level: str = Field(default="", pattern=r"^[A-Za-z0-9_.:,-]*$", max_length=256)


_WINDOWS_ONLY = "Windows options cannot apply on a Linux node"


PROC_MOUNT_TYPES = ("Default", "Unmasked")


class SecurityContext(_Model):
    WHY_NOT = {"windowsOptions": _WINDOWS_ONLY}

    # Default: the runtime masks and makes read-only the kubelet's /proc and /sys paths;
    # Unmasked: neither (ProcMountType, GA in 1.36), only in a user namespace of the pod's own.
    procMount: str | None = None
    runAsUser: int | None = Field(default=None, ge=0)
    runAsGroup: int | None = Field(default=None, ge=0)
    runAsNonRoot: bool | None = None
    privileged: bool | None = None
    readOnlyRootFilesystem: bool | None = None
    allowPrivilegeEscalation: bool | None = None
    capabilities: Capabilities | None = None
    seccompProfile: SeccompProfile | None = None
    seLinuxOptions: SELinuxOptions | None = None

    @field_validator("procMount")
    @classmethod
    def _proc_mount(cls, v: str | None) -> str | None:
        return one_of(v, PROC_MOUNT_TYPES)

    @model_validator(mode="after")
    def _escalation(self) -> "SecurityContext":
        """The API server's rule: no_new_privs cannot hold for a privileged or CAP_SYS_ADMIN process."""
        if self.allowPrivilegeEscalation is False:
            if self.privileged:
                raise ValueError("cannot set `allowPrivilegeEscalation` to false and `privileged` to true")
            if self.capabilities is not None and "CAP_SYS_ADMIN" in self.capabilities.add:
                raise ValueError("cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN")
        return self


SUPPLEMENTAL_GROUPS_POLICIES = ("Merge", "Strict")


class PodSecurityContext(_Model):
    WHY_NOT = {"windowsOptions": _WINDOWS_ONLY}

    runAsUser: int | None = Field(default=None, ge=0)
    runAsGroup: int | None = Field(default=None, ge=0)
    runAsNonRoot: bool | None = None
    supplementalGroups: list[int] = Field(default_factory=list)
    # Merge (the default): the groups of the image's /etc/group for the user as well; Strict: only
    # those named here (SupplementalGroupsPolicy, GA in 1.35; admitted where the runtime can).
    supplementalGroupsPolicy: str | None = None
    seccompProfile: SeccompProfile | None = None
    sysctls: list[Sysctl] = Field(default_factory=list, max_length=64)
    fsGroup: int | None = Field(default=None, ge=0)
    fsGroupChangePolicy: Literal["Always", "OnRootMismatch"] | None = None
    seLinuxOptions: SELinuxOptions | None = None
    # How the kubelet relabels volumes on an SELinux host (SELinuxChangePolicy, GA in 1.36). pykubelet
    # relabels no volume, as the kubelet on a host without SELinux: checked, and nothing to do.
    seLinuxChangePolicy: Literal["Recursive", "MountOption"] | None = None

    @field_validator("supplementalGroupsPolicy")
    @classmethod
    def _groups_policy(cls, v: str | None) -> str | None:
        return one_of(v, SUPPLEMENTAL_GROUPS_POLICIES)

    @field_validator("sysctls")
    @classmethod
    def _unique_sysctls(cls, v: list[Sysctl]) -> list[Sysctl]:
        names = [s.name for s in v]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"[{i}]: Duplicate value: {name!r} is set twice")
        return v


class PodDNSConfigOption(_Model):
    name: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._-]+$")
    value: str | None = Field(default=None, max_length=255, pattern=r"^[A-Za-z0-9._:-]*$")


# The API server's limits on a pod's search path (MaxDNSSearchPaths, MaxDNSSearchListChars since
# 1.28); a search domain is a subdomain that may hold '_' and end in '.', or "." alone
# (RelaxedDNSSearchValidation). Each becomes a word of resolv.conf's search line.
MAX_DNS_SEARCHES, MAX_DNS_SEARCH_CHARS = 32, 2048
DNS_SEARCH = re.compile(r"^_?[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\._?[a-z0-9]([-_a-z0-9]*[a-z0-9])?)*$")


class PodDNSConfig(_Model):
    nameservers: list[str] = Field(default_factory=list, max_length=3)
    searches: list[str] = Field(default_factory=list, max_length=MAX_DNS_SEARCHES)
    options: list[PodDNSConfigOption] = Field(default_factory=list, max_length=32)

    @field_validator("nameservers")
    @classmethod
    def _servers(cls, v: list[str]) -> list[str]:
        return [ip_address(ip) for ip in v]

    @field_validator("searches")
    @classmethod
    def _searches(cls, v: list[str]) -> list[str]:
        if len(" ".join(v)) > MAX_DNS_SEARCH_CHARS:
            raise ValueError(f"must not have more than {MAX_DNS_SEARCH_CHARS} characters (including spaces) "
                             "in the search list")
        for domain in v:
            if domain != "." and (len(domain) > 253 or not DNS_SEARCH.match(domain.removesuffix("."))):
                raise ValueError(f"search domain {domain[:80]!r} is not a DNS name (lowercase RFC 1123 "
                                 "subdomain, '_' allowed)")
        return v


RECURSIVE_READ_ONLY_MODES = ("Disabled", "IfPossible", "Enabled")


class VolumeMount(_Model):
    name: str
    mountPath: str
    readOnly: bool = False
    subPath: str = ""
    subPathExpr: str = ""
    mountPropagation: Literal["None", "HostToContainer", "Bidirectional"] | None = None
    # Read-only all the way down, submounts included (shared/model/recursive_read_only.py).
    recursiveReadOnly: str | None = None

    @field_validator("recursiveReadOnly")
    @classmethod
    def _rro_mode(cls, v: str | None) -> str | None:
        return one_of(v, RECURSIVE_READ_ONLY_MODES)

    @model_validator(mode="after")
    def _rro_read_only(self) -> "VolumeMount":
        """The API server's rules for a recursive read-only mount."""
        if self.recursiveReadOnly in ("Enabled", "IfPossible"):
            if not self.readOnly:
                raise ValueError("recursiveReadOnly: Forbidden: may only be specified when readOnly is true")
            if self.mountPropagation not in (None, "None"):
                raise ValueError("recursiveReadOnly: Forbidden: may only be specified when mountPropagation is None "
                                 "or not specified")
        return self

    @field_validator("mountPath")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"{v!r} must be an absolute path")
        return v

    @field_validator("subPath")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.split("/"):
            raise ValueError(f"{v!r} must be a relative path without '..'")
        return v

    @model_validator(mode="after")
    def _supported(self) -> "VolumeMount":
        if self.subPathExpr:
            raise ValueError("subPathExpr is not supported by pykubelet; use subPath")
        return self


# The volume sources pykubelet mounts (pkg/volume/* of the kubelet). Their fields stay untyped
# dicts here: the volume service reads them and reports a bad or unsupported one as FailedMount
# on the pod (as the kubelet does), rather than refusing the whole pod.
VOLUME_SOURCES = ("emptyDir", "hostPath", "configMap", "secret", "downwardAPI", "projected", "csi",
                  "persistentVolumeClaim", "image")


def image_reference(v: str) -> str:
    """A container's image or an image volume's reference, as the API server takes it: it becomes
    a CRI PullImage argument, so no empty name and no whitespace around it."""
    if not v.strip():
        raise ValueError("must not be empty")
    if v != v.strip():
        raise ValueError("must not have leading or trailing whitespace")
    return v


def default_pull_policy(image: str) -> Literal["Always", "IfNotPresent"]:
    """The API server's default for a pull policy left out: Always for :latest (or no tag)."""
    return "Always" if image_tag(image) == "latest" else "IfNotPresent"


class ImageVolumeSource(_Model):
    """volumes[].image: an OCI image's filesystem, mounted read-only by the runtime. pod-sync
    pulls it as it pulls container images (services/pod_sync/image_volumes.py)."""

    reference: str
    pullPolicy: Literal["Always", "IfNotPresent", "Never"] | None = None

    @field_validator("reference")
    @classmethod
    def _reference(cls, v: str) -> str:
        return image_reference(v)

    @model_validator(mode="after")
    def _default_pull_policy(self) -> "ImageVolumeSource":
        if self.pullPolicy is None:
            self.pullPolicy = default_pull_policy(self.reference)
        return self


class Volume(_Model):
    REFUSE_UNKNOWN = False  # the source is the one other field; the volume service judges it

    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return dns_label(v)

    @model_validator(mode="before")
    @classmethod
    def _one_source(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = [k for k in data if k != "name"]
            if len(given) != 1:
                raise ValueError(f"exactly one volume source must be given, found {given or 'none'}")
            if not isinstance(data[given[0]], dict):
                raise ValueError(f"{given[0]} must be an object")
        return data

    @model_validator(mode="after")
    def _image_source(self) -> "Volume":
        # Parsed here, not by the volume service: pod-sync pulls the image, so a bad reference
        # refuses the pod as the API server would, naming the field.
        if self.kind == "image":
            try:
                ImageVolumeSource.model_validate(self.source)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(["image", *(str(p) for p in err["loc"])])
                raise ValueError(f"{where}: {err['msg'].removeprefix('Value error, ')}") from None
        return self

    @property
    def image(self) -> ImageVolumeSource | None:
        """The image volume's source, parsed and defaulted; None for other kinds."""
        return ImageVolumeSource.model_validate(self.source) if self.kind == "image" else None

    @property
    def kind(self) -> str:
        """The volume source's field name: emptyDir, hostPath, ... (maybe one pykubelet lacks)."""
        return next(iter(self.model_extra or {}))

    @property
    def source(self) -> dict[str, Any]:
        source: dict[str, Any] = (self.model_extra or {})[self.kind]  # an object: see _one_source
        return source


class ContainerResizePolicy(_Model):
    resourceName: Literal["cpu", "memory"]
    restartPolicy: Literal["NotRequired", "RestartContainer"] = "NotRequired"


class ContainerRestartRuleOnExitCodes(_Model):
    operator: Literal["In", "NotIn"]
    values: list[int] = Field(default_factory=list, max_length=255)


class ContainerRestartRule(_Model):
    """What to do when the container exits with one of these codes (ContainerRestartRules, on
    by default since 1.35); shared/model/restart_rules.py applies it."""

    action: str
    exitCodes: ContainerRestartRuleOnExitCodes | None = None

    @field_validator("action")
    @classmethod
    def _action(cls, v: str) -> str | None:
        return one_of(v, ("Restart", "RestartAllContainers"))

    @model_validator(mode="after")
    def _exit_codes(self) -> "ContainerRestartRule":
        if self.exitCodes is None:
            raise ValueError("exitCodes: Required value: must be specified")
        return self


class Container(_Model):
    WHY_NOT = {"volumeDevices": "raw block volumes are not supported by pykubelet"}

    name: str
    image: str
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    workingDir: str | None = None
    env: list[EnvVar] = Field(default_factory=list)
    envFrom: list[EnvFromSource] = Field(default_factory=list)
    ports: list[ContainerPort] = Field(default_factory=list)
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] | None = None
    terminationMessagePath: str = "/dev/termination-log"
    terminationMessagePolicy: Literal["File", "FallbackToLogsOnError"] = "File"
    # An init container with Always is a sidecar; otherwise the container's own restart policy,
    # over the pod's, with restartPolicyRules before it (ContainerRestartRules).
    restartPolicy: Literal["Always", "OnFailure", "Never"] | None = None
    restartPolicyRules: list[ContainerRestartRule] = Field(default_factory=list, max_length=20)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    resizePolicy: list[ContainerResizePolicy] = Field(default_factory=list)  # in-place resize (resize.py)
    lifecycle: Lifecycle | None = None
    securityContext: SecurityContext | None = None
    livenessProbe: Probe | None = None
    readinessProbe: Probe | None = None
    startupProbe: Probe | None = None
    stdin: bool = False
    stdinOnce: bool = False
    tty: bool = False
    volumeMounts: list[VolumeMount] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return dns_label(v)

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        return image_reference(v)

    @model_validator(mode="after")
    def _probe_thresholds(self) -> "Container":
        for kind in ("livenessProbe", "startupProbe"):
            probe = getattr(self, kind)
            if probe is not None and probe.successThreshold != 1:
                raise ValueError(f"{kind}.successThreshold must be 1")
        return self

    @model_validator(mode="after")
    def _bidirectional_only_privileged(self) -> "Container":
        privileged = self.securityContext is not None and bool(self.securityContext.privileged)
        for i, m in enumerate(self.volumeMounts):
            if m.mountPropagation == "Bidirectional" and not privileged:
                raise ValueError(f"volumeMounts[{i}].mountPropagation: Forbidden: Bidirectional mount propagation "
                                 "is available only to privileged containers")
        return self

    def probe(self, kind: str) -> "Probe | None":
        """kind is liveness, readiness or startup."""
        probe: Probe | None = getattr(self, f"{kind}Probe")
        return probe

    @model_validator(mode="after")
    def _default_pull_policy(self) -> "Container":
        if self.imagePullPolicy is None:
            self.imagePullPolicy = default_pull_policy(self.image)
        return self


class EphemeralContainer(Container):
    """A container added to a running pod (`kubectl debug`, the ephemeralcontainers
    subresource): started once in the pod's sandbox, never restarted, never probed. The API
    server refuses ports, probes, lifecycle and resources on it; a manifest that has them is
    refused here too."""

    WHY_NOT = {**Container.WHY_NOT, "ports": "ephemeral containers may not have ports",
               "livenessProbe": "ephemeral containers may not have probes",
               "readinessProbe": "ephemeral containers may not have probes",
               "startupProbe": "ephemeral containers may not have probes",
               "lifecycle": "ephemeral containers may not have lifecycle hooks",
               "resources": "ephemeral containers may not have resources"}
    # Namespace targeting: the process namespace of this container of the pod.
    targetContainerName: str | None = None

    @model_validator(mode="after")
    def _no_forbidden_fields(self) -> "EphemeralContainer":
        for name in ("ports", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle"):
            if getattr(self, name):
                raise ValueError(f"{name}: {self.WHY_NOT[name]}")
        if self.resources.requests or self.resources.limits:
            raise ValueError(f"resources: {self.WHY_NOT['resources']}")
        if self.restartPolicy is not None:
            raise ValueError("restartPolicy: ephemeral containers may not have a restart policy")
        if self.restartPolicyRules:
            raise ValueError("restartPolicyRules: ephemeral containers may not have restart rules")
        return self


def image_tag(image: str) -> str:
    """The tag of an image reference; 'latest' when none is given, '' for a digest."""
    if "@" in image:
        return ""
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else "latest"


class HostAlias(_Model):
    ip: str
    hostnames: list[str] = Field(default_factory=list)

    @field_validator("ip")
    @classmethod
    def _ip(cls, v: str) -> str:
        return ip_address(v)

    @field_validator("hostnames")
    @classmethod
    def _hostnames(cls, v: list[str]) -> list[str]:
        # Each becomes a field of a line in the pod's /etc/hosts: no whitespace, no newlines.
        for h in v:
            if len(h) > 253 or not DNS1123_SUBDOMAIN.match(h):
                raise ValueError(f"{h[:80]!r} must be a lowercase RFC 1123 subdomain")
        return v


class PodOS(_Model):
    # The API server allows these two; a Linux node admits only linux (admission.py).
    name: Literal["linux", "windows"]


class PodSpec(_Model):
    # The scheduler's, or filled in by the API server's admission; nothing for the node to do.
    OTHERS_ACT_ON = frozenset({"schedulerName", "tolerations", "preemptionPolicy", "topologySpreadConstraints",
                               "serviceAccount", "automountServiceAccountToken"})
    WHY_NOT = {
        "readinessGates": "not supported by pykubelet (the pod's Ready condition would ignore them)",
        "runtimeClassName": "RuntimeClass is not supported by pykubelet (every pod runs with the runtime's "
                            "default handler)",
        "overhead": "pod overhead (from a RuntimeClass) is not supported by pykubelet",
        "setHostnameAsFQDN": "not supported by pykubelet",
        "schedulingGates": "not supported by pykubelet",
        "resourceClaims": "dynamic resource allocation is not supported by pykubelet",
    }

    containers: list[Container] = Field(min_length=1)
    initContainers: list[Container] = Field(default_factory=list)
    ephemeralContainers: list[EphemeralContainer] = Field(default_factory=list)
    # true (or absent) runs in the node's user namespace; false gives the pod one of its own
    # (services/pod_sync/user_namespaces.py).
    hostUsers: bool | None = None
    restartPolicy: Literal["Always", "OnFailure", "Never"] = "Always"
    terminationGracePeriodSeconds: int = Field(default=30, ge=0)
    # Pod-level resources (PodLevelResources): the pod cgroup's requests and limits, which its
    # containers share; they decide its QoS class (shared/model/qos.py, services/pod_sync/pod_cgroup.py).
    resources: ResourceRequirements | None = None
    os: PodOS | None = None
    hostNetwork: bool = False
    hostname: str | None = None
    subdomain: str | None = None
    # The pod's hostname whatever its name, hostname and subdomain say (HostnameOverride, GA in
    # 1.37); a DNS subdomain of at most 64, and no FQDN is made from it.
    hostnameOverride: str | None = None
    dnsPolicy: Literal["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"] = "ClusterFirst"
    nodeName: str | None = None
    securityContext: PodSecurityContext = Field(default_factory=PodSecurityContext)
    serviceAccountName: str | None = None
    volumes: list[Volume] = Field(default_factory=list)
    enableServiceLinks: bool = True
    activeDeadlineSeconds: int | None = Field(default=None, ge=1)
    hostAliases: list[HostAlias] = Field(default_factory=list)
    imagePullSecrets: list[LocalObjectRef] = Field(default_factory=list, max_length=64)
    hostPID: bool = False
    hostIPC: bool = False
    shareProcessNamespace: bool | None = None
    dnsConfig: PodDNSConfig | None = None
    # Matched against the node's labels at admission (services/pod_sync/node_affinity.py); of
    # affinity, only nodeAffinity's required terms concern the node, the rest is the scheduler's.
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    affinity: dict[str, Any] | None = None
    # Set by the API server's Priority admission from priorityClassName; ranks pods for eviction.
    priority: int | None = None
    priorityClassName: str | None = None

    # The hostname (and FQDN with the subdomain) becomes the sandbox's hostname and a line of
    # the pod's /etc/hosts: RFC 1123 labels, as the API server requires.
    @field_validator("hostname", "subdomain")
    @classmethod
    def _host_label(cls, v: str | None) -> str | None:
        if v and (len(v) > 63 or not DNS1123_LABEL.match(v)):
            raise ValueError(f"{v[:80]!r} must be a lowercase RFC 1123 label (a-z, 0-9, '-', at most 63)")
        return v

    @model_validator(mode="after")
    def _hostname_override(self) -> "PodSpec":
        """The API server's rules (validateHostnameOverride)."""
        v = self.hostnameOverride
        if v is None:
            return self
        if self.hostNetwork:
            raise ValueError("hostnameOverride: Forbidden: may not be specified when hostNetwork is true")
        if self.model_extra and self.model_extra.get("setHostnameAsFQDN") is True:
            raise ValueError("hostnameOverride: Forbidden: may not be specified when setHostnameAsFQDN is true")
        if len(v) > 64:
            raise ValueError("hostnameOverride: Too long: may not be more than 64 bytes")
        if not DNS1123_SUBDOMAIN.match(v):
            raise ValueError(f"hostnameOverride: Invalid value: {go_quote(v)}: a lowercase RFC 1123 subdomain must "
                             "consist of lower case alphanumeric characters, '-' or '.', and must start and end "
                             "with an alphanumeric character (e.g. 'example.com')")
        return self

    @model_validator(mode="after")
    def _host_users(self) -> "PodSpec":
        """The API server's rule: a pod in a user namespace of its own shares none of the node's."""
        if self.hostUsers is False:
            for field in ("hostNetwork", "hostPID", "hostIPC"):
                if getattr(self, field):
                    raise ValueError(f"{field}: Forbidden: when `hostUsers` is false")
            return self
        # An unmasked /proc is only given to a pod whose root is not the node's.
        for kind, containers in (("initContainers", self.initContainers), ("containers", self.containers),
                                 ("ephemeralContainers", self.ephemeralContainers)):
            for i, c in enumerate(containers):
                if c.securityContext is not None and c.securityContext.procMount == "Unmasked":
                    raise ValueError(f'{kind}[{i}].securityContext.procMount: Invalid value: "Unmasked": '
                                     "`hostUsers` must be false to use `Unmasked`")
        return self

    @field_validator("resources")
    @classmethod
    def _pod_resources(cls, v: ResourceRequirements | None) -> ResourceRequirements | None:
        if v is not None:
            for name in [*v.requests, *v.limits]:
                if name not in ("cpu", "memory") and not name.startswith("hugepages-"):
                    raise ValueError(f"{name}: pod-level resources may only be cpu, memory and hugepages-*")
        return v

    @model_validator(mode="after")
    def _within_pod_resources(self) -> "PodSpec":
        """The API server's rules: no container asks for more than the pod (containers' requests
        together at most the pod's, each container's limit at most the pod's)."""
        if self.resources is None:
            return self
        for name, pod_limit in self.resources.limits.items():
            for c in self.containers:
                if name in c.resources.limits and parse_quantity(c.resources.limits[name]) > parse_quantity(pod_limit):
                    raise ValueError(f"containers[{c.name}].resources.limits.{name}: must be less than or equal "
                                     f"to pod limits of {pod_limit}")
        for name, pod_request in self.resources.requests.items():
            total = sum((parse_quantity(q) for c in self.containers if (q := c.resources.request(name)) is not None),
                        Decimal(0))
            if total > parse_quantity(pod_request):
                raise ValueError(f"resources.requests.{name}: must be greater than or equal to aggregate "
                                 f"container requests of {total}")
        return self

    @model_validator(mode="after")
    def _dns_none_has_servers(self) -> "PodSpec":
        if self.dnsPolicy == "None" and not (self.dnsConfig and self.dnsConfig.nameservers):
            raise ValueError("dnsConfig.nameservers: Required value: must provide at least one DNS nameserver "
                             "when `dnsPolicy` is None")
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> "PodSpec":
        count = len(self.initContainers) + len(self.containers) + len(self.ephemeralContainers)
        if count > MAX_CONTAINERS:
            raise ValueError(f"has {count} containers; pykubelet runs at most {MAX_CONTAINERS} in a pod")
        seen: set[str] = set()
        for c in self.all_containers:
            if c.name in seen:
                raise ValueError(f"container name {c.name!r} is used twice")
            seen.add(c.name)
        for e in self.ephemeralContainers:
            if e.targetContainerName and e.targetContainerName not in {c.name for c in self.initContainers
                                                                       + self.containers}:
                raise ValueError(f"ephemeralContainers[{e.name}].targetContainerName: "
                                 f"{e.targetContainerName!r} is not a container of the pod")
        volumes = [v.name for v in self.volumes]
        for name in volumes:
            if volumes.count(name) > 1:
                raise ValueError(f"volume name {name!r} is used twice")
        for c in self.all_containers:
            paths = [m.mountPath for m in c.volumeMounts]
            for m in c.volumeMounts:
                if m.name not in volumes:
                    raise ValueError(f"container {c.name!r}: volumeMounts {m.name!r} is not a volume of the pod")
                if paths.count(m.mountPath) > 1:
                    raise ValueError(f"container {c.name!r}: mountPath {m.mountPath!r} is used twice")
        return self

    @model_validator(mode="after")
    def _env_file_volumes(self) -> "PodSpec":
        """The API server's rule: a fileKeyRef reads from an emptyDir volume of the pod."""
        kinds = {v.name: v.kind for v in self.volumes}
        for kind, containers in (("initContainers", self.initContainers), ("containers", self.containers),
                                 ("ephemeralContainers", self.ephemeralContainers)):
            for i, c in enumerate(containers):
                for j, e in enumerate(c.env):
                    ref = (e.valueFrom or {}).get("fileKeyRef")
                    if ref is None:
                        continue
                    where = f"{kind}[{i}].env[{j}].valueFrom.fileKeyRef.volumeName"
                    name = ref["volumeName"]
                    if name not in kinds:
                        raise ValueError(f"{where}: Not found: {go_quote(name)}")
                    if kinds[name] != "emptyDir":
                        raise ValueError(f"{where}: Invalid value: {go_quote(name)}: referenced volume must be of "
                                         "type emptyDir")
        return self

    @model_validator(mode="after")
    def _restart_rules(self) -> "PodSpec":
        """The API server's rules for containers' own restart policies and rules."""
        for kind, containers in (("initContainers", self.initContainers), ("containers", self.containers)):
            for i, c in enumerate(containers):
                if c.restartPolicyRules and c.restartPolicy is None:
                    raise ValueError(f"{kind}[{i}].restartPolicy: Required value: must specify restartPolicy when "
                                     "restart rules are used")
        # A sidecar (restartPolicy Always) may have rules too: with RestartAllContainersOnContainerExits
        # (on by default since 1.36) the API server allows them there.
        return self

    @property
    def all_containers(self) -> list[Container]:
        """Init, app and ephemeral containers, in that order."""
        return [*self.initContainers, *self.containers, *self.ephemeralContainers]

    @property
    def sidecars(self) -> list[Container]:
        """Restartable init containers: started in init order, then kept running."""
        return [c for c in self.initContainers if c.restartPolicy == "Always"]


# A UID names per-pod directories on the node (<root>/pods/<uid>): one path component, no more.
POD_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ObjectMeta(_Model):
    REFUSE_UNKNOWN = False  # labels, owners, timestamps...: what a pod is, not what it asks of the node

    name: str
    namespace: str = "default"
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("uid")
    @classmethod
    def _uid(cls, v: str | None) -> str | None:
        if v is not None and (not POD_UID.match(v) or v.strip(".") == ""):
            raise ValueError(f"{v[:80]!r} is not a UID (letters, digits, '-', '_', '.'; at most 128)")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if len(v) > 253 or not DNS1123_SUBDOMAIN.match(v):
            raise ValueError(f"{v!r} must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.')")
        return v

    @field_validator("namespace")
    @classmethod
    def _ns(cls, v: str) -> str:
        if len(v) > 63 or not DNS1123_LABEL.match(v):
            raise ValueError(f"{v!r} must be a lowercase RFC 1123 label")
        return v


class Pod(_Model):
    OTHERS_ACT_ON = frozenset({"status"})  # what the API server last heard; the node reports its own

    apiVersion: Literal["v1"] = "v1"
    kind: Literal["Pod"] = "Pod"
    metadata: ObjectMeta
    spec: PodSpec

    @property
    def uid(self) -> str:
        return self.metadata.uid or ""

    @property
    def full_name(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def to_manifest(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def from_manifest(cls, data: dict[str, Any]) -> "Pod":
        return cls.model_validate(data)


class PodCache:
    """Parsed pods by UID, so services looking at the same pods on every event validate each
    once. A static pod's manifest never changes for its UID (an edit is a new UID); an API pod's
    mutable fields (labels, annotations, images, activeDeadlineSeconds) change with its
    resourceVersion, which invalidates the entry. Used from a service's loop and from its store
    thread (Store.run) alike, hence the lock; a manifest is parsed outside it."""

    def __init__(self, limit: int = 4096) -> None:
        self._pods: dict[str, tuple[str, Pod]] = {}
        self._lock = threading.Lock()
        self.limit = limit

    def get(self, uid: str, manifest: dict[str, Any]) -> Pod:
        version = str((manifest.get("metadata") or {}).get("resourceVersion", ""))
        cached = self._pods.get(uid)
        if cached is not None and cached[0] == version:
            return cached[1]
        pod = Pod.from_manifest(manifest)
        with self._lock:
            if len(self._pods) >= self.limit:
                self._pods.clear()
            self._pods[uid] = (version, pod)
        return pod

    def forget(self, uid: str) -> None:
        with self._lock:
            self._pods.pop(uid, None)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def __len__(self) -> int:
        return len(self._pods)

    def retain(self, uids: set[str]) -> None:
        """Drop every pod not in uids."""
        with self._lock:
            for uid in [u for u in self._pods if u not in uids]:
                del self._pods[uid]


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(pod)"


def format_errors(exc: ValidationError) -> str:
    msgs = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "Required value"
        msgs.append(f"{_loc(err['loc'])}: {msg}")
    return "; ".join(msgs)


def validate_pod(data: Any) -> Pod:
    if not isinstance(data, dict):
        raise ManifestInvalid(f"expected a Pod object, got {type(data).__name__}")
    too_much = pod_limits.exceeded(data)  # before parsing: parsing is what the caps bound
    if too_much:
        raise ManifestInvalid(too_much, pod_limits.LIMIT_EXCEEDED)
    try:
        return Pod.model_validate(data)
    except ValidationError as exc:
        raise ManifestInvalid(format_errors(exc)) from None


# The API server refuses objects above 1.5 MiB; a manifest file may be no larger.
MAX_MANIFEST_BYTES = 3 * 2**19
# YAML aliases let a few lines stand for an exponential document ("billion laughs"); a pod needs few.
MAX_ALIASES = 64


def _yaml_error(exc: yaml.YAMLError) -> str:
    """Where and what, never the offending text: the file may be anything a symlink points at."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"not valid YAML/JSON: {problem}{where}"


def parse_manifest_text(text: str) -> object:
    """Decode one YAML or JSON document; JSON is YAML, so one parser serves both. The document
    may be any YAML value, not only an object: validate_pod checks that."""
    if len(text.encode(errors="replace")) > MAX_MANIFEST_BYTES:
        raise ManifestInvalid(f"is larger than {MAX_MANIFEST_BYTES} bytes (1.5 MiB, the API server's limit)")
    try:
        aliases = sum(1 for e in safe_yaml.events(text) if isinstance(e, yaml.AliasEvent))
        if aliases > MAX_ALIASES:
            raise ManifestInvalid(f"uses {aliases} YAML aliases; at most {MAX_ALIASES} are accepted")
        docs = [d for d in safe_yaml.load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestInvalid(_yaml_error(exc)) from None
    if not docs:
        raise ManifestInvalid("file is empty")
    if len(docs) > 1:
        raise ManifestInvalid(f"holds {len(docs)} documents; a static pod file holds exactly one Pod")
    return docs[0]


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
