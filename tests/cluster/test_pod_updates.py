"""What the kubelet does with a running pod: its managed /etc/hosts, and updates of the pod
through the API (labels into downward-API volumes, a new image, activeDeadlineSeconds)."""

from __future__ import annotations

import json
import os
import signal
import time

from tests.integration.conftest import wait_for


def _running(p: dict) -> bool:
    return p.get("status", {}).get("phase") == "Running"


def _exec(cluster, name: str, *cmd: str) -> str:
    return cluster.kubectl("exec", name, "--", *cmd).stdout


def test_managed_etc_hosts_with_host_aliases_and_a_hostname_override(cluster):
    # hostnameOverride (GA in 1.37) is the pod's hostname, whatever hostname and subdomain say,
    # and makes no FQDN entry.
    cluster.create_pod("hosts", {"hostAliases": [{"ip": "123.45.67.89", "hostnames": ["foo.remote", "bar.remote"]}],
                                 "hostnameOverride": "build.example", "hostname": "ignored", "subdomain": "sub",
                                 "containers": [{"name": "app", "image": cluster.node.image("busybox"),
                                                 "command": ["sleep", "3600"]}]})
    pod = cluster.wait_pod("hosts", _running, 60, "Running")
    assert _exec(cluster, "hosts", "hostname") == "build.example\n"
    hosts = _exec(cluster, "hosts", "cat", "/etc/hosts")
    assert hosts.startswith("# Kubernetes-managed hosts file.\n")
    assert f"{pod['status']['podIP']}\tbuild.example\n" in hosts and "svc.cluster" not in hosts, hosts
    assert hosts.endswith("# Entries added by HostAliases.\n123.45.67.89\tfoo.remote\tbar.remote\n")
    cluster.kubectl("delete", "pod", "hosts", "--wait=false")


def test_label_update_reaches_the_downward_api_volume(cluster):
    cluster.create_pod("labelled", {"containers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["sleep", "3600"],
        "volumeMounts": [{"name": "info", "mountPath": "/etc/podinfo"}]}],
        "volumes": [{"name": "info", "downwardAPI": {"items": [{"path": "labels",
                                                                "fieldRef": {"fieldPath": "metadata.labels"}}]}}]})
    cluster.wait_pod("labelled", _running, 60, "Running")
    cluster.kubectl("label", "pod", "labelled", "stage=two")
    wait_for(lambda: 'stage="two"' in _exec(cluster, "labelled", "cat", "/etc/podinfo/labels"), 60,
             "the new label in the volume")
    cs = cluster.pod("labelled")["status"]["containerStatuses"][0]
    assert cs["restartCount"] == 0, "a label change restarts nothing"
    cluster.kubectl("delete", "pod", "labelled", "--wait=false")


def test_new_image_restarts_the_container(cluster):
    cluster.create_pod("upgraded", {"containers": [{"name": "app", "image": cluster.node.image("busybox"),
                                                    "command": ["sleep", "3600"]}]})
    cluster.wait_pod("upgraded", _running, 60, "Running")
    new_image = cluster.node.image("web")
    cluster.kubectl("patch", "pod", "upgraded", "-p",
                    json.dumps({"spec": {"containers": [{"name": "app", "image": new_image}]}}))
    pod = cluster.wait_pod("upgraded", lambda p: _running(p) and p["status"]["containerStatuses"][0]["restartCount"] == 1
                           and "running" in p["status"]["containerStatuses"][0]["state"], 90,
                           "running again with the new image")
    assert pod["status"]["containerStatuses"][0]["image"] == new_image
    events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=upgraded").stdout
    assert "Container app definition changed, will be restarted" in events
    cluster.kubectl("delete", "pod", "upgraded", "--wait=false")


def test_active_deadline_set_on_a_running_pod_fails_it(cluster):
    cluster.create_pod("deadline", {"containers": [{"name": "app", "image": cluster.node.image("busybox"),
                                                    "command": ["sleep", "3600"]}]})
    cluster.wait_pod("deadline", _running, 60, "Running")
    cluster.kubectl("patch", "pod", "deadline", "-p", json.dumps({"spec": {"activeDeadlineSeconds": 5}}))
    # Failed is reported as soon as the node decides; the container is stopped within its grace
    # period after that.
    pod = cluster.wait_pod("deadline", lambda p: p.get("status", {}).get("phase") == "Failed"
                           and "terminated" in p["status"]["containerStatuses"][0]["state"], 60,
                           "Failed, its container terminated")
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert pod["status"]["message"] == "Pod was active on the node longer than the specified deadline"
    cluster.kubectl("delete", "pod", "deadline", "--wait=false")


def test_a_pod_the_node_cannot_run_fails_with_the_reason_and_can_be_deleted(cluster):
    cluster.create_pod("refused", {"volumes": [{"name": "v", "emptyDir": {}}], "containers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["sleep", "3600"],
        "volumeMounts": [{"name": "v", "mountPath": "/v", "subPathExpr": "$(POD_NAME)"}]}]})
    pod = cluster.wait_pod("refused", lambda p: p.get("status", {}).get("phase") == "Failed", 30, "Failed")
    assert pod["status"]["reason"] == "UnsupportedPodSpec"
    assert "subPathExpr is not supported by pykubelet" in pod["status"]["message"]
    events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=refused").stdout
    assert "UnsupportedPodSpec" in events
    assert not cluster.node.sandboxes_of(pod["metadata"]["uid"]), "nothing of it was started"
    cluster.kubectl("delete", "pod", "refused", "--timeout=30s")
    assert cluster.pod("refused") is None


def test_changes_made_while_pod_sync_is_down_are_acted_on_when_it_is_back(cluster):
    """pod-sync hung (SIGSTOP) while an API pod gets a new image (kubectl set image), another is
    deleted and a third created: once it runs again, all three converge within seconds."""
    node = cluster.node
    sleeper = {"containers": [{"name": "app", "image": node.image("busybox"), "command": ["sleep", "3600"]}]}
    cluster.create_pod("changed-meanwhile", sleeper)
    cluster.create_pod("deleted-meanwhile", sleeper)
    cluster.wait_pod("changed-meanwhile", _running, 60, "Running")
    deleted = cluster.wait_pod("deleted-meanwhile", _running, 60, "Running")
    pod_sync = node.service_pid("pod-sync")
    os.kill(pod_sync, signal.SIGSTOP)
    try:
        new_image = node.image("web")
        cluster.kubectl("set", "image", "pod/changed-meanwhile", f"app={new_image}")
        cluster.kubectl("delete", "pod", "deleted-meanwhile", "--wait=false")
        cluster.create_pod("created-meanwhile", sleeper)
        time.sleep(5)
    finally:
        os.kill(pod_sync, signal.SIGCONT)
    back = time.monotonic()
    cluster.wait_pod("created-meanwhile", _running, 60, "the pod created meanwhile Running")
    changed = cluster.wait_pod("changed-meanwhile", lambda p: _running(p) and p["status"]["containerStatuses"][0][
        "restartCount"] == 1 and "running" in p["status"]["containerStatuses"][0]["state"], 60,
        "the pod changed meanwhile running its new image")
    assert changed["status"]["containerStatuses"][0]["image"] == new_image
    wait_for(lambda: cluster.pod("deleted-meanwhile") is None
             and not node.containers_of(deleted["metadata"]["uid"]), 60, "the pod deleted meanwhile gone")
    print(f"\npod-sync hung while pods were created, changed and deleted: converged "
          f"{time.monotonic() - back:.1f}s after it was back")
    cluster.kubectl("delete", "pod", "changed-meanwhile", "created-meanwhile", "--wait=false")
