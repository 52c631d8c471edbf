"""The CIS Kubernetes Benchmark's worker-node checks, run by the real kube-bench against a node
that `pykubelet install` set up in a real systemd: every automated check passes, and every
manual one the node can settle does too.

The node is a joined one as kubeadm leaves it: its kubeconfig at /etc/kubernetes/kubelet.conf,
0600. The API server it names does not answer; kube-bench reads processes and files only."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from shared.api.self_signed import write_self_signed
from tests.deploy.test_systemd import PY, UNITS

ROOT = "/var/lib/pykubelet/bench"
# kube-bench 0.16.0's newest benchmark, CIS 1.12 (for Kubernetes 1.32 to 1.34): there is none
# for 1.37 yet.
BENCHMARK = "cis-1.12"
# What no kubelet settles: the checks of kube-proxy, which this node does not run (kube-bench
# reports its kubeconfig's checks as WARN when there is no such file).
NOT_THE_NODES = {"4.1.3": "kube-proxy's kubeconfig", "4.1.4": "kube-proxy's kubeconfig",
                 "4.3.1": "kube-proxy's metrics address"}


SERVED = f"""
import ssl, urllib.error, urllib.request
ctx = ssl.create_default_context()
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
try:
    code = urllib.request.urlopen("https://127.0.0.1:10250/pods", context=ctx, timeout=30).status
except urllib.error.HTTPError as exc:
    code = exc.code
served = ssl.get_server_certificate(("127.0.0.1", 10250), timeout=30)
with open("{ROOT}/pki/kubelet.crt") as f:
    print(code, ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(f.read()))
"""


def _kubeconfig(tmp_path: Path) -> str:
    cert, key = tmp_path / "ca.crt", tmp_path / "ca.key"
    write_self_signed(cert, key, "kubernetes", [])
    ca = base64.b64encode(cert.read_bytes()).decode()
    return f"""apiVersion: v1
kind: Config
clusters:
  - name: cluster
    cluster: {{server: "https://127.0.0.1:6443", certificate-authority-data: {ca}}}
users:
  - name: node
    user: {{token: bootstrap-token-placeholder}}
contexts:
  - name: node
    context: {{cluster: cluster, user: node}}
current-context: node
"""


def _results(report: dict) -> dict[str, dict]:
    return {r["test_number"]: r for control in report["Controls"] for group in control["tests"]
            for r in group["results"]}


def test_kube_bench_finds_nothing_to_fix_on_an_installed_node(machine, kube_bench, tmp_path):
    machine.run("sh", "-c", "umask 077 && mkdir -p /etc/kubernetes && cat > /etc/kubernetes/kubelet.conf",
                input=_kubeconfig(tmp_path))
    install = machine.run(PY, "-m", "services.cli.main", "install", "--python", PY, "--root-dir", ROOT,
                          "--kubeconfig", "/etc/kubernetes/kubelet.conf", "--node-ip", "127.0.0.1")
    assert "wrote /etc/pykubelet/pki/ca.crt" in install.stdout, install.stdout
    try:
        machine.run("systemctl", "start", "pykubelet.target", timeout=240)
        states = machine.run("systemctl", "is-active", *UNITS, check=False).stdout.split()
        assert states == ["active"] * len(UNITS), dict(zip(UNITS, states, strict=True))

        config = machine.run(PY, "-m", "services.cli.main", "kube-bench-config", "--from",
                             f"{kube_bench}/cfg/config.yaml").stdout
        machine.run("sh", "-c", "cat > /root/kube-bench.yaml", input=config)
        res = machine.run(f"{kube_bench}/bin/kube-bench", "--config-dir", f"{kube_bench}/cfg",
                          "--config", "/root/kube-bench.yaml", "run", "--targets", "node",
                          "--benchmark", BENCHMARK, "--json", check=False, timeout=120)
        assert res.stdout.strip(), f"kube-bench printed no report ({res.returncode}): {res.stderr[-3000:]}"
        results = _results(json.loads(res.stdout))
        served = machine.run(PY, "-c", SERVED).stdout.split()
    finally:
        machine.run("systemctl", "stop", "pykubelet.target", timeout=180, check=False)
        machine.run(PY, "-m", "services.cli.main", "uninstall", "--root-dir", ROOT, check=False)
        machine.run("rm", "-rf", ROOT, "/etc/kubernetes/kubelet.conf", check=False)

    # kube-bench found the node: its processes (the flags' checks) and its config file.
    assert f"pykubelet pod-sync --config /etc/pykubelet/config.yaml --root-dir {ROOT}" in \
        results["4.2.7"]["actual_value"], results["4.2.7"]
    assert "Written once by `pykubelet install`" in results["4.2.1"]["actual_value"], results["4.2.1"]
    to_fix = {n: (r["status"], r["test_desc"], r.get("actual_value", "")[:300])
              for n, r in results.items() if r["status"] in ("FAIL", "WARN") and n not in NOT_THE_NODES}
    assert not to_fix, json.dumps(to_fix, indent=1)
    for number in ("4.1.1", "4.1.5", "4.1.7", "4.1.9", "4.2.1", "4.2.2", "4.2.3", "4.2.9", "4.2.12", "4.2.13",
                   "4.2.14"):
        assert results[number]["status"] == "PASS", results[number]
    # The settings the file states are the node's: no anonymous request gets through, and the
    # certificate served is tlsCertFile's.
    assert served[0] == "401", served
    assert served[1] == "True", "the kubelet API serves the certificate tlsCertFile names"
