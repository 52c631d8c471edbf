"""`pykubelet` dispatches to a service, the local-node supervisor, or a read-only tool."""

from __future__ import annotations

import runpy
import sys

from shared.process import title as process_title
from shared.process import tuning as process_tuning

SERVICES = {
    "pod-sync": "services.pod_sync",
    "probe": "services.probe",
    "volume": "services.volume",
    "network": "services.network",
    "eviction": "services.eviction",
    "status-reporter": "services.status_reporter",
    "node-api": "services.node_api",
}

USAGE = """usage: pykubelet COMMAND [flags]

Local node:
  up                 start a complete node (NATS, registry, containerd, all services)
  down               stop a node started with `up`
  status             show every pod: phase, IP, containers, and why it is not running
  logs POD           print a container's log (-c CONTAINER, --previous, --tail N)

As the kubelet (kubelet.service, kubeadm):
  kubelet            the kubelet's command line: the host's container runtime, root dir
                     /var/lib/kubelet, pods kept across a stop; starts NATS and the services

As systemd units (production nodes):
  install            write the units, /etc/pykubelet and containerd's config (idempotent);
                     --as-kubelet: /usr/bin/kubelet, kubelet.service and kubeadm's drop-in instead
  uninstall          stop the units and remove what install wrote
  fork-server        import the services once and fork each unit's service from there
                     (pykubelet-preload.service)
  fork SERVICE       a unit's start: the service forked from the fork server, or run here
                     when there is none

Containers (docker-compose.yml):
  configure          write bus credentials and containerd's config, no units
  containerd         run pykubelet's containerd; its pods are removed when it is stopped
  push-images        build the demo images and push them to a registry (--registry H:P)

Tools:
  wait-port H:P      wait until something accepts connections on H:P (--timeout S)
  admin SERVICE PATH GET a URL of a service's admin app with the node's admin token (root)
  kube-bench-config  print a kube-bench config.yaml that finds this node (--from CFG/config.yaml)

Services (one process each; `pykubelet up` or pykubelet.target starts them all):
  pod-sync, probe, volume, network, eviction, status-reporter, node-api

Run `pykubelet COMMAND --help` for a command's flags.
"""


def main(argv: list[str] | None = None) -> int:
    process_tuning.apply()  # before any command imports grpc, nats or httpx
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command in SERVICES:
        sys.argv = [f"pykubelet {command}", *rest]
        process_title.set_title(command, rest)
        try:
            runpy.run_module(SERVICES[command], run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
        return 0
    if command in ("up", "down", "kubelet"):
        from services.cli import up_cmd

        return {"up": up_cmd.up, "down": up_cmd.down, "kubelet": up_cmd.kubelet}[command](rest)
    if command in ("install", "uninstall", "configure"):
        from services.cli import install_cmd

        return {"install": install_cmd.install, "uninstall": install_cmd.uninstall,
                "configure": install_cmd.configure}[command](rest)
    if command in ("containerd", "push-images"):
        from services.cli import runtime_cmd

        return runtime_cmd.containerd(rest) if command == "containerd" else runtime_cmd.push_images(rest)
    if command == "fork":
        from services.supervisor import fork_client

        return fork_client.main(rest)
    if command == "fork-server":
        from services.supervisor import fork_server

        fork_server.main(rest)
    if command == "wait-port":
        from services.cli import wait_port

        return wait_port.main(rest)
    if command == "admin":
        from services.cli import admin_cmd

        return admin_cmd.main(rest)
    if command == "status":
        from services.cli import status_cmd

        return status_cmd.main(rest)
    if command == "kube-bench-config":
        from services.cli import kube_bench_cmd

        return kube_bench_cmd.main(rest)
    if command == "logs":
        from services.cli import logs_cmd

        return logs_cmd.main(rest)
    print(f"pykubelet: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
