"""Static pods whose fields would write lines of their own into the files the node makes for
them: the pod's /etc/hosts (hostname, subdomain, hostAliases), the sandbox's resolv.conf
(dnsConfig) and paths under /proc/sys (sysctls). Each manifest is reported as unusable, naming
the field; no container and no file of the node gets the injected line; the node's other work
goes on meanwhile."""

from __future__ import annotations

import yaml

from tests.integration.conftest import wait_for
from tests.security.conftest import assert_node_serves

EVIL = "6.6.6.6"
INJECTED = f"a\n{EVIL} evil"

# name -> (what the pod's spec adds, the field the error must name)
ATTACKS: dict[str, tuple[dict, str]] = {
    "inject-hostname": ({"hostname": INJECTED}, "spec.hostname"),
    "inject-subdomain": ({"subdomain": INJECTED}, "spec.subdomain"),
    "inject-alias-ip": ({"hostAliases": [{"ip": f"fe80::1%x\n{EVIL} evil", "hostnames": ["x"]}]},
                        "spec.hostAliases[0].ip"),
    "inject-alias-name": ({"hostAliases": [{"ip": "192.0.2.1", "hostnames": ["ok", INJECTED]}]},
                          "spec.hostAliases[0].hostnames"),
    "inject-nameserver": ({"dnsPolicy": "None", "dnsConfig": {"nameservers": [f"fe80::1%x\nnameserver {EVIL}"]}},
                          "spec.dnsConfig.nameservers"),
    "inject-search": ({"dnsConfig": {"searches": [f"a.example\nnameserver {EVIL}"]}}, "spec.dnsConfig.searches"),
    "inject-search-space": ({"dnsConfig": {"searches": [f"a.example {EVIL}"]}}, "spec.dnsConfig.searches"),
    "inject-option": ({"dnsConfig": {"options": [{"name": f"ndots\nnameserver {EVIL}"}]}},
                      "spec.dnsConfig.options[0].name"),
    "inject-option-value": ({"dnsConfig": {"options": [{"name": "ndots", "value": f"1 {EVIL}"}]}},
                            "spec.dnsConfig.options[0].value"),
    "inject-sysctl-path": ({"securityContext": {"sysctls": [{"name": "net/../../../sys/kernel/x", "value": "1"}]}},
                           "spec.securityContext.sysctls[0].name"),
    "inject-sysctl-line": ({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies\nkernel.x",
                                                             "value": "1"}]}},
                           "spec.securityContext.sysctls[0].name"),
}


def _write(pods, name: str, spec: dict) -> None:
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"terminationGracePeriodSeconds": 2, **spec,
                    "containers": [{"name": "app", "image": pods.image("busybox"), "command": ["sleep", "3600"]}]}}
    pods.write(f"{name}.yaml", yaml.safe_dump(doc))


def _errors(pods) -> dict[str, str]:
    return {e["file"].rsplit("/", 1)[1].removesuffix(".yaml"): e["error"] for e in pods.status()["manifestErrors"]}


def _settled(pods) -> dict | None:
    """Once every attack is either reported unusable or its pod runs: name -> error or pod."""
    errors, running = _errors(pods), {}
    for p in pods.status()["pods"]:
        name = p["name"].removesuffix(f"-{pods.node_name}")
        if p["phase"] == "Running" and p["podIP"] and all(c["state"] == "running" for c in p["containers"]):
            running[name] = p
    seen = {**running, **errors}
    return seen if all(name in seen for name in ATTACKS) else None


def test_fields_that_would_inject_lines_are_refused_naming_the_field(secure_node, pods, canary):
    pod_sync = pods.service_pid("pod-sync")
    for name, (spec, _) in ATTACKS.items():
        _write(pods, name, spec)
    assert_node_serves(secure_node, "bystander-fields")

    wait_for(lambda: _settled(pods), 90, "every hostile manifest reported or its pod running")
    # Whatever ran: no container's /etc/hosts, /etc/resolv.conf or /etc/hostname holds the
    # injected line, nor any file the node keeps for its pods (<root>/pods/<uid>/etc-hosts...).
    injected = []
    for p in pods.status()["pods"]:
        name = p["name"].removesuffix(f"-{pods.node_name}")
        if name in ATTACKS:
            for path in ("/etc/hosts", "/etc/resolv.conf", "/etc/hostname"):
                code, out = pods.exec(p["uid"], "app", ["cat", path])
                if EVIL in out:
                    injected.append(f"{name}: the container's {path}:\n{out}")
    for f in (pods.root / "pods").rglob("*"):
        if f.is_file() and not f.is_symlink() and f.stat().st_size < 2**20 and EVIL.encode() in f.read_bytes():
            injected.append(f"the node's {f}")
    assert not injected, "the injected line got into:\n" + "\n".join(injected)

    errors = _errors(pods)
    for name, (_, field) in ATTACKS.items():
        assert name in errors, f"{name} was not reported as an unusable manifest (it runs)"
        assert f"{field}:" in errors[name], f"{name}: the error does not name {field}: {errors[name]}"
        assert "\n" not in errors[name], f"{name}: the error writes the value out: {errors[name]!r}"
    assert not [p for p in pods.status()["pods"] if p["name"].removesuffix(f"-{pods.node_name}") in ATTACKS]
    assert pods.service_pid("pod-sync") == pod_sync, "pod-sync was never restarted"
