"""`pykubelet up` and `pykubelet down`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from services.supervisor.forking import Forker, ForkRefused
from services.supervisor.leftovers import SUPERVISOR_PID, find_leftovers, orphaned_shims, pid_alive, stop_abandoned_node
from services.supervisor.node import UpOptions, run_up
from shared.config.settings import ConfigError, NodeSettings, add_node_flags, settings_from_args
from shared.host.checks import startup_problems
from shared.host.facts import NodeIPError, node_address
from shared.host.node_dirs import private_umask, root_dir
from shared.model.version import version_line

DEFAULT_ROOT = os.environ.get("PYKUBELET_ROOT_DIR", "/var/lib/pykubelet")
KUBELET_ROOT = "/var/lib/kubelet"  # the kubelet's --root-dir default


def up(argv: list[str]) -> int:
    # No abbreviations: `--container-runtime=remote` is not `--container-runtime-endpoint`.
    p = argparse.ArgumentParser(prog="pykubelet up", description="Start a complete local node.", allow_abbrev=False)
    add_node_flags(p)
    g = p.add_argument_group("local node")
    g.add_argument("--nats-port", type=int, default=4222, help="loopback port for nats-server (4222)")
    g.add_argument("--registry-port", type=int, default=5000,
                   help="run a local image registry on 127.0.0.1:PORT (5000); 0 for none")
    g.add_argument("--push-demo-images", action="store_true",
                   help="build the busybox-based demo/pause images and push them to the local registry")
    g.add_argument("--keep-pods", action="store_true", help="leave pods running when the node stops")
    g.add_argument("--wait-pods", type=float, default=120.0,
                   help="seconds to wait for pods to start before printing the summary (120)")
    g.add_argument("--cni-conf-dir", type=_absolute_dir, default=None, metavar="DIR",
                   help="where the node's containerd reads CNI network configs (default <root-dir>/cni/net.d, where "
                        "pykubelet writes a bridge network for the pod CIDR); another directory is left to a CNI "
                        "agent (a DaemonSet or static pod writing its config there), as on a kubelet node")
    g.add_argument("--exec-services", action="store_true",
                   help="start each service with an interpreter of its own, as the systemd units do, instead "
                        "of forking them from one that imported their code once (shared pages: far less memory)")
    args = p.parse_args(argv)
    if args.root_dir is None:
        args.root_dir = DEFAULT_ROOT
    # A runtime named on the command line is the host's: used, never started or emptied.
    runtime = args.kf_container_runtime_endpoint
    if runtime and args.cni_conf_dir:
        p.error("--cni-conf-dir sets where the node's own containerd reads CNI configs; a runtime given with "
                "--container-runtime-endpoint reads its own (containerd: plugins.cri.cni.conf_dir)")
    return _start(args, "pykubelet up", lambda settings: UpOptions(
        args=args, settings=settings, nats_port=args.nats_port, registry_port=args.registry_port or None,
        admin_port_base=args.admin_port_base, push_images=args.push_demo_images,
        keep_pods=args.keep_pods or runtime is not None, wait_pods=args.wait_pods,
        forker=None if args.exec_services else prepare_forker(settings),
        runtime_endpoint=settings.kubelet.container_runtime_endpoint if runtime else None,
        cni_conf_dir=args.cni_conf_dir))


def _absolute_dir(value: str) -> Path:
    if not value.startswith("/") or ".." in value.split("/"):
        raise argparse.ArgumentTypeError(f"{value!r} is not an absolute path without '..'")
    return Path(value)


def kubelet(argv: list[str]) -> int:
    """`pykubelet kubelet`: the node from the kubelet's own command line, as kubelet.service and
    kubeadm's drop-in run it: the runtime is the host's (containerRuntimeEndpoint), the root dir
    /var/lib/kubelet, and the pods outlive a stop (the next start adopts them), as with the
    kubelet. Only NATS and the services are started."""
    p = argparse.ArgumentParser(prog="pykubelet kubelet", allow_abbrev=False,
                                description="Run the node as the kubelet: the kubelet's flags, the host's runtime.")
    add_node_flags(p)
    args = p.parse_args(argv)
    if args.root_dir is None:
        args.root_dir = KUBELET_ROOT
    url = urlsplit(args.nats_url or "nats://127.0.0.1:4222")
    if url.scheme != "nats" or url.hostname not in ("127.0.0.1", "localhost") or not url.port:
        print(f"pykubelet kubelet: --nats-url {args.nats_url}: the node's bus runs on loopback: give "
              "nats://127.0.0.1:PORT", file=sys.stderr)
        return 2
    return _start(args, "pykubelet kubelet", lambda settings: UpOptions(
        args=args, settings=settings, nats_port=url.port or 4222, registry_port=None,
        admin_port_base=args.admin_port_base, push_images=False, keep_pods=True, wait_pods=0.0,
        forker=prepare_forker(settings), runtime_endpoint=settings.kubelet.container_runtime_endpoint))


def _start(args: argparse.Namespace, prog: str, options: Callable[[NodeSettings], UpOptions]) -> int:
    if args.kf_version:
        print(version_line())
        return 0
    # Before anything is opened: the node's files are private from creation, in the supervisor
    # and in every process it starts (containerd excepted: services/supervisor/node.py).
    private_umask()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        settings = settings_from_args(args)  # fail on a bad config before starting anything
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    problems = startup_problems(settings.kubelet)
    if problems:  # pod-sync checks again where it runs on its own (the systemd units)
        print(f"{prog}: not starting: " + "; ".join(problems), file=sys.stderr)
        return 2
    try:
        # Found once, here, and handed to every service: no service guesses on its own.
        args.node_ip = node_address(settings.node_ip)
    except NodeIPError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    root_dir(settings.root_dir)  # 0700, before the preload below opens the store in it
    return asyncio.run(run_up(options(settings)))


def prepare_forker(settings: NodeSettings) -> Forker | None:
    """Preload what the services run, before any event loop or thread exists."""
    log = logging.getLogger("pykubelet.up")
    try:
        forker = Forker.prepare(settings.cluster_mode, settings.store_path)
    except (ForkRefused, ImportError, OSError) as exc:
        log.warning("services not preloaded (%s); every service starts with an interpreter of its own "
                    "(more memory)", exc)
        return None
    log.info("services preloaded in %.1fs; each is forked from this process", forker.preloaded_in)
    return forker


def down(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pykubelet down", description="Stop a node started with `up`.")
    p.add_argument("--root-dir", default=DEFAULT_ROOT)
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the stop (180)")
    args = p.parse_args(argv)
    root = Path(args.root_dir).resolve()
    pid_file = root / "run" / SUPERVISOR_PID
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        pid = 0
    if pid <= 1 or not pid_alive(pid):
        return down_abandoned(root, pid, args.timeout)
    os.kill(pid, signal.SIGTERM)
    print(f"stopping node (supervisor pid {pid}) ...", flush=True)
    deadline = time.monotonic() + args.timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            print(f"node did not stop within {args.timeout:.0f}s; see {args.root_dir}/logs", file=sys.stderr)
            return 1
        time.sleep(0.3)
    print("node stopped")
    return 0


def down_abandoned(root: Path, pid: int, timeout: float) -> int:
    """No supervisor: stop whatever the root dir's node still runs without it."""
    leftovers = find_leftovers(root)
    if not leftovers:
        (root / "run" / SUPERVISOR_PID).unlink(missing_ok=True)
        shims = orphaned_shims(root)
        if shims:
            # Their containers can only be removed through the runtime that made them.
            print(f"no node is running from {root}, but {len(shims)} of its containers' shims still run "
                  f"(pids {', '.join(map(str, shims))}): `pykubelet up --root-dir {root}` adopts them, "
                  "then `pykubelet down` removes them", file=sys.stderr)
            return 1
        print(f"no node is running from {root}")
        return 0
    gone = f"node supervisor (pid {pid}) is gone" if pid else "no node supervisor is running"
    print(f"{gone}; stopping what it left running: {', '.join(x.name for x in leftovers)} ...", flush=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    asyncio.run(stop_abandoned_node(root, leftovers, timeout=min(timeout, 30.0)))
    print("node stopped")
    return 0
