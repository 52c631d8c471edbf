"""The node's client certificate in the cert dir, kept as the kubelet keeps it: each issued pair
(certificate and key in one PEM file, mode 0600) is `kubelet-client-<time>.pem`, and
`kubelet-client-current.pem` links to the newest. The kubeconfig a TLS bootstrap writes names
the link, so a renewed certificate needs no new kubeconfig; every service's API client loads the
pair again when the link changes (shared/api/client.py).

While a bootstrap request is pending its key is kept in `kubelet-client.key.tmp`: a restart
finds its request again (the CSR's name is digested from that key) instead of making another.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import yaml

from shared.api import csr
from shared.api.kubeconfig import KubeconfigError, client_certificate, cluster_entry

SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
# An EC key signs only: "key encipherment" is for RSA keys (the kubelet asks the same).
USAGES = ["digital signature", "client auth"]
CURRENT = "kubelet-client-current.pem"
PENDING_KEY = "kubelet-client.key.tmp"


def current_path(cert_dir: Path) -> Path:
    return cert_dir / CURRENT


def current_pem(cert_dir: Path) -> bytes | None:
    try:
        return current_path(cert_dir).read_bytes()
    except OSError:
        return None


def _write_private(path: Path, data: bytes) -> None:
    """Written whole, then renamed into place: a reader sees the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def store(cert_dir: Path, cert_pem: bytes, key_pem: bytes) -> Path:
    """Keep an issued pair and point the current link at it; returns the pair's file."""
    cert_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = dt.datetime.now().strftime("%Y-%m-%d-%H-%M-%S")  # local time, as the kubelet's names
    pair = cert_dir / f"kubelet-client-{stamp}.pem"
    if pair.exists():  # a second pair within the same second
        pair = cert_dir / f"kubelet-client-{stamp}-{os.getpid()}-{dt.datetime.now().microsecond}.pem"
    _write_private(pair, cert_pem + key_pem)
    # The link is replaced by a rename: a reader finds the old pair or the new one, never none.
    link_tmp = cert_dir / "kubelet-client-updated.pem"
    link_tmp.unlink(missing_ok=True)
    link_tmp.symlink_to(pair.absolute())
    os.replace(link_tmp, current_path(cert_dir))
    return pair


def pending_key(cert_dir: Path) -> bytes | None:
    try:
        return (cert_dir / PENDING_KEY).read_bytes()
    except OSError:
        return None


def keep_pending_key(cert_dir: Path, key_pem: bytes) -> None:
    cert_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_private(cert_dir / PENDING_KEY, key_pem)


def drop_pending_key(cert_dir: Path) -> None:
    (cert_dir / PENDING_KEY).unlink(missing_ok=True)


def write_kubeconfig(path: Path, bootstrap: Path, cert_dir: Path) -> None:
    """The kubeconfig the node uses from now on: the bootstrap kubeconfig's cluster, and the
    current pair in the cert dir as its user (the kubelet's default-cluster/-auth/-context)."""
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster_entry(bootstrap)}],
        "users": [{"name": "default-auth", "user": {"client-certificate": str(current_path(cert_dir).absolute()),
                                                    "client-key": str(current_path(cert_dir).absolute())}}],
        "contexts": [{"name": "default-context",
                      "context": {"cluster": "default-cluster", "user": "default-auth", "namespace": "default"}}],
        "current-context": "default-context"}
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, yaml.safe_dump(doc, sort_keys=False).encode())


def kubeconfig_usable(path: Path) -> tuple[bool, str]:
    """Whether the node can use the kubeconfig at path as it is: it loads, and its client
    certificate, if it has one, is valid now (the kubelet bootstraps again otherwise)."""
    if not path.exists():
        return False, f"{path} does not exist yet"
    try:
        pem = client_certificate(path)
    except (KubeconfigError, OSError) as exc:
        return False, str(exc)
    if pem is not None and not csr.currently_valid(pem):
        return False, f"the client certificate in {path} is expired or not yet valid"
    return True, "ok"
