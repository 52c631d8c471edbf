"""Caps on how much of anything one pod may ask for, checked on the raw manifest before it is
parsed, so that no pod makes a service hold or walk more than these (each service keeps the
parsed pods it works on; one 1.5 MiB manifest of tiny entries parses into ~30 times its size).

The API server caps only the object's size (1.5 MiB in etcd) and the annotations (256 KiB), and
static pods skip it: a hostile pod could otherwise hold tens of thousands of containers, env
entries or volumes. The caps are far above what real pods use (a pod with a dozen sidecars and
a few hundred variables each is well inside them). What a container is given to exec is
bounded separately, once expanded: services/pod_sync/exec_strings.py.
"""

from __future__ import annotations

from typing import Any

# The pod's status reason when it is refused for passing a cap.
LIMIT_EXCEEDED = "PodLimitExceeded"

MAX_CONTAINERS = 128           # init, app and ephemeral containers; checks between them are quadratic
MAX_ENV = 4096                 # env entries of all the pod's containers together
MAX_ENV_FROM = 256             # envFrom sources, all containers: each is an API read per container start
MAX_PORTS = 1024               # container ports, all containers: hostPorts become the sandbox's port mappings
MAX_VOLUMES = 512
MAX_VOLUME_MOUNTS = 2048       # all containers
MAX_VOLUME_ITEMS = 1024        # files one configMap, secret, downwardAPI or projected volume names
MAX_PROJECTED_SOURCES = 128    # sources of one projected volume
# The API server's TotalAnnotationSizeLimitB: keys and values together. A static pod's
# annotations reach its mirror pod, the sandbox and downward API files.
MAX_ANNOTATIONS_BYTES = 256 * 1024


def _list(obj: Any, key: str) -> list[Any]:
    """obj[key] when it is a list; anything else is for the pod's validation to reject."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, list) else []


def exceeded(manifest: Any) -> str | None:
    """The first cap the manifest passes, named by field and limit; None when within all."""
    meta, spec = (manifest.get(k) if isinstance(manifest, dict) else None for k in ("metadata", "spec"))
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if isinstance(annotations, dict):
        size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
        if size > MAX_ANNOTATIONS_BYTES:
            return (f"metadata.annotations: Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes "
                    f"(has {size})")
    containers = [(f"spec.{kind}[{i}]", c) for kind in ("initContainers", "containers", "ephemeralContainers")
                  for i, c in enumerate(_list(spec, kind))]
    if len(containers) > MAX_CONTAINERS:
        return (f"spec.containers: has {len(containers)} containers; pykubelet runs at most {MAX_CONTAINERS} in a "
                f"pod (init, app and ephemeral containers together)")
    for field, cap in (("env", MAX_ENV), ("envFrom", MAX_ENV_FROM), ("ports", MAX_PORTS),
                       ("volumeMounts", MAX_VOLUME_MOUNTS)):
        total = 0
        for where, c in containers:
            total += len(_list(c, field))
            if total > cap:
                return (f"{where}.{field}: the pod has more than {cap} {field} entries in all its containers "
                        f"(the most pykubelet accepts)")
    volumes = _list(spec, "volumes")
    if len(volumes) > MAX_VOLUMES:
        return f"spec.volumes: has {len(volumes)} volumes; pykubelet accepts at most {MAX_VOLUMES}"
    for i, volume in enumerate(volumes):
        why = _volume_exceeds(volume)
        if why:
            return f"spec.volumes[{i}].{why}"
    return None


def _volume_exceeds(volume: Any) -> str | None:
    for kind in ("configMap", "secret", "downwardAPI"):
        items = len(_list(volume.get(kind) if isinstance(volume, dict) else None, "items"))
        if items > MAX_VOLUME_ITEMS:
            return f"{kind}.items: has {items} items; a volume may name at most {MAX_VOLUME_ITEMS} files"
    projected = volume.get("projected") if isinstance(volume, dict) else None
    sources = _list(projected, "sources")
    if len(sources) > MAX_PROJECTED_SOURCES:
        return f"projected.sources: has {len(sources)} sources; pykubelet accepts at most {MAX_PROJECTED_SOURCES}"
    items = sum(len(_list(source.get(kind) if isinstance(source, dict) else None, "items"))
                for source in sources for kind in ("configMap", "secret", "downwardAPI"))
    if items > MAX_VOLUME_ITEMS:
        return f"projected.sources: name {items} items together; a volume may name at most {MAX_VOLUME_ITEMS} files"
    return None
