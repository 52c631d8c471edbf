"""A pod's DNS (resolv.conf), as the kubelet builds it for the sandbox.

- ClusterFirst (not host network) with clusterDNS set: the cluster's servers, the namespace's
  search path then the node's search domains, ndots:5. ClusterFirstWithHostNet the same for
  host-network pods.
- Default (and ClusterFirst without clusterDNS, or on the host network): the node's resolv.conf.
The node's resolv.conf is the file resolvConf names (the kubelet's default /etc/resolv.conf;
"" for none).
- None: nothing but the pod's dnsConfig.
Then spec.dnsConfig is appended: nameservers and searches after the policy's (duplicates
dropped; at most 3 servers and 32 search domains, the kubelet's limits), options by name (the
pod's value wins). The runtime writes each server, search domain and option as a word of the
sandbox's resolv.conf.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from cri_api.v1 import api_pb2 as cri

from shared.config.settings import NodeSettings
from shared.model.podspec import MAX_DNS_SEARCHES, Pod, PodDNSConfigOption

HOST_RESOLV_CONF = Path("/etc/resolv.conf")
MAX_SERVERS, MAX_SEARCHES = 3, MAX_DNS_SEARCHES


def host_resolv_conf(path: Path = HOST_RESOLV_CONF) -> cri.DNSConfig:
    """The node's resolver settings (nameserver, search, options lines)."""
    out = cri.DNSConfig()
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        if fields[0] == "nameserver":
            out.servers.append(fields[1])
        elif fields[0] in ("search", "domain"):
            out.searches[:] = fields[1:]  # the last one wins, as in the resolver
        elif fields[0] == "options":
            out.options.extend(fields[1:])
    return out


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _merge_options(base: list[str], extra: Iterable[PodDNSConfigOption]) -> list[str]:
    merged: dict[str, str] = {}
    for opt in base:
        name, _, value = opt.partition(":")
        merged[name] = opt
    for o in extra:
        merged[o.name] = f"{o.name}:{o.value}" if o.value else o.name
    return list(merged.values())


def _single_words(config: cri.DNSConfig) -> cri.DNSConfig:
    """The pod's dnsConfig was validated where the pod entered; a value that still holds
    whitespace or a control character would become a line of resolv.conf of its own (another
    nameserver), so it is refused here as well, before the runtime writes the file."""
    for word in (*config.servers, *config.searches, *config.options):
        if not word or any(ch.isspace() or not ch.isprintable() for ch in word):
            raise ValueError(f"refusing to write the pod's resolv.conf: {word[:80]!r} is not a single word")
    return config


def dns_config(pod: Pod, settings: NodeSettings) -> cri.DNSConfig | None:
    """None: the runtime copies the node's resolv.conf (/etc/resolv.conf) as it is. ValueError:
    a value that cannot be written into resolv.conf."""
    k = settings.kubelet
    policy = pod.spec.dnsPolicy
    cluster_first = (policy == "ClusterFirst" and not pod.spec.hostNetwork) or policy == "ClusterFirstWithHostNet"
    extra = pod.spec.dnsConfig
    host = cri.DNSConfig() if not k.resolv_conf else host_resolv_conf(Path(k.resolv_conf))
    if cluster_first and k.cluster_dns:
        searches = list(host.searches)
        if k.cluster_domain:
            ns = pod.metadata.namespace
            searches = [f"{ns}.svc.{k.cluster_domain}", f"svc.{k.cluster_domain}", k.cluster_domain, *searches]
        base = cri.DNSConfig(servers=k.cluster_dns, searches=_unique(searches)[:MAX_SEARCHES], options=["ndots:5"])
    elif policy == "None":
        base = cri.DNSConfig()
    elif extra is None and Path(k.resolv_conf) == HOST_RESOLV_CONF:
        return None
    else:
        base = host
    if extra is None:
        return _single_words(base)
    return _single_words(cri.DNSConfig(servers=_unique([*base.servers, *extra.nameservers])[:MAX_SERVERS],
                                       searches=_unique([*base.searches, *extra.searches])[:MAX_SEARCHES],
                                       options=_merge_options(list(base.options), extra.options)))
