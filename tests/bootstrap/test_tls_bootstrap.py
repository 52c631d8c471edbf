"""The node `kubeadm join` started with only a bootstrap token: the TLS bootstrap got its client
certificate through a CSR that kube-controller-manager approved and signed, wrote the kubeconfig,
and the node registered with its own identity; then the certificate is renewed
(rotateCertificates, which kubeadm always sets) while pods run, and the node keeps working after
the first one expired."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import stat
import time
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from shared.api.client_cert import CURRENT, PENDING_KEY, SIGNER
from tests.bootstrap.conftest import Joined
from tests.integration.conftest import NODE_NAME, wait_for
from tests.kubeadm_control_plane import BOOTSTRAP_GROUP, TOKEN_ID


def _pair(j: Joined) -> Path:
    """The pair the current link names (the link's target is a path on the node)."""
    return j.file(os.readlink(j.file(f"{j.cert_dir}/{CURRENT}")))


def _cert(j: Joined) -> x509.Certificate:
    return x509.load_pem_x509_certificate(_pair(j).read_bytes())


def _csrs(j: Joined) -> list[dict]:
    return [c for c in j.get("csr")["items"] if c["spec"]["signerName"] == SIGNER]


def _approved_by_controller(csr: dict) -> bool:
    conds = (csr.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Approved" and c.get("reason") == "AutoApproved" for c in conds)


def _create_pod(j: Joined, name: str) -> None:
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": NODE_NAME, "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "c", "image": j.node.image("busybox"), "command": ["sleep", "100000"]}]}}
    j.cp.kubectl("create", "-f", "-", input_text=json.dumps(doc))


def _running(j: Joined, name: str) -> dict | None:
    res = j.cp.kubectl("get", "pod", name, "-o", "json", check=False)
    pod = json.loads(res.stdout) if res.returncode == 0 else None
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
    return pod if statuses and "running" in statuses[0].get("state", {}) else None


def test_the_node_joins_with_a_bootstrap_token(joined: Joined):
    # The kubeconfig the bootstrap wrote: the bootstrap kubeconfig's cluster, the pair as its user.
    kubeconfig = joined.file(joined.kubeconfig)
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    doc = yaml.safe_load(kubeconfig.read_text())
    assert doc["current-context"] == "default-context"
    [cluster] = doc["clusters"]
    assert cluster["cluster"]["server"] == joined.cp.server
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == joined.cp.ca.read_bytes()
    [user] = doc["users"]
    current = f"{joined.cert_dir}/{CURRENT}"
    assert user["user"] == {"client-certificate": current, "client-key": current}
    # The pair: kubelet-client-<time>.pem behind the current link, private, for system:node:NAME.
    link = joined.file(current)
    assert link.is_symlink() and os.path.basename(os.readlink(link)).startswith("kubelet-client-20")
    assert stat.S_IMODE(_pair(joined).stat().st_mode) == 0o600
    cert = _cert(joined)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{NODE_NAME}"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    assert cert.issuer == x509.load_pem_x509_certificate(joined.cp.ca.read_bytes()).subject
    assert not joined.file(f"{joined.cert_dir}/{PENDING_KEY}").exists()
    # The CSR: made with the token, named after its key, approved and signed by the controller.
    first = min(_csrs(joined), key=lambda c: c["metadata"]["creationTimestamp"])
    assert first["metadata"]["name"].startswith("node-csr-")
    assert first["spec"]["username"] == f"system:bootstrap:{TOKEN_ID}"
    assert BOOTSTRAP_GROUP in first["spec"]["groups"]
    assert sorted(first["spec"]["usages"]) == ["client auth", "digital signature"]
    assert _approved_by_controller(first) and first["status"].get("certificate")
    # The Node was created by the node itself (the Node authorizer lets system:node:NAME only).
    node = joined.get("node", NODE_NAME)
    assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.37")
    # An API pod runs: pod-sync's watch and the status writer work with the new identity.
    _create_pod(joined, "after-bootstrap")
    wait_for(lambda: _running(joined, "after-bootstrap"), 90, "the pod to run on the bootstrapped node")


def test_the_client_certificate_rotates_and_the_node_outlives_the_first_one(joined: Joined):
    first = _cert(joined)
    _create_pod(joined, "across-rotation")
    before = wait_for(lambda: _running(joined, "across-rotation"), 90, "the pod to run")
    container = before["status"]["containerStatuses"][0]
    # Renewed at 70-90% of the first one's lifetime: a new pair behind the link, from a CSR the
    # node made with its own certificate, which the controller approves as a self renewal.
    end = first.not_valid_after_utc
    lifetime = (end - first.not_valid_before_utc).total_seconds()
    wait_for(lambda: _cert(joined).serial_number != first.serial_number,
             max(10.0, (end - dt.datetime.now(dt.timezone.utc)).total_seconds() - lifetime * 0.1 + 20),
             "the client certificate to be renewed")
    renewals = [c for c in _csrs(joined) if c["spec"]["username"] == f"system:node:{NODE_NAME}"]
    assert renewals and all(_approved_by_controller(c) for c in renewals)
    # Past the first certificate's end, everything the node asks of the API server goes with
    # the new one: it renews its lease, and a new pod starts and is reported.
    wait = (end - dt.datetime.now(dt.timezone.utc)).total_seconds() + 2
    if wait > 0:
        time.sleep(wait)
    expired_at = time.time()
    _create_pod(joined, "after-expiry")
    wait_for(lambda: _running(joined, "after-expiry"), 90, "a pod to run after the first certificate expired")

    def lease_renewed() -> bool:
        lease = joined.get("lease", NODE_NAME, "-n", "kube-node-lease")
        renewed = dt.datetime.strptime(lease["spec"]["renewTime"], "%Y-%m-%dT%H:%M:%S.%fZ")
        return renewed.replace(tzinfo=dt.timezone.utc).timestamp() > expired_at
    wait_for(lambda: lease_renewed(), 30, "the node lease to be renewed after the first certificate expired")
    assert joined.ready() == "True"
    # The pod from before the rotation was never touched.
    after = joined.get("pod", "across-rotation")["status"]["containerStatuses"][0]
    assert after["containerID"] == container["containerID"] and after["restartCount"] == 0
    # No service saw its credentials refused (an ApiError reads "401 Unauthorized: ...").
    refused = [f"{log.name}: {line}" for log in (joined.node.root / "logs").glob("*.log")
               for line in log.read_text(errors="replace").splitlines() if "Unauthorized" in line]
    assert not refused, "\n".join(refused[:10])
