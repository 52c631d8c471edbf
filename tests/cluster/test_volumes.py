"""Volumes in cluster mode: configMaps, secrets and tokens from the API server, and a CSI
persistent volume staged and published through a node plugin."""

from __future__ import annotations

import base64
import json
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.cluster.pki import self_signed_ca_pem
from tests.cluster.pod_cert_signer import DENY, PodCertificateSigner
from tests.integration.conftest import REPO, wait_for

DRIVER = "dir.csi.pykubelet.test"


def _exec(cluster, pod: dict, cmd: str) -> str:
    code, out = cluster.node.exec(pod["metadata"]["uid"], "app", ["sh", "-c", cmd])
    assert code == 0, f"{cmd!r} exited {code}: {out}"
    return out


def _jwt_claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _apply(cluster, obj: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(obj))


def _running(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and all(
        "running" in c["state"] for c in pod["status"].get("containerStatuses", []))


def test_config_map_secret_and_projected_token(cluster):
    bb = cluster.node.image("busybox")
    cluster.kubectl("create", "serviceaccount", "app")
    cluster.kubectl("create", "configmap", "settings", "--from-literal=greeting=hello")
    cluster.kubectl("create", "secret", "generic", "creds", "--from-literal=password=hunter2")
    cluster.create_pod("reader", {
        "serviceAccountName": "app",
        "containers": [{"name": "app", "image": bb, "command": ["sleep", "3600"],
                        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg", "readOnly": True,
                                          "recursiveReadOnly": "IfPossible"},
                                         {"name": "sec", "mountPath": "/sec"},
                                         {"name": "proj", "mountPath": "/proj"}]}],
        "volumes": [
            {"name": "cfg", "configMap": {"name": "settings"}},
            {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}},
            {"name": "proj", "projected": {"sources": [
                {"configMap": {"name": "settings", "items": [{"key": "greeting", "path": "conf/greeting"}]}},
                {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                {"serviceAccountToken": {"audience": "pykubelet-test", "expirationSeconds": 600,
                                         "path": "token"}}]}}]})
    pod = cluster.wait_pod("reader", _running, 60, "pod reader Running")
    uid = pod["metadata"]["uid"]
    # IfPossible: recursively read-only where the runtime's default handler can (the Node says).
    rro = _runtime_makes_rro_mounts(cluster)
    mounts = pod["status"]["containerStatuses"][0]["volumeMounts"]
    assert mounts[:3] == [
        {"name": "cfg", "mountPath": "/cfg", "readOnly": True, "recursiveReadOnly": "Enabled" if rro else "Disabled"},
        {"name": "sec", "mountPath": "/sec"}, {"name": "proj", "mountPath": "/proj"}], mounts

    assert _exec(cluster, pod, "cat /cfg/greeting") == "hello"
    assert _exec(cluster, pod, "cat /sec/password") == "hunter2"
    assert _exec(cluster, pod, "stat -L -c %a /sec/password") == "400\n"
    assert _exec(cluster, pod, "grep ' /sec ' /proc/mounts").startswith("tmpfs /sec tmpfs ro"), \
        "secrets are on tmpfs and mounted read-only"
    assert _exec(cluster, pod, "cat /proj/conf/greeting /proj/name") == "helloreader"
    claims = _jwt_claims(_exec(cluster, pod, "cat /proj/token"))
    assert claims["aud"] == ["pykubelet-test"]
    assert claims["sub"] == "system:serviceaccount:default:app"
    assert claims["kubernetes.io"]["pod"] == {"name": "reader", "uid": uid}
    assert claims["exp"] - claims["iat"] == 600
    secret_dir = cluster.node.root / "pods" / uid / "volumes" / "kubernetes.io~secret" / "sec"
    assert f" {secret_dir} " in Path("/proc/self/mountinfo").read_text(), "the secret volume is a tmpfs on the host"

    # An update reaches the files through the watch, swapped in atomically.
    data_before = _exec(cluster, pod, "readlink /cfg/..data")
    cluster.kubectl("patch", "configmap", "settings", "-p", '{"data":{"greeting":"bonjour"}}')
    wait_for(lambda: _exec(cluster, pod, "cat /cfg/greeting") == "bonjour", 20, "the configMap update in the pod")
    assert _exec(cluster, pod, "readlink /cfg/..data") != data_before
    assert _exec(cluster, pod, "readlink /cfg/greeting") == "..data/greeting\n"
    wait_for(lambda: _exec(cluster, pod, "cat /proj/conf/greeting") == "bonjour", 20, "the projected update")

    cluster.kubectl("delete", "pod", "reader", "--wait=true", timeout=60)
    wait_for(lambda: not (cluster.node.root / "pods" / uid).exists(), 30, "the pod's volumes to be removed")


def _runtime_makes_rro_mounts(cluster) -> bool:
    handlers = cluster.node_obj()["status"].get("runtimeHandlers", [])
    return any(h["name"] == "" and h.get("features", {}).get("recursiveReadOnlyMounts") for h in handlers)


def test_a_recursive_read_only_mount_the_runtime_cannot_make_holds_the_container(cluster):
    """recursiveReadOnly Enabled on a runtime whose default handler does not make such mounts
    (Debian's containerd 1.6 reports no handler): the container is not created, and says why in
    the kubelet's words."""
    if _runtime_makes_rro_mounts(cluster):
        pytest.fail("this node's runtime makes recursive read-only mounts: the test needs one that does not "
                    "(make test runs Debian's containerd 1.6)")
    cluster.create_pod("rro", {"containers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["sleep", "3600"],
        "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True, "recursiveReadOnly": "Enabled"}]}],
        "volumes": [{"name": "data", "emptyDir": {}}]})

    def waiting(p):
        statuses = p.get("status", {}).get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("waiting", {}).get("reason") == "CreateContainerConfigError"
    pod = cluster.wait_pod("rro", waiting, 60, "the container held with CreateContainerConfigError")
    [status] = pod["status"]["containerStatuses"]
    assert status["state"]["waiting"]["message"] == (
        'failed to resolve recursive read-only mode: volume "data" requested recursive read-only mode, but it is '
        "not supported by the runtime")
    assert status["volumeMounts"] == [{"name": "data", "mountPath": "/data", "readOnly": True,
                                       "recursiveReadOnly": "Disabled"}]
    cluster.kubectl("delete", "pod", "rro", "--wait=true", timeout=60)


def test_cluster_trust_bundles_are_projected_by_name_and_by_signer(cluster):
    """clusterTrustBundle sources (GA in 1.37): one bundle by name, and every bundle of a signer
    whose labels match; each certificate once."""
    certs = [self_signed_ca_pem(cn) for cn in ("ctb-a", "ctb-b")]
    signer = "example.com/pykubelet-test"
    for name, pem, extra in (("ctb-named", certs[0], {}),
                             ("example.com:pykubelet-test:one", certs[0] + certs[1],
                              {"signerName": signer}),
                             ("example.com:pykubelet-test:two", certs[1], {"signerName": signer})):
        cluster.kubectl("apply", "-f", "-", input_text=json.dumps({
            "apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
            "metadata": {"name": name, "labels": {"trust": "pykubelet-test"}},
            "spec": {"trustBundle": pem, **extra}}))
    cluster.create_pod("trusting", {"containers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["sleep", "3600"],
        "volumeMounts": [{"name": "ca", "mountPath": "/ca"}]}],
        "volumes": [{"name": "ca", "projected": {"sources": [
            {"clusterTrustBundle": {"name": "ctb-named", "path": "named.pem"}},
            {"clusterTrustBundle": {"signerName": signer, "labelSelector": {"matchLabels": {"trust": "pykubelet-test"}},
                                    "path": "signer.pem"}}]}}]})
    pod = cluster.wait_pod("trusting", _running, 60, "the pod with trust bundles Running")
    named, by_signer = _exec(cluster, pod, "cat /ca/named.pem"), _exec(cluster, pod, "cat /ca/signer.pem")
    assert named == certs[0]
    assert by_signer.count("BEGIN CERTIFICATE") == 2 and set(by_signer.split("-----END CERTIFICATE-----\n")) - {""} \
        == set((certs[0] + certs[1]).split("-----END CERTIFICATE-----\n")) - {""}
    cluster.kubectl("delete", "pod", "trusting", "--wait=false")
    cluster.kubectl("delete", "clustertrustbundle", "ctb-named", "example.com:pykubelet-test:one",
                    "example.com:pykubelet-test:two")


def test_pod_certificates_are_requested_issued_and_projected(cluster):
    """podCertificate sources (GA in 1.37): a key made on the node, a PodCertificateRequest for
    it that the signer answers, the key and chain in the volume; a denied one is a FailedMount."""
    signer_name = "example.com/pykubelet-pods"

    def pod_spec(annotations):
        source = {"signerName": signer_name, "keyType": "ED25519", "maxExpirationSeconds": 3600,
                  "credentialBundlePath": "bundle.pem", "keyPath": "tls.key", "certificateChainPath": "tls.crt",
                  "userAnnotations": annotations}
        return {"serviceAccountName": "certified",
                "containers": [{"name": "app", "image": cluster.node.image("busybox"), "command": ["sleep", "3600"],
                                "volumeMounts": [{"name": "id", "mountPath": "/id"}]}],
                "volumes": [{"name": "id", "projected": {"sources": [{"podCertificate": source}]}}]}

    cluster.kubectl("create", "serviceaccount", "certified")
    with PodCertificateSigner(cluster.cp, signer_name) as signer:
        cluster.create_pod("certified", pod_spec({"example.com/purpose": "test"}))
        cluster.create_pod("refused", pod_spec({DENY: "yes"}))
        try:
            pod = cluster.wait_pod("certified", _running, 60, "the pod with a certificate Running")
        except AssertionError as exc:
            events = [e["message"] for e in cluster.get("events", "--field-selector", "involvedObject.name=certified")["items"]]
            raise AssertionError(f"{exc}\nevents: {events}\nsigner: answered {signer.answered}, errors {signer.errors}") from None
        bundle, key_pem, chain = (_exec(cluster, pod, f"cat /id/{f}") for f in ("bundle.pem", "tls.key", "tls.crt"))
        assert bundle == key_pem + chain
        key = serialization.load_pem_private_key(key_pem.encode(), None)
        leaf = x509.load_pem_x509_certificate(chain.encode())
        assert leaf.issuer == cluster.cp.pki.ca_certificate.subject
        assert _spki(key) == _spki(leaf)  # issued for the key the node made for the pod
        assert (leaf.not_valid_after_utc - leaf.not_valid_before_utc).total_seconds() == 3600
        [pcr] = [p for p in cluster.get("podcertificaterequests")["items"] if p["spec"]["podName"] == "certified"]
        node = cluster.node_obj()
        assert {k: pcr["spec"][k] for k in ("signerName", "podUID", "serviceAccountName", "nodeName", "nodeUID",
                                            "maxExpirationSeconds", "unverifiedUserAnnotations")} == {
            "signerName": signer_name, "podUID": pod["metadata"]["uid"], "serviceAccountName": "certified",
            "nodeName": node["metadata"]["name"], "nodeUID": node["metadata"]["uid"], "maxExpirationSeconds": 3600,
            "unverifiedUserAnnotations": {"example.com/purpose": "test"}}
        assert pcr["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]

        def denied():
            events = cluster.get("events", "--field-selector", "involvedObject.name=refused")["items"]
            return [e for e in events if e["reason"] == "FailedMount" and "permanently denied" in e["message"]]

        [event] = wait_for(denied, 60, "a FailedMount event for the denied request")[:1]
        assert event["message"] == ('MountVolume.SetUp failed for volume "id" : PodCertificateRequest was '
                                    'permanently denied: reason="Refused" message="this pod asked to be refused"')
        assert cluster.pod("refused")["status"]["phase"] == "Pending"
    cluster.kubectl("delete", "pod", "certified", "refused", "--wait=false")
    cluster.kubectl("delete", "serviceaccount", "certified")


def _spki(key_or_cert) -> bytes:
    return key_or_cert.public_key().public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)


def test_missing_config_map_is_a_failed_mount_event(cluster):
    cluster.create_pod("lost", {"containers": [{"name": "app", "image": cluster.node.image("busybox"),
                                                "command": ["sleep", "3600"],
                                                "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
                                "volumes": [{"name": "cfg", "configMap": {"name": "absent"}}]})

    def failed_mount():
        events = cluster.get("events", "--field-selector", "involvedObject.name=lost")["items"]
        return [e for e in events if e["reason"] == "FailedMount"]

    [event] = wait_for(failed_mount, 30, "a FailedMount event")[:1]
    assert event["type"] == "Warning"
    assert event["message"] == 'MountVolume.SetUp failed for volume "cfg" : configmap "absent" not found'
    pod = cluster.pod("lost")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    # Creating the configMap lets the pod start.
    cluster.kubectl("create", "configmap", "absent", "--from-literal=k=v")
    cluster.wait_pod("lost", _running, 60, "pod lost Running once its configMap exists")
    cluster.kubectl("delete", "pod", "lost", "--wait=true", timeout=60)


@pytest.fixture
def csi_plugin(cluster, tmp_path):
    log, backing, sock = tmp_path / "calls.jsonl", tmp_path / "backing", tmp_path / "csi.sock"
    proc = subprocess.Popen([sys.executable, "-m", "tests.csi_plugin", "--name", DRIVER, "--registry-dir",
                             str(cluster.node.root / "plugins_registry"), "--csi-socket", str(sock),
                             "--backing", str(backing), "--log", str(log)], cwd=REPO)
    try:
        wait_for(lambda: any(p["driver"] == DRIVER for p in
                             cluster.node.admin_get("volume", "/plugins", timeout=2).json()),
                 30, "the CSI plugin to register")
        yield log, backing
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _bind_claim(cluster, name: str) -> None:
    """No controller-manager runs here: mark the claim Bound as the PV controller would."""
    cp = cluster.cp
    tls = ssl.create_default_context(cafile=str(cp.ca))
    tls.load_cert_chain(str(cp.admin.cert), str(cp.admin.key))
    with httpx.Client(verify=tls, timeout=10) as api:
        resp = api.patch(f"{cp.server}/api/v1/namespaces/default/persistentvolumeclaims/{name}/status",
                         content=json.dumps({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                                                        "capacity": {"storage": "1Gi"}}}),
                         headers={"Content-Type": "application/merge-patch+json"})
    assert resp.status_code == 200, resp.text


def test_csi_persistent_volume_is_staged_published_and_cleaned_up_in_order(cluster, csi_plugin):
    log, backing = csi_plugin
    _apply(cluster, {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
                     "spec": {"attachRequired": False, "podInfoOnMount": True}})
    _apply(cluster, {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-test"},
                     "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                              "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                              "claimRef": {"namespace": "default", "name": "claim-test"},
                              "csi": {"driver": DRIVER, "volumeHandle": "vol-1", "fsType": "ext4",
                                      "volumeAttributes": {"tier": "fast"}}}})
    _apply(cluster, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "claim-test"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": "pv-test",
                              "resources": {"requests": {"storage": "1Gi"}}}})
    _bind_claim(cluster, "claim-test")
    cluster.create_pod("db", {"containers": [{"name": "app", "image": cluster.node.image("busybox"),
                                              "command": ["sh", "-c", "echo row > /data/table && sleep 3600"],
                                              "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                              "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "claim-test"}}]})
    pod = cluster.wait_pod("db", _running, 60, "pod db Running")
    uid = pod["metadata"]["uid"]
    root = cluster.node.root
    staging = root / "plugins" / "kubernetes.io" / "csi" / DRIVER
    target = root / "pods" / uid / "volumes" / "kubernetes.io~csi" / "pv-test" / "mount"

    calls = [c for c in _calls(log) if c["method"].startswith("Node") and c["method"] != "NodeGetInfo"]
    assert [c["method"] for c in calls] == ["NodeStageVolume", "NodePublishVolume"]
    stage, publish = calls
    assert stage["volume_id"] == publish["volume_id"] == "vol-1"
    assert stage["staging_target_path"].startswith(str(staging)) and stage["staging_target_path"].endswith("/globalmount")
    assert publish["staging_target_path"] == stage["staging_target_path"]
    assert publish["target_path"] == str(target)
    assert stage["capability"] == {"access_mode": "SINGLE_NODE_WRITER", "fs_type": "ext4", "mount_flags": [],
                                   "kind": "mount"}
    assert publish["volume_context"]["tier"] == "fast"
    assert publish["volume_context"]["csi.storage.k8s.io/pod.name"] == "db"
    assert publish["volume_context"]["csi.storage.k8s.io/pod.uid"] == uid
    wait_for(lambda: (backing / "vol-1" / "table").exists(), 20, "the pod's write to reach the volume")

    def stats() -> str:
        return cluster.node.admin_get("volume", "/metrics", timeout=5).text
    wait_for(lambda: 'kubelet_volume_stats_capacity_bytes{namespace="default",persistentvolumeclaim="claim-test"}'
             in stats(), 20, "volume stats for the claim")

    cluster.kubectl("delete", "pod", "db", "--wait=true", timeout=60)
    wait_for(lambda: [c["method"] for c in _calls(log)][-2:] == ["NodeUnpublishVolume", "NodeUnstageVolume"], 30,
             "NodeUnpublishVolume then NodeUnstageVolume")
    unpublish, unstage = _calls(log)[-2:]
    assert unpublish == {"method": "NodeUnpublishVolume", "volume_id": "vol-1", "target_path": str(target)}
    assert unstage == {"method": "NodeUnstageVolume", "volume_id": "vol-1",
                       "staging_target_path": stage["staging_target_path"]}
    wait_for(lambda: not (root / "pods" / uid).exists(), 30, "the pod directory to be removed")
    assert not list(staging.glob("*")), "the staging directory is removed after unstaging"
    assert (backing / "vol-1" / "table").read_text() == "row\n", "the volume's data is the plugin's, kept"


POD_DRIVER = "pod.csi.pykubelet.test"


def _plugin_pod(cluster, backing: Path, log: Path) -> dict:
    """The CSI node plugin as a pod, the way CSI drivers ship it (a DaemonSet's pod on each node,
    made here as its controller would make it): privileged, the root dir mounted Bidirectional
    so the volumes it stages and publishes there reach the node, its registration socket in
    <root>/plugins_registry. It runs the test plugin with the node's own Python, through the
    host's / at /host (read-only), writing its backing directory and call log beside `log`."""
    root = str(cluster.node.root)
    argv = " ".join([sys.executable, "-m", "tests.csi_plugin", "--name", POD_DRIVER,
                     "--registry-dir", f"{root}/plugins_registry", "--csi-socket", f"{root}/plugins/{POD_DRIVER}/csi.sock",
                     "--backing", str(backing), "--log", str(log)])
    return {"hostPID": True,
            "volumes": [{"name": "host", "hostPath": {"path": "/"}},
                        {"name": "kubelet-dir", "hostPath": {"path": root, "type": "Directory"}},
                        {"name": "work", "hostPath": {"path": str(log.parent), "type": "Directory"}}],
            "containers": [{"name": "plugin", "image": cluster.node.image("busybox"),
                            "command": ["chroot", "/host", "sh", "-c",
                                        f"mkdir -p {root}/plugins/{POD_DRIVER} && cd {REPO} && exec {argv}"],
                            "securityContext": {"privileged": True},
                            "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": True},
                                             {"name": "kubelet-dir", "mountPath": f"/host{root}",
                                              "mountPropagation": "Bidirectional"},
                                             {"name": "work", "mountPath": f"/host{log.parent}"}]}]}


def test_a_csi_node_plugin_running_as_a_privileged_pod_publishes_volumes_other_pods_use(cluster, tmp_path):
    from shared.host.mounts import is_mount_point

    log, backing = tmp_path / "calls.jsonl", tmp_path / "backing"
    cluster.create_pod("csi-node-plugin", _plugin_pod(cluster, backing, log))
    try:
        cluster.wait_pod("csi-node-plugin", _running, 60, "the plugin pod Running")
        try:
            wait_for(lambda: any(p["driver"] == POD_DRIVER for p in
                                 cluster.node.admin_get("volume", "/plugins", timeout=2).json()),
                     30, "the plugin pod's driver to register through the registration socket")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the plugin pod's log:\n"
                                 f"{cluster.kubectl('logs', 'csi-node-plugin', check=False).stdout[-3000:]}") from None
        _apply(cluster, {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": POD_DRIVER},
                         "spec": {"attachRequired": False}})
        _apply(cluster, {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-pod-plugin"},
                         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                  "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                                  "claimRef": {"namespace": "default", "name": "claim-pod-plugin"},
                                  "csi": {"driver": POD_DRIVER, "volumeHandle": "vol-p"}}})
        _apply(cluster, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {"name": "claim-pod-plugin"},
                         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                                  "volumeName": "pv-pod-plugin", "resources": {"requests": {"storage": "1Gi"}}}})
        _bind_claim(cluster, "claim-pod-plugin")
        cluster.create_pod("consumer", {"containers": [{
            "name": "app", "image": cluster.node.image("busybox"),
            "command": ["sh", "-c", "echo through-the-plugin-pod > /data/row && sleep 3600"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "claim-pod-plugin"}}]})
        consumer = cluster.wait_pod("consumer", _running, 60, "the consumer pod Running")
        target = cluster.node.root / "pods" / consumer["metadata"]["uid"] / "volumes" / "kubernetes.io~csi" / \
            "pv-pod-plugin" / "mount"
        # The plugin mounted it in its own container; through the Bidirectional mount the node
        # sees it, and so the consumer writes into the plugin's backing directory.
        assert is_mount_point(target), "the plugin pod's publish reached the node"
        wait_for(lambda: (backing / "vol-p" / "row").exists(), 20, "the consumer's write to reach the volume")
        assert (backing / "vol-p" / "row").read_text() == "through-the-plugin-pod\n"
        cluster.kubectl("delete", "pod", "consumer", "--wait=true", timeout=60)
        wait_for(lambda: [c["method"] for c in _calls(log)][-2:] == ["NodeUnpublishVolume", "NodeUnstageVolume"],
                 30, "NodeUnpublishVolume then NodeUnstageVolume")
        assert not is_mount_point(target), "the unpublish in the plugin pod reached the node too"
    finally:
        cluster.kubectl("delete", "pod", "consumer", "csi-node-plugin", "--ignore-not-found", "--wait=true",
                        timeout=60)
        cluster.kubectl("delete", "pvc", "claim-pod-plugin", "--ignore-not-found", "--wait=false")
        cluster.kubectl("delete", "pv", "pv-pod-plugin", "--ignore-not-found", "--wait=false")
