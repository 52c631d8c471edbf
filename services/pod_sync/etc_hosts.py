"""The pod's /etc/hosts, managed as the kubelet manages it.

Written to <root>/pods/<uid>/etc-hosts each time a container is created and bind-mounted at
/etc/hosts in every container that does not mount something there itself. A pod on the pod
network gets localhost entries and its own IP with its hostname (and FQDN when it has a
subdomain); a host-network pod gets the node's /etc/hosts. Both end with spec.hostAliases.
"""

from __future__ import annotations

import os
from pathlib import Path

from shared.host.node_dirs import private_dir
from shared.model.podspec import Container, Pod

ETC_HOSTS = "/etc/hosts"
HEADER = "# Kubernetes-managed hosts file.\n"
HEADER_HOST_NETWORK = "# Kubernetes-managed hosts file (host network).\n"
LOCAL_ENTRIES = ("127.0.0.1\tlocalhost\n"
                 "::1\tlocalhost ip6-localhost ip6-loopback\n"
                 "fe00::0\tip6-localnet\n"
                 "fe00::0\tip6-mcastprefix\n"
                 "fe00::1\tip6-allnodes\n"
                 "fe00::2\tip6-allrouters\n")


def wants_managed_hosts(c: Container, pod_ip: str) -> bool:
    """Not before the pod has an IP, and not over a container's own mount at /etc/hosts."""
    return bool(pod_ip) and not any(m.mountPath == ETC_HOSTS for m in c.volumeMounts)


def _entry(*words: str) -> str:
    """One line of the file. The pod's fields were validated where the pod entered; a word that
    still holds whitespace or a control character would write words or lines of its own
    (another name for an address), so it is refused here as well."""
    for word in words:
        if not word or any(ch.isspace() or not ch.isprintable() for ch in word):
            raise ValueError(f"refusing to write the pod's /etc/hosts: {word[:80]!r} is not a single word")
    return "\t".join(words) + "\n"


def hosts_content(pod: Pod, pod_ip: str, hostname: str, cluster_domain: str,
                  node_hosts: str | None = None) -> str:
    if pod.spec.hostNetwork:
        text = HEADER_HOST_NETWORK + (node_hosts or "")
    else:
        text = HEADER + LOCAL_ENTRIES
        if pod.spec.subdomain and pod.spec.hostnameOverride is None:  # an override has no FQDN
            domain = f"{pod.spec.subdomain}.{pod.metadata.namespace}.svc.{cluster_domain}"
            text += _entry(pod_ip, f"{hostname}.{domain}", hostname)
        else:
            text += _entry(pod_ip, hostname)
    if pod.spec.hostAliases:
        text += "\n# Entries added by HostAliases.\n"
        text += "".join(_entry(a.ip, *a.hostnames) for a in pod.spec.hostAliases)
    return text


def write_hosts_file(pod_dir: Path, content: str) -> Path:
    """Replace <pod dir>/etc-hosts atomically (a running container may be reading it)."""
    private_dir(pod_dir)
    path = pod_dir / "etc-hosts"
    tmp = pod_dir / ".etc-hosts.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    # 0644 whatever the process umask: a container running as any user reads its /etc/hosts.
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(content)
    os.replace(tmp, path)
    return path


def node_hosts_file(path: Path = Path(ETC_HOSTS)) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
