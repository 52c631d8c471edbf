"""All seven services run, answer on their admin apps and expose their state."""

from __future__ import annotations


from tests.integration.conftest import POD_CIDR, SERVICES, wait_for


def test_every_service_is_ready(node):
    for service in SERVICES:
        resp = node.admin_get(service, "/readyz", timeout=5)
        body = resp.json()
        assert resp.status_code == 200, f"{service} not ready: {body}"
        assert body["service"] == service and body["checks"]["bus"]["ok"]
        assert node.admin_get(service, "/healthz", timeout=5).text == "ok"


def test_network_service_wrote_cni_config_and_reports_ready(node):
    net = node.admin_get("network", "/network", timeout=5).json()
    assert net["ready"] and net["podCIDR"] == POD_CIDR
    conf = (node.root / "cni" / "net.d" / "10-pykubelet.conflist").read_text()
    assert POD_CIDR in conf and '"portmap"' in conf
    assert node.status()["network"]["ready"]


def test_runtime_metrics_use_kubelet_names(node):
    text = node.admin_get("pod-sync", "/metrics", timeout=5).text
    assert 'kubelet_runtime_operations_total{operation_type="list_podsandbox"}' in text
    assert "kubelet_runtime_operations_duration_seconds_bucket" in text
    assert "kubelet_pleg_relist_duration_seconds" in text


def test_node_api_lists_pods_as_a_pod_list(pods):
    pods.write("listed.yaml", f"""apiVersion: v1
kind: Pod
metadata: {{name: listed}}
spec:
  containers: [{{name: web, image: "{pods.image('web')}"}}]
""")
    pods.wait_running("listed")
    body = pods.admin_get("node-api", "/pods", timeout=5).json()
    assert body["kind"] == "PodList"
    [item] = [i for i in body["items"] if i["metadata"]["name"].startswith("listed-")]
    assert item["status"]["phase"] == "Running"
    assert item["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
    # The node's state is root's alone: the store (whole manifests) 0600, pod dirs 0750.
    assert _mode(pods.root / "state.db") == 0o600
    assert _mode(pods.root / "pods") == 0o750 and _mode(pods.root / "pods" / item["metadata"]["uid"]) == 0o750


def _mode(path) -> int:
    import os
    import stat

    return stat.S_IMODE(os.stat(path).st_mode)


def test_pod_lifecycle_metrics(pods):
    pods.write("metered.yaml", f"""apiVersion: v1
kind: Pod
metadata: {{name: metered}}
spec:
  containers: [{{name: web, image: "{pods.image('web')}"}}]
""")
    pods.wait_running("metered")

    def value(name):
        text = pods.admin_get("pod-sync", "/metrics", timeout=5).text
        line = next((s for s in text.splitlines() if s.startswith(name + " ") or s.startswith(name + "{")), None)
        assert line is not None, f"{name} missing"
        return float(line.split()[-1])

    # gauges follow the next PLEG relist after the container started
    wait_for(lambda: value("kubelet_running_pods") >= 1
             and value('kubelet_running_containers{container_state="running"}') >= 1, 10,
             "the running pod and container gauges")

    assert value("kubelet_pod_start_duration_seconds_count") >= 1
    assert value("kubelet_pod_start_sli_duration_seconds_count") >= 1
    assert value("kubelet_running_pods") >= 1
    assert value('kubelet_running_containers{container_state="running"}') >= 1
    assert value('kubelet_started_containers_total{container_type="container"}') >= 1
