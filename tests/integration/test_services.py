"""All seven services run, answer on their admin apps and expose their state."""

from __future__ import annotations

import subprocess

from tests.integration.conftest import KUBELET_CERT_DIR, POD_CIDR, SERVICES, wait_for


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


def _iptables(*args: str) -> str:
    res = subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, (args, res.stderr)
    return res.stdout


def test_the_kubelets_iptables_util_chains_are_made(node):
    """makeIPTablesUtilChains (default true): the chains the kubelet makes for kube-proxy and CNI
    agents, in this host's iptables, with the canary that tells a flush."""
    wait_for(lambda: "iptables rules (KUBE-IPTABLES-HINT, KUBE-FIREWALL)" in (node.root / "logs" / "network.log").read_text(), 30,
             "the network service's word that it made the chains")
    assert "-N KUBE-IPTABLES-HINT" in _iptables("-t", "mangle", "-S")
    assert "-A INPUT -j KUBE-FIREWALL" in _iptables("-S", "INPUT")
    assert "-A OUTPUT -j KUBE-FIREWALL" in _iptables("-S", "OUTPUT")
    assert ('-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet '
            'connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP') in _iptables("-S", "KUBE-FIREWALL")
    for table in ("mangle", "nat", "filter"):
        assert "-N KUBE-KUBELET-CANARY" in _iptables("-t", table, "-S"), table


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


def _tcp_listeners() -> set[tuple[str, int]]:
    """(address, port) of every IPv4 TCP socket listening on this machine."""
    out = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":  # LISTEN
            addr, port = local.split(":")
            out.add((".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)), int(port, 16)))
    return out


def test_the_kubelet_api_listens_where_address_and_read_only_port_say(node):
    """The node's command line (tests/integration/conftest.py) has --address 127.0.0.1,
    --read-only-port and --cert-dir: `pykubelet up` hands the kubelet's flags to node-api."""
    import ssl

    import httpx

    listeners = _tcp_listeners()
    assert ("127.0.0.1", node.kubelet_port) in listeners and ("0.0.0.0", node.kubelet_port) not in listeners
    assert ("127.0.0.1", node.read_only_port) in listeners
    # The read-only port: plain HTTP, no credentials, and none of the container data or config.
    plain = f"http://127.0.0.1:{node.read_only_port}"
    assert httpx.get(f"{plain}/healthz", timeout=10).text == "ok"
    assert httpx.get(f"{plain}/configz", timeout=10).status_code == 404
    # The HTTPS port asks who is there first.
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    assert httpx.get(f"https://127.0.0.1:{node.kubelet_port}/configz", verify=insecure, timeout=10).status_code == 401
    # The certificate it serves is the one made in --cert-dir.
    shown = ssl.get_server_certificate(("127.0.0.1", node.kubelet_port), timeout=10)
    kept = (node.root / KUBELET_CERT_DIR / "kubelet.crt").read_text()
    assert ssl.PEM_cert_to_DER_cert(shown) == ssl.PEM_cert_to_DER_cert(kept)


def test_healthz_is_ok_while_every_service_is_alive(node):
    """healthzPort on healthzBindAddress (127.0.0.1): what `kubeadm join` waits for. Nothing else
    is served there."""
    import httpx

    url = f"http://127.0.0.1:{node.healthz_port}"
    assert ("127.0.0.1", node.healthz_port) in _tcp_listeners()
    resp = httpx.get(f"{url}/healthz", timeout=10)
    assert (resp.status_code, resp.text) == (200, "ok")
    assert httpx.get(f"{url}/pods", timeout=10).status_code == 404
    assert httpx.post(f"{url}/healthz", timeout=10).status_code == 405


def test_enforce_node_allocatable_caps_the_pods_cgroup(node):
    """enforceNodeAllocatable (the kubelet's default ["pods"]): /kubepods is capped at
    allocatable before eviction thresholds, here the whole node (the test node reserves nothing);
    its pids.max at the node's pid capacity, the lesser of pid_max and threads-max."""
    from pathlib import Path

    from shared.host.facts import cpu_capacity_millicores, memory_capacity_bytes, task_max

    kubepods = Path("/sys/fs/cgroup")
    limit = int((kubepods / "memory" / "kubepods" / "memory.limit_in_bytes").read_text())
    page = 4096  # the kernel keeps a limit in pages
    assert memory_capacity_bytes() - page < limit <= memory_capacity_bytes(), limit
    assert int((kubepods / "cpu" / "kubepods" / "cpu.shares").read_text()) == cpu_capacity_millicores() * 1024 // 1000
    assert int((kubepods / "pids" / "kubepods" / "pids.max").read_text()) == task_max() == min(
        int(Path(f"/proc/sys/kernel/{name}").read_text()) for name in ("pid_max", "threads-max"))
