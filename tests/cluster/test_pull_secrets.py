"""imagePullSecrets against a real registry that wants a login (docker-registry with htpasswd):
the pod's dockerconfigjson secret is read through the API server and handed to containerd's
PullImage; without it the registry's refusal is what the pod shows, also when the image is on the
node already, pulled with another pod's secret."""

from __future__ import annotations

import json
import subprocess

import bcrypt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared.runtime.images.build import IMAGES, ImageSpec, build_image, busybox_applets
from shared.runtime.images.registry import push_image, wait_for_registry
from tests.integration.conftest import NODE_NAME, free_port, stop_process, wait_for

USER, PASSWORD = "puller", "s3cret-pull"


@pytest.fixture(scope="module")
def private_registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("private-registry")
    (root / "htpasswd").write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=5)).decode()}\n")
    address = f"127.0.0.1:{free_port()}"
    (root / "config.yml").write_text(
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"auth:\n  htpasswd:\n    realm: pykubelet-test\n    path: {root / 'htpasswd'}\n"
        f"http:\n  addr: {address}\n")
    proc = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")],
                            stdout=open(root / "registry.log", "w"), stderr=subprocess.STDOUT)
    try:
        wait_for_registry(address)
        base = IMAGES["busybox"]
        spec = ImageSpec("private/busybox", "1.36", base.cmd)
        yield push_image(address, build_image(spec, busybox_applets()), login=(USER, PASSWORD))
    finally:
        stop_process(proc, timeout=10)


def _events(cluster, pod: str) -> str:
    return cluster.kubectl("get", "events", "--field-selector", f"involvedObject.name={pod}", "-o",
                           "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}").stdout


def test_a_private_image_pulls_with_the_pods_secret_and_not_without(cluster, private_registry):
    registry = private_registry.split("/", 1)[0]
    spec = {"containers": [{"name": "app", "image": private_registry, "imagePullPolicy": "Always",
                            "command": ["sleep", "3600"]}]}
    cluster.create_pod("no-login", spec)
    cluster.wait_pod("no-login", lambda p: (p.get("status", {}).get("containerStatuses") or [{}])[0].get(
        "state", {}).get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff"), 60,
        "the anonymous pull refused")
    wait_for(lambda: "401 Unauthorized" in _events(cluster, "no-login"), 30, "the registry's 401 in the events")

    cluster.kubectl("create", "secret", "docker-registry", "regcred", f"--docker-server={registry}",
                    f"--docker-username={USER}", f"--docker-password={PASSWORD}")
    cluster.kubectl("create", "secret", "generic", "not-a-login", "--from-literal=token=x")
    cluster.create_pod("with-login", {**spec, "imagePullSecrets": [{"name": "not-a-login"}, {"name": "missing"},
                                                                   {"name": "regcred"}]})
    cluster.wait_pod("with-login", lambda p: p.get("status", {}).get("phase") == "Running", 90, "Running")
    events = _events(cluster, "with-login")
    warning = next(line for line in events.splitlines() if line.startswith("FailedToRetrieveImagePullSecret"))
    assert "not-a-login: type Opaque has neither .dockerconfigjson nor .dockercfg" in warning, warning
    assert "missing: not found" in warning, warning
    assert PASSWORD not in events
    for name in ("no-login", "with-login"):
        cluster.kubectl("delete", "pod", name, "--wait=false")
    cluster.kubectl("delete", "secret", "regcred", "not-a-login")


def test_an_image_pulled_with_a_secret_is_used_only_by_pods_that_show_it(cluster, private_registry):
    """KubeletEnsureSecretPulledImages (the kubelet 1.37's default, imagePullCredentialsVerificationPolicy
    NeverVerifyPreloadedImages): once the node pulled the private image with one pod's secret, a
    pod without it cannot use the copy on the node (IfNotPresent pulls again, and the registry
    refuses it), while a pod with a secret holding the same login uses it without a pull."""
    registry = private_registry.split("/", 1)[0]
    login = [f"--docker-server={registry}", f"--docker-username={USER}", f"--docker-password={PASSWORD}"]
    cluster.kubectl("create", "secret", "docker-registry", "owner-cred", *login)
    cluster.kubectl("create", "secret", "docker-registry", "twin-cred", *login)
    base = {"containers": [{"name": "app", "image": private_registry, "command": ["sleep", "3600"]}]}
    cluster.create_pod("owner", {**base, "imagePullSecrets": [{"name": "owner-cred"}]})
    cluster.wait_pod("owner", lambda p: p.get("status", {}).get("phase") == "Running", 90, "Running")

    cluster.create_pod("borrower", base)
    cluster.wait_pod("borrower", lambda p: (p.get("status", {}).get("containerStatuses") or [{}])[0].get(
        "state", {}).get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff"), 60,
        "the copy on the node refused to a pod without the secret")
    wait_for(lambda: "401 Unauthorized" in _events(cluster, "borrower"), 30, "its own pull refused by the registry")

    cluster.create_pod("twin", {**base, "imagePullSecrets": [{"name": "twin-cred"}]})
    cluster.wait_pod("twin", lambda p: p.get("status", {}).get("phase") == "Running", 60, "Running")
    assert f'Pulled: Container image "{private_registry}" already present on machine and can be accessed by the pod' \
        in _events(cluster, "twin")
    records = list((cluster.node.root / "image_manager" / "pulled").iterdir())
    mapping = [json.loads(r.read_text())["credentialMapping"] for r in records]
    secrets = [s["name"] for m in mapping for s in m.get(private_registry.rsplit(":", 1)[0], {}).get(
        "kubernetesSecrets", [])]
    assert {"owner-cred", "twin-cred"} <= set(secrets), mapping  # beside the first test's regcred
    # The checks on the node's /metrics, under the kubelet 1.37's names.
    metrics = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/metrics").stdout
    checks = {s.labels["result"]: s.value for f in text_string_to_metric_families(metrics) for s in f.samples
              if s.name == "kubelet_imagemanager_image_mustpull_checks_total"}
    assert checks.get("mustAuthenticate", 0) >= 1 and checks.get("credentialRecordFound", 0) >= 1, checks
    assert "kubelet_imagemanager_ondisk_pulledrecords" in metrics
    for name in ("owner", "borrower", "twin"):
        cluster.kubectl("delete", "pod", name, "--wait=false")
    cluster.kubectl("delete", "secret", "owner-cred", "twin-cred")
