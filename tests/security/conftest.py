"""Hostile input against a real node. Each test holds a canary beside the node (a directory and
a file outside its root dir, the kind of place an escape would land) and checks afterwards that
its inodes, modes and contents are exactly as they were, and that the host's /etc is untouched."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.host.mounts import is_mount_point
from tests.cluster.pki import PKI, CertPair
from tests.integration.conftest import NODE_NAME, Node, launch_node, pods, stop_node, wait_for  # noqa: F401
from tests.integration.event_loops import assert_loops_never_blocked


def _snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            p = Path(dirpath) / name
            st = os.lstat(p)
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
            out[str(p.relative_to(root))] = (st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size, digest)
    return out


def _etc_snapshot() -> dict[str, tuple]:
    out = {}
    for name in sorted(os.listdir("/etc")):
        st = os.lstat(f"/etc/{name}")
        out[name] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns)
    return out


@dataclass
class Canary:
    dir: Path
    file: Path
    content: str


@pytest.fixture
def canary():
    base = Path(f"/var/tmp/pykubelet-canary-{secrets.token_hex(4)}")
    (base / "secret-dir").mkdir(parents=True, mode=0o700)
    flag = base / "secret-dir" / "flag"
    content = f"canary {secrets.token_hex(16)}\n"
    flag.write_text(content)
    os.chmod(flag, 0o600)
    before, etc_before = _snapshot(base), _etc_snapshot()
    try:
        yield Canary(base / "secret-dir", flag, content)
        assert _snapshot(base) == before, f"the canary beside the node was touched: {base}"
        assert _etc_snapshot() == etc_before, "/etc on the host was touched"
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- the node under attack -----------------------------------------------------------------------

ALLOWED_UNSAFE_SYSCTL = "kernel.msgmax"
CLUSTER_DNS, CLUSTER_DOMAIN = "192.0.2.10", "cluster.test"

@dataclass
class SecureNode:
    """The package's node and a client certificate its kubelet API accepts (x509 authentication
    with the tests' own CA, every authenticated user allowed)."""

    node: Node
    client: CertPair
    ca: Path  # the CA of the tests' PKI, which issued the client and the node's serving certificate
    serving: CertPair  # the node's tlsCertFile and tlsPrivateKeyFile


@pytest.fixture(scope="package")
def secure_node(tmp_path_factory) -> SecureNode:
    pki = PKI(tmp_path_factory.mktemp("security-pki"))
    client = pki.issue("client", "security-tester", ["system:masters"])
    serving = pki.issue("serving", NODE_NAME, server=True, ips=["127.0.0.1"])
    n = launch_node(tmp_path_factory.mktemp("security-node"), extra_config=(
        "authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: false\n"
        f"  x509:\n    clientCAFile: {pki.ca.cert}\nauthorization:\n  mode: AlwaysAllow\n"
        # As production nodes are set: a container naming no seccomp profile gets RuntimeDefault.
        "seccompDefault: true\n"
        # The kubelet's default, which pykubelet's is not: one image pull at a time.
        "serializeImagePulls: true\n"
        # The kubelet API with a certificate of the cluster's CA, and TLS 1.3 only.
        f"tlsCertFile: {serving.cert}\ntlsPrivateKeyFile: {serving.key}\ntlsMinVersion: VersionTLS13\n"
        # An unsafe sysctl the node allows (tests/security/test_pod_isolation.py), and the
        # cluster's DNS service a ClusterFirst pod is given.
        f"allowedUnsafeSysctls: [\"{ALLOWED_UNSAFE_SYSCTL}\"]\n"
        f"clusterDNS: [\"{CLUSTER_DNS}\"]\nclusterDomain: {CLUSTER_DOMAIN}\n"))
    try:
        yield SecureNode(n, client, pki.ca.cert, serving)
    finally:
        stop_node(n)
    assert_loops_never_blocked(n.root)
    # The volume service made the root dir a shared mount (mount propagation); the stop undoes it.
    assert n.root.is_dir() and not is_mount_point(n.root), f"the node's stop left {n.root} mounted"


@pytest.fixture(scope="package")
def node(secure_node: SecureNode) -> Node:
    return secure_node.node


def kubelet_api(sn: SecureNode, path: str, timeout: float = 5, cert: bool = True) -> tuple[int, bytes, float]:
    """GET path on the node's kubelet API, with the client certificate unless cert is False:
    (status, body, seconds it took)."""
    ctx = ssl.create_default_context(cafile=str(sn.ca))  # the node's serving certificate is the CA's
    if cert:
        ctx.load_cert_chain(str(sn.client.cert), str(sn.client.key))
    start = time.monotonic()
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{sn.node.kubelet_port}{path}", context=ctx,
                                    timeout=timeout) as resp:
            return resp.status, resp.read(), time.monotonic() - start
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), time.monotonic() - start


def assert_node_serves(sn: SecureNode, name: str = "bystander-check", timeout: float = 90,
                       api_within: float | None = None) -> None:
    """The node's other work goes on: a plain pod starts, `pykubelet status` answers and lists it,
    an authenticated kubelet API call answers (within api_within seconds when given). The pod is
    removed again."""
    n = sn.node
    n.write_pod(name, {"containers": [{"name": "app", "image": n.image("busybox"),
                                       "command": ["sleep", "3600"]}]})
    try:
        n.wait_running(name, timeout)
        res = n.cli("status", check=False)
        assert res.returncode in (0, 4), f"pykubelet status failed ({res.returncode}): {res.stderr}"
        assert f"{name}-{n.node_name}" in res.stdout, res.stdout
        status, body, took = kubelet_api(sn, "/pods", timeout=api_within or 10)
        assert status == 200, f"GET /pods on the kubelet API: {status} {body[:300]!r}"
        assert f"{name}-{n.node_name}".encode() in body
        if api_within is not None:
            assert took < api_within, f"GET /pods took {took:.2f}s (more than {api_within}s)"
    finally:
        n.remove(f"{name}.yaml")
        wait_for(lambda: n.pod(name) is None, 60, f"pod {name} to be removed")
