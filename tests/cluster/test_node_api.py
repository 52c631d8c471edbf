"""The kubelet API (node-api) in a real cluster: kubectl logs / exec / attach / port-forward / cp
and the node proxy endpoints through the API server, and its authentication and authorization
called directly."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.conftest import STREAM_IDLE_SECONDS, TLS12_SUITES, TLS_CURVE
from tests.cluster.harness import KUBE_BIN
from tests.integration.conftest import NODE_NAME, free_port, wait_for

LONG = 20000  # longer than containerd's 16 KiB line buffer: written as partial records
TALKER = ("echo one; sleep 0.2; echo two >&2; sleep 0.2; head -c %d /dev/zero | tr '\\0' x; echo; sleep 0.2; "
          "echo three; exec sleep 3600") % LONG
EXPECTED = "one\ntwo\n" + "x" * LONG + "\nthree\n"


def running(p: dict) -> bool:
    st = p.get("status", {})
    return st.get("phase") == "Running" and all("running" in c.get("state", {})
                                                 for c in st.get("containerStatuses", []))


@pytest.fixture(scope="module")
def talker(cluster):
    busybox = cluster.node.image("busybox")
    cluster.create_pod("talker", {"containers": [
        {"name": "main", "image": busybox, "command": ["sh", "-c", TALKER]},
        {"name": "second", "image": busybox, "command": ["sh", "-c", "echo from-second; exec sleep 3600"]}]})
    pod = cluster.wait_pod("talker", running, 60, "talker Running")
    wait_for(lambda: cluster.kubectl("logs", "talker", "-c", "main").stdout == EXPECTED, 20,
             "talker to write its lines")
    yield pod
    cluster.kubectl("delete", "pod", "talker", "--wait=false", check=False)


def kubelet_get(cluster, path: str, cert=None, token: str | None = None, method: str = "GET",
                data: bytes | None = None) -> tuple[int, str]:
    """Call the node's kubelet API directly (not through the API server)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the kubelet's self-signed serving certificate
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    req = urllib.request.Request(f"https://127.0.0.1:{cluster.node.kubelet_port}{path}", method=method, data=data)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=15) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def raw(cluster, path: str) -> str:
    return cluster.kubectl("get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy{path}").stdout


# -- kubectl logs ---------------------------------------------------------------------------------

def test_logs_with_the_kubectl_options(cluster, talker):
    k = cluster.kubectl
    assert k("logs", "talker", "-c", "second").stdout == "from-second\n"
    assert k("logs", "talker", "-c", "main", "--tail=1").stdout == "three\n"
    # tail counts records in the file, as the kubelet does: the long line is two (partial + full)
    assert k("logs", "talker", "-c", "main", "--tail=3").stdout == "x" * LONG + "\nthree\n"
    assert k("logs", "talker", "-c", "main", "--limit-bytes=6").stdout == "one\ntw"
    assert k("logs", "talker", "-c", "main", "--since=1h").stdout == EXPECTED
    assert k("logs", "talker", "-c", "main", "--since-time=2099-01-01T00:00:00Z").stdout == ""
    # every record gets its timestamp, the partial one too (as the kubelet writes them)
    stamped = k("logs", "talker", "-c", "main", "--timestamps").stdout
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ")
    assert stamp.sub("", stamped) == EXPECTED
    assert len(stamp.findall(stamped)) == 5 and all(stamp.match(line) for line in stamped.splitlines())
    bad = k("logs", "talker", "-c", "nope", check=False)
    assert bad.returncode != 0 and "nope" in bad.stderr
    prev = k("logs", "talker", "-c", "main", "--previous", check=False)
    assert prev.returncode != 0 and 'previous terminated container "main" in pod "talker" not found' in prev.stderr


def test_logs_previous_instance(cluster):
    cluster.create_pod("crasher", {"containers": [
        {"name": "c", "image": cluster.node.image("busybox"),
         "command": ["sh", "-c", "echo attempt-$(cat /proc/sys/kernel/random/uuid); sleep 1; exit 1"]}]})
    try:
        cluster.wait_pod("crasher", lambda p: any(c.get("restartCount", 0) >= 1 and c.get("lastState", {}).get("terminated")
                                                  for c in p.get("status", {}).get("containerStatuses", [])),
                         60, "crasher to restart once")
        prev = cluster.kubectl("logs", "crasher", "--previous").stdout
        assert re.fullmatch(r"attempt-[0-9a-f-]{36}\n", prev), prev
        current = cluster.kubectl("logs", "crasher").stdout
        assert current != prev or current == ""  # another instance, another uuid
    finally:
        cluster.kubectl("delete", "pod", "crasher", "--wait=false", check=False)


def test_logs_follow_survives_rotation(cluster):
    """`kubectl logs -f` of a fast writer across pod-sync's log rotations (64 KiB files here):
    every line exactly once, in order."""
    pad = "p" * 200  # ~60 KiB/s: a rotation at each of pod-sync's 10 s checks
    cluster.create_pod("ticker", {"containers": [
        {"name": "t", "image": cluster.node.image("busybox"),
         "command": ["sh", "-c", f'i=0; while true; do echo "tick $i {pad}"; i=$((i+1)); usleep 3000; done']}]})
    try:
        cluster.wait_pod("ticker", running, 60, "ticker Running")
        uid = cluster.pod("ticker")["metadata"]["uid"]
        log_dir = cluster.node.root / "pod-logs" / f"default_ticker_{uid}" / "t"
        started = time.time()
        proc = subprocess.Popen([str(KUBE_BIN / "kubectl"), f"--kubeconfig={cluster.cp.admin_kubeconfig}",
                                 "logs", "-f", "ticker"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: any(p.stat().st_mtime > started and ".log." in p.name for p in log_dir.iterdir()),
                     40, "a log rotation while following")
            time.sleep(2)
        finally:
            proc.terminate()
            out, err = proc.communicate(timeout=20)
        lines = out.splitlines()[:-1]  # the last one may be cut by the kill
        numbers = [int(line.split()[1]) for line in lines]
        assert len(numbers) > 100, (out[-500:], err)
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "lines lost or repeated"
    finally:
        cluster.kubectl("delete", "pod", "ticker", "--wait=false", check=False)


# -- exec, cp, attach, port-forward -----------------------------------------------------------------

def test_exec_propagates_output_and_exit_code(cluster, talker):
    res = cluster.kubectl("exec", "talker", "-c", "main", "--", "sh", "-c", "echo out; echo err >&2; exit 3",
                          check=False)
    assert (res.returncode, res.stdout, res.stderr.splitlines()[0]) == (3, "out\n", "err")
    res = cluster.kubectl("exec", "-i", "talker", "-c", "main", "--", "cat", input_text="hello\nworld\n")
    assert res.stdout == "hello\nworld\n"
    missing = cluster.kubectl("exec", "talker", "-c", "nope", "--", "true", check=False)
    assert missing.returncode != 0 and "nope" in missing.stderr


def test_cp_into_and_out_of_a_container(cluster, talker, tmp_path):
    src = tmp_path / "payload.txt"
    src.write_text("copied through exec and tar\n" * 100)
    cluster.kubectl("cp", str(src), "default/talker:/tmp/payload.txt", "-c", "main")
    assert cluster.kubectl("exec", "talker", "-c", "main", "--", "cat", "/tmp/payload.txt").stdout == src.read_text()
    back = tmp_path / "back.txt"
    cluster.kubectl("cp", "default/talker:/tmp/payload.txt", str(back), "-c", "main")
    assert back.read_text() == src.read_text()


def test_attach_streams_the_containers_stdio(cluster):
    cluster.create_pod("echoer", {"containers": [
        {"name": "cat", "image": cluster.node.image("busybox"), "command": ["cat"], "stdin": True}]})
    try:
        cluster.wait_pod("echoer", running, 60, "echoer Running")
        proc = subprocess.Popen([str(KUBE_BIN / "kubectl"), f"--kubeconfig={cluster.cp.admin_kubeconfig}",
                                 "attach", "-i", "echoer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.extend(iter(proc.stdout.readline, "")), daemon=True)
        reader.start()
        try:
            # attach may take a moment to connect: send until the echo comes back
            def echoed() -> bool:
                proc.stdin.write("ping\n")
                proc.stdin.flush()
                return any("ping" in line for line in got)
            wait_for(echoed, 30, "the attached container to echo stdin", interval=1)
        finally:
            proc.kill()
            proc.wait(10)
    finally:
        cluster.kubectl("delete", "pod", "echoer", "--wait=false", check=False)


def test_port_forward_carries_parallel_connections(cluster):
    cluster.create_pod("fwd", {"containers": [{"name": "web", "image": cluster.node.image("web")}]})
    try:
        cluster.wait_pod("fwd", running, 60, "fwd Running")
        port = free_port()
        proc = subprocess.Popen([str(KUBE_BIN / "kubectl"), f"--kubeconfig={cluster.cp.admin_kubeconfig}",
                                 "port-forward", "pod/fwd", f"{port}:80"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert "Forwarding from" in proc.stdout.readline()

            def fetch(_):
                return httpx.get(f"http://127.0.0.1:{port}/", timeout=15).text
            with ThreadPoolExecutor(3) as pool:
                pages = list(pool.map(fetch, range(3)))
            assert all("Hello from a pykubelet pod" in p for p in pages)
        finally:
            proc.terminate()
            proc.wait(10)
    finally:
        cluster.kubectl("delete", "pod", "fwd", "--wait=false", check=False)


def test_a_stream_that_carries_nothing_is_closed_after_the_idle_timeout(cluster, talker):
    """streamingConnectionIdleTimeout (tests/cluster/conftest.py): an exec stream of `cat` that
    is never sent a byte is closed by the node once nothing moved for that long. Straight to the
    kubelet API: the API server pings every stream it proxies every 5 s, which keeps `kubectl
    exec` open on the kubelet as on pykubelet."""
    admin = cluster.cp.kubelet_client
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # who answers is not the point here
    ctx.load_cert_chain(str(admin.cert), str(admin.key))
    key = base64.b64encode(os.urandom(16)).decode()
    head = ("GET /exec/default/talker/main?command=cat&input=1&output=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n")
    with socket.create_connection(("127.0.0.1", cluster.node.kubelet_port), timeout=30) as raw_sock:
        with ctx.wrap_socket(raw_sock) as tls:
            tls.sendall(head.encode())
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = tls.recv(4096)
                assert chunk, f"closed before the upgrade: {answer!r}"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 101"), answer[:300]
            tls.settimeout(STREAM_IDLE_SECONDS * 4 + 30)
            start = time.monotonic()
            try:
                while tls.recv(4096):
                    pass
            except TimeoutError:
                pytest.fail(f"an idle exec stream was still open after {time.monotonic() - start:.0f}s")
            took = time.monotonic() - start
    assert STREAM_IDLE_SECONDS - 1 <= took <= STREAM_IDLE_SECONDS * 4 + 30, took


def tls12_handshake(cluster, ciphers: str) -> str:
    """A TLS 1.2 handshake with the node's kubelet API offering only these OpenSSL suites: the
    suite agreed."""
    ctx = ssl.create_default_context(cafile=str(cluster.cp.ca))
    ctx.check_hostname = False  # the certificate is the node's; the suites are the point here
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers)
    with socket.create_connection(("127.0.0.1", cluster.node.kubelet_port), timeout=10) as raw_sock:
        with ctx.wrap_socket(raw_sock) as tls:
            return tls.cipher()[0]


def test_tls12_clients_get_only_the_configured_cipher_suites(cluster):
    """tlsCipherSuites (tests/cluster/conftest.py) names the AES-256 GCM suites: a TLS 1.2 client
    offering only AES-128 ones is refused, one offering an AES-256 one gets it."""
    assert TLS12_SUITES == ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]
    agreed = tls12_handshake(cluster, "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384")
    assert agreed in ("ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384")
    with pytest.raises(ssl.SSLError):
        tls12_handshake(cluster, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                                 "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")


def test_the_kubelet_api_agrees_only_the_configured_curve(cluster, talker):
    """tlsCurvePreferences [24] (tests/cluster/conftest.py): a TLS 1.3 client offering only P-256 or
    X25519 is refused, one offering P-384 gets through; the API server, which offers P-384 among
    others, reaches the node all the same (a pod's log through it)."""
    assert TLS_CURVE == 24

    def handshake(curve: str) -> str:
        ctx = ssl.create_default_context(cafile=str(cluster.cp.ca))
        ctx.check_hostname = False
        ctx.set_ecdh_curve(curve)
        with socket.create_connection(("127.0.0.1", cluster.node.kubelet_port), timeout=10) as raw_sock:
            with ctx.wrap_socket(raw_sock) as tls:
                return tls.version() or ""

    for offered in ("prime256v1", "X25519"):
        with pytest.raises((ssl.SSLError, ConnectionError)):  # refused in the handshake
            handshake(offered)
    assert handshake("secp384r1") == "TLSv1.3"
    assert cluster.cp.kubectl("logs", "talker", "-c", "main", "--tail", "1").returncode == 0


# -- the node proxy endpoints -------------------------------------------------------------------------

def _cgroup_value(path: Path) -> int:
    return int(path.read_text().split()[0])


def test_stats_summary_matches_the_pods_cgroups(cluster, talker):
    uid = talker["metadata"]["uid"]
    summary = json.loads(raw(cluster, "/stats/summary"))
    node = summary["node"]
    assert node["nodeName"] == NODE_NAME
    assert node["cpu"]["usageCoreNanoSeconds"] > 0 and node["memory"]["workingSetBytes"] > 0
    assert node["fs"]["capacityBytes"] > node["fs"]["availableBytes"] > 0
    assert node["runtime"]["imageFs"]["capacityBytes"] > 0
    pod = next(p for p in summary["pods"] if p["podRef"]["uid"] == uid)
    assert pod["podRef"] == {"name": "talker", "namespace": "default", "uid": uid}
    assert {c["name"] for c in pod["containers"]} == {"main", "second"}
    main = next(c for c in pod["containers"] if c["name"] == "main")
    assert main["logs"]["usedBytes"] >= LONG  # the 20 000-character line is in its log
    # cross-check with the pod's cgroup (v1, cgroupfs driver, BestEffort QoS)
    cg_cpu = next(Path("/sys/fs/cgroup/cpuacct").glob(f"kubepods*/**/pod{uid}"))
    cg_mem = next(Path("/sys/fs/cgroup/memory").glob(f"kubepods*/**/pod{uid}"))
    cpu_after = _cgroup_value(cg_cpu / "cpuacct.usage")
    assert 0 < pod["cpu"]["usageCoreNanoSeconds"] <= cpu_after
    usage = _cgroup_value(cg_mem / "memory.usage_in_bytes")
    stat = dict(line.split() for line in (cg_mem / "memory.stat").read_text().splitlines())
    working_set = usage - int(stat["total_inactive_file"])
    assert abs(pod["memory"]["workingSetBytes"] - working_set) <= max(2 << 20, working_set // 2)
    assert pod["ephemeral-storage"]["usedBytes"] >= main["logs"]["usedBytes"]


def test_resource_metrics_as_metrics_server_scrapes_them(cluster, talker):
    families = {f.name: f for f in text_string_to_metric_families(raw(cluster, "/metrics/resource"))}
    for name in ("node_cpu_usage_seconds", "node_memory_working_set_bytes", "container_cpu_usage_seconds",
                 "container_memory_working_set_bytes", "pod_cpu_usage_seconds", "pod_memory_working_set_bytes"):
        assert name in families, sorted(families)
    mem = [s for s in families["container_memory_working_set_bytes"].samples
           if s.labels == {"container": "main", "pod": "talker", "namespace": "default"}]
    assert mem and mem[0].value > 0
    assert families["node_cpu_usage_seconds"].samples[0].value > 0


def test_proxy_endpoints_answer_in_the_kubelets_formats(cluster, talker):
    assert raw(cluster, "/healthz") == "ok"
    pods = json.loads(raw(cluster, "/pods"))
    assert pods["kind"] == "PodList" and "talker" in {p["metadata"]["name"] for p in pods["items"]}
    cfg = json.loads(raw(cluster, "/configz"))["kubeletconfig"]
    assert cfg["port"] == cluster.node.kubelet_port and cfg["authorization"]["mode"] == "Webhook"
    assert cfg["syncFrequency"] == "30s"
    spec = json.loads(raw(cluster, "/spec"))
    assert spec["num_cores"] >= 1 and spec["memory_capacity"] > 0
    swap_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("SwapTotal:"))
    assert spec["swap_capacity"] == swap_kib * 1024
    families = {f.name: f for f in text_string_to_metric_families(raw(cluster, "/metrics"))}
    assert {"kubelet_running_pods", "kubelet_runtime_operations", "pykubelet_service_up"} <= set(families)
    # One series, as the kubelet's: only pod-sync exports it (not every service forked beside it).
    assert [s.labels for s in families["kubelet_running_pods"].samples] == [{}]
    cadvisor = {f.name: f for f in text_string_to_metric_families(raw(cluster, "/metrics/cadvisor"))}
    assert {"container_memory_working_set_bytes", "machine_cpu_cores", "container_spec_memory_limit_bytes",
            "container_cpu_system_seconds", "container_memory_cache"} <= set(cadvisor)
    # The machine families of the kubelet 1.37's cAdvisor, x86's values.
    assert [s.value for s in cadvisor["machine_swap_bytes"].samples] == [swap_kib * 1024]
    assert [s.value for s in cadvisor["machine_cpu_books"].samples] == [0]
    assert sorted(s.labels["mode"] for s in cadvisor["machine_nvm_capacity"].samples) == ["app_direct_mode",
                                                                                         "memory_mode"]
    # The talker's containers are BestEffort: cpu.shares 2 in their cgroup, as cAdvisor reads it.
    main = next(s for s in cadvisor["container_spec_cpu_shares"].samples
                if s.labels["pod"] == "talker" and s.labels["container"] == "main")
    cgroup = next(Path("/sys/fs/cgroup/cpu").glob(f"kubepods*/**/pod{talker['metadata']['uid']}")) / \
        main.labels["id"].rsplit("/", 1)[1]
    assert main.value == _cgroup_value(cgroup / "cpu.shares") == 2
    # The root's filesystem's device, from /proc/diskstats: this host has done I/O since boot.
    io_time = [s for s in cadvisor["container_fs_io_time_seconds"].samples if s.labels["id"] == "/"]
    assert io_time and all(s.labels["device"].startswith("/dev/") and s.value > 0 for s in io_time), io_time
    probes = {f.name for f in text_string_to_metric_families(raw(cluster, "/metrics/probes"))}
    assert "prober_probe" in probes and "kubelet_running_pods" not in probes


# -- serving certificate ----------------------------------------------------------------------------

def served_certificate(cluster):
    """The node's serving certificate, verified against the cluster CA for the node's IP."""
    from cryptography import x509

    from shared.host.facts import node_ip

    ctx = ssl.create_default_context(cafile=str(cluster.cp.ca))
    with socket.create_connection(("127.0.0.1", cluster.node.kubelet_port), timeout=10) as raw_sock:
        with ctx.wrap_socket(raw_sock, server_hostname=node_ip()) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def test_serving_certificate_comes_from_a_csr_and_rotates(cluster):
    """serverTLSBootstrap: the first certificate (60 s here) is renewed through a new CSR before
    it expires, and the new one is served without a restart."""
    signer = cluster.signer
    wait_for(lambda: len(signer.issued) >= 2, 120, f"a second CSR (signer errors: {signer.errors[-3:]})")
    cert = wait_for(lambda: (c := served_certificate(cluster)).serial_number == signer.issued[-1][1] and c,
                    30, "the renewed certificate to be served")
    assert cert.subject.rfc4514_string() == f"CN=system:node:{NODE_NAME},O=system:nodes"
    key_file = cluster.node.root / "pki" / "kubelet-server-current.pem"
    assert key_file.stat().st_mode & 0o777 == 0o600
    # the API server (which verifies kubelets' certificates here) still reaches the node
    assert raw(cluster, "/healthz") == "ok"


# -- authentication, authorization, bad input ---------------------------------------------------------

STATS_ONLY = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "metadata": {"name": "node-stats-reader"},
              "rules": [{"apiGroups": [""], "resources": ["nodes/stats"], "verbs": ["get"]}]}


@pytest.fixture(scope="module")
def stats_reader(cluster):
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(STATS_ONLY))
    cluster.kubectl("create", "clusterrolebinding", "stats-reader", "--clusterrole=node-stats-reader",
                    "--user=viewer", "--serviceaccount=default:reader")
    cluster.kubectl("create", "serviceaccount", "reader")
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"audiences": [], "expirationSeconds": 600}}
    path = Path(cluster.cp.root) / "token-request.json"
    path.write_text(json.dumps(request))
    out = cluster.kubectl("create", "--raw", "/api/v1/namespaces/default/serviceaccounts/reader/token",
                          "-f", str(path)).stdout
    token = json.loads(out)["status"]["token"]
    cert = cluster.cp.pki.issue("viewer", "viewer")
    return cert, token


def test_no_credentials_is_401(cluster):
    assert kubelet_get(cluster, "/stats/summary")[0] == 401
    assert kubelet_get(cluster, "/pods", token="not-a-real-token")[0] == 401


def test_rbac_decides_per_subresource(cluster, stats_reader, talker):
    cert, token = stats_reader
    for creds in ({"cert": cert}, {"token": token}):
        status, body = kubelet_get(cluster, "/stats/summary", **creds)
        assert status == 200 and json.loads(body)["node"]["nodeName"] == NODE_NAME
        status, body = kubelet_get(cluster, "/exec/default/talker/main?command=true&output=1",
                                   method="POST", **creds)
        assert status == 403 and "verb=create, resource=nodes, subresource(s)=[proxy]" in body
        assert kubelet_get(cluster, "/pods", **creds)[0] == 403


def test_nodes_pods_alone_lists_the_pods_but_reaches_no_container(cluster, talker):
    """KubeletFineGrainedAuthz (locked on in 1.37): a user granted get on nodes/pods (a monitoring
    agent's role) reads /pods and /runningpods/ without nodes/proxy, which would also let it read
    every container's log and exec into it; nodes/healthz alone reads /healthz."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "node-pod-lister"},
            "rules": [{"apiGroups": [""], "resources": ["nodes/pods", "nodes/healthz"], "verbs": ["get"]}]}
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(role))
    cluster.kubectl("create", "clusterrolebinding", "node-pod-lister", "--clusterrole=node-pod-lister",
                    "--user=pod-lister")
    cert = cluster.cp.pki.issue("pod-lister", "pod-lister")
    status, body = kubelet_get(cluster, "/pods", cert=cert)
    assert status == 200 and any(p["metadata"]["name"] == "talker" for p in json.loads(body)["items"]), body[:300]
    status, body = kubelet_get(cluster, "/runningpods/", cert=cert)
    assert status == 200 and any(p["metadata"]["name"] == "talker" for p in json.loads(body)["items"]), body[:300]
    assert kubelet_get(cluster, "/healthz", cert=cert) == (200, "ok")
    status, body = kubelet_get(cluster, "/containerLogs/default/talker/main", cert=cert)
    assert status == 403 and "verb=get, resource=nodes, subresource(s)=[proxy]" in body, body
    status, body = kubelet_get(cluster, "/configz", cert=cert)
    assert status == 403 and "subresource(s)=[configz proxy]" in body, body


def test_the_nodes_var_log_is_served_under_logs(cluster, stats_reader):
    """enableSystemLogHandler (the default): `kubectl get --raw .../proxy/logs/` lists the node's
    /var/log as the kubelet's file server does and sends a file whole; nodes/log decides who may."""
    name = f"pykubelet-test-{uuid.uuid4().hex[:8]}.log"
    path = Path("/var/log") / name
    path.write_text("first line\nsecond line\n")
    try:
        listing = raw(cluster, "/logs/")
        assert listing.startswith('<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n')
        assert f'<a href="{name}">{name}</a>' in listing, listing[:2000]
        assert raw(cluster, f"/logs/{name}") == "first line\nsecond line\n"
        missing = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/logs/no-such-file", check=False)
        assert missing.returncode != 0 and "NotFound" in missing.stderr, missing.stderr
        cert, _ = stats_reader
        status, body = kubelet_get(cluster, f"/logs/{name}", cert=cert)
        assert status == 403 and "verb=get, resource=nodes, subresource(s)=[log]" in body, body
    finally:
        path.unlink()


def test_node_log_queries_read_a_service_log_of_var_log_as_the_kubelets_do(cluster, stats_reader):
    """enableSystemLogQuery (the cluster node's setting): `kubectl get --raw
    .../proxy/logs/?query=NAME` reads the service NAME's log (here, where no journal holds it,
    /var/log/NAME.log) and `?query=DIR/FILE` a file below /var/log; a query the kubelet refuses
    gets its words through the API server, and nodes/log decides who may ask."""
    name = f"pykubelet-test-{uuid.uuid4().hex[:8]}"
    Path("/var/log", f"{name}.log").write_text("service line\n")
    try:
        assert raw(cluster, f"/logs/?query={name}") == "service line\n"
        assert raw(cluster, f"/logs/?query=./{name}.log") == "service line\n"
        assert raw(cluster, f"/logs/?query={name}&tailLines=1") == (
            f"\noptions present and query resolved to log files for [{name}]\ntry without specifying options\n")
        escape = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/logs/?query=/etc/passwd",
                                 check=False)
        assert escape.returncode != 0 and "statat /etc/passwd: path escapes from parent" in escape.stderr, \
            escape.stderr
        admin = cluster.cp.kubelet_client
        assert kubelet_get(cluster, "/logs/?query=a%3Bb", cert=admin) == (
            406, 'query: Invalid value: "a;b": input contains unsupported characters\n')
        assert kubelet_get(cluster, "/logs/?tailLines=x", cert=admin) == (
            400, 'tailLines: Invalid value: "x": strconv.Atoi: parsing "x": invalid syntax\n')
        cert, _ = stats_reader
        status, body = kubelet_get(cluster, f"/logs/?query={name}", cert=cert)
        assert status == 403 and "verb=get, resource=nodes, subresource(s)=[log]" in body, body
    finally:
        Path("/var/log", f"{name}.log").unlink()


def test_debug_flags_v_sets_the_log_verbosity_of_every_service(cluster, stats_reader, tmp_path):
    """enableDebugFlagsHandler (the default): `kubectl replace --raw .../proxy/debug/flags/v` with a
    number sets the verbosity every service logs at, as the kubelet's PUT sets its -v, until it is
    set again or node-api restarts; nodes/proxy (verb update) decides who may; a body Go cannot
    parse is refused with Go's words and changes nothing."""
    from shared.process.admin import SERVICES

    logs = cluster.node.root / "logs"
    url = f"/api/v1/nodes/{NODE_NAME}/proxy/debug/flags/v"

    def put_through_the_api_server(value: str) -> str:
        body = tmp_path / "v"
        body.write_text(value)  # no newline: Go's ParseUint takes the body as sent
        return cluster.kubectl("replace", "--raw", url, "-f", str(body)).stdout

    def all_logged(line: str) -> bool:
        return all(line.format(service=s) in (logs / f"{s}.log").read_text() for s in SERVICES)

    assert put_through_the_api_server("4") == "successfully set klog.logging.verbosity to 4\n"
    try:
        # Each service writes the change at V(4): the line is there only if the level took.
        wait_for(lambda: all_logged("DEBUG {service} shared.process.log_verbosity: log verbosity 4 (was 0)"), 30,
                 "every service logging at V(4)")
        admin = cluster.cp.kubelet_client
        assert kubelet_get(cluster, "/debug/flags/v", cert=admin) == (406, "unsupported http method\n")
        assert kubelet_get(cluster, "/debug/flags/v", cert=admin, method="PUT", data=b"4\n") == (
            400, 'strconv.ParseUint: parsing "4\\n": invalid syntax\n')
        assert kubelet_get(cluster, "/debug/flags/v", cert=admin, method="PUT", data=b"1" * 65)[0] == 413
        cert, _ = stats_reader
        status, body = kubelet_get(cluster, "/debug/flags/v", cert=cert, method="PUT", data=b"9")
        assert status == 403 and "verb=update, resource=nodes, subresource(s)=[proxy]" in body, body
    finally:
        assert put_through_the_api_server("0") == "successfully set klog.logging.verbosity to 0\n"
    wait_for(lambda: all_logged("INFO {service} shared.process.log_verbosity: log verbosity 0 (was 4), "
                                "the configuration's"), 30, "every service back at the configured verbosity")


def test_running_pods_and_the_disabled_profiling_endpoint_answer_as_the_kubelets(cluster, talker):
    """/runningpods/ lists what the runtime runs, as the kubelet's: the talker pod by its names and
    UID with its two running containers. enableProfilingHandler false (the cluster node's setting):
    /debug/pprof/ answers the kubelet's 405 "profiling endpoint is disabled."."""
    listing = json.loads(raw(cluster, "/runningpods/"))
    assert listing["kind"] == "PodList" and listing["apiVersion"] == "v1", listing
    [pod] = [p for p in listing["items"] if p["metadata"]["name"] == "talker"]
    assert pod["metadata"]["namespace"] == "default" and pod["metadata"]["uid"] == talker["metadata"]["uid"]
    assert sorted(c["name"] for c in pod["spec"]["containers"]) == ["main", "second"], pod
    assert all(c["image"] for c in pod["spec"]["containers"]), pod
    admin = cluster.cp.kubelet_client
    for path in ("/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/heap"):
        assert kubelet_get(cluster, path, cert=admin) == (405, "profiling endpoint is disabled.\n"), path


def test_bad_requests_get_clear_answers(cluster, talker):
    admin = cluster.cp.kubelet_client
    assert kubelet_get(cluster, "/no/such/path", cert=admin)[0] == 404
    assert kubelet_get(cluster, "/containerLogs/default/nopod/c", cert=admin) == (404, 'pod "nopod" does not exist\n')
    status, body = kubelet_get(cluster, "/containerLogs/default/talker/nope", cert=admin)
    assert status == 404 and 'container "nope" not found in pod "talker"' in body
    status, body = kubelet_get(cluster, "/containerLogs/default/talker/main?tailLines=-3", cert=admin)
    assert status == 400 and "tailLines" in body
    status, body = kubelet_get(cluster, "/containerLogs/default/talker/main?sinceTime=yesterday", cert=admin)
    assert status == 400 and "sinceTime" in body
    # a path-like name is just a name that matches no pod
    assert kubelet_get(cluster, "/containerLogs/default/..%2F..%2Fetc/main", cert=admin)[0] == 404
    assert kubelet_get(cluster, "/healthz", cert=admin) == (200, "ok")
