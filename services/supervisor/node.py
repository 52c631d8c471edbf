"""A complete local node: NATS, an optional local registry, containerd and the seven services.

Started in dependency order, each waited for until ready, watched and restarted with back-off,
and stopped in reverse order. When the node stops it also removes the pods it ran, unless asked
to keep them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Awaitable, Callable

from services.supervisor.containerd_config import ContainerdLayout, write_config
from services.supervisor.forking import Forker
from services.supervisor.http_check import closed, http_ok
from services.supervisor.leftovers import SUPERVISOR_PID, find_leftovers, pid_alive, stop_leftovers, write_node_file
from services.supervisor.process import ManagedProcess, ProcessExited
from services.supervisor.teardown import teardown_node
from shared.bus.auth import BUS_DIR, credentials_file, write_credentials, write_server_config
from shared.config.flags import forwarded_argv
from shared.config.settings import NodeSettings
from shared.host import kubelet_cgroup
from shared.host.cni import CNI_BIN_DIR, cni_conf_dir, cni_ipam_dir
from shared.host.facts import kernel_refuses_negative_oom_score_adj
from shared.host.node_dirs import private_dir, private_tree
from shared.process import self_limits
from shared.process.admin import SERVICES, admin_port
from shared.process.admin_token import token_path, write_token
from shared.process.listener_owner import owns_listener
from shared.runtime.cri import CRIClient, CRIError
from shared.runtime.images.build import IMAGES

log = logging.getLogger("pykubelet.up")

DEFAULT_POD_CIDR = "10.88.0.0/24"
PUSH_TIMEOUT = 300.0
STATUS_MARGIN = 30.0  # beyond --wait-pods, for `pykubelet status` to start and read the store
# The flags the supervisor gives every service itself: its own containerd, its pod CIDR, paths resolved.
SUPERVISOR_SETS = frozenset({"root-dir", "container-runtime-endpoint", "pod-cidr", "config", "hostname-override",
                             "kubeconfig", "node-ip"})
REQUIRED_TOOLS = {"containerd": "containerd", "runc": "runc", "nats-server": "nats-server"}


class NodeError(RuntimeError):
    pass


@dataclass
class UpOptions:
    args: argparse.Namespace      # the node flags, forwarded to every service
    settings: NodeSettings
    nats_port: int
    registry_port: int | None
    admin_port_base: int | None
    push_images: bool
    keep_pods: bool
    wait_pods: float
    forker: Forker | None = None  # services are forked from the supervisor; without it, exec'd
    # The CRI endpoint of a runtime the host runs (`pykubelet kubelet`, or `up` given
    # --container-runtime-endpoint): used as it is, never started, stopped or emptied of its pods.
    # None: the node runs a containerd of its own under the root dir.
    runtime_endpoint: str | None = None
    # Where the node's own containerd reads CNI configs when not pykubelet's <root>/cni/net.d:
    # a CNI agent's directory (services/network/runtime_cni.py).
    cni_conf_dir: Path | None = None


async def runtime_answers(endpoint: str) -> bool:
    """Whether the container runtime answers CRI Version at endpoint."""
    cri = CRIClient(endpoint, timeout=2)
    try:
        await cri.version()
        return True
    except CRIError:
        return False
    finally:
        await cri.close()


class LocalNode:
    def __init__(self, opts: UpOptions) -> None:
        self.opts = opts
        self.root = opts.settings.root_dir.resolve()
        self.run_dir = self.root / "run"
        self.log_dir = self.root / "logs"
        self.bus_dir = self.root / BUS_DIR
        self.containerd = ContainerdLayout(self.root / "containerd")
        self.registry = f"127.0.0.1:{opts.registry_port}" if opts.registry_port else None
        self.nats_url = f"nats://127.0.0.1:{opts.nats_port}"
        self.processes: list[ManagedProcess] = []
        self.admin_ports: dict[str, int] = {}
        self.admin_token = ""
        self.pod_cidr = opts.settings.kubelet.pod_cidr or DEFAULT_POD_CIDR
        self._claimed = False

    # -- preparation -------------------------------------------------------------------------

    @property
    def runtime_endpoint(self) -> str:
        return self.opts.runtime_endpoint or self.containerd.endpoint

    def check_prerequisites(self) -> None:
        tools = dict(REQUIRED_TOOLS)
        if self.opts.runtime_endpoint:
            tools = {"nats-server": "nats-server"}  # the host's runtime brings its own runc
        if self.registry:
            tools["docker-registry"] = "docker-registry"
        missing = [pkg for tool, pkg in tools.items() if shutil.which(tool) is None]
        if not Path(CNI_BIN_DIR, "bridge").exists():
            missing.append("containernetworking-plugins")
        if missing:
            raise NodeError(f"missing: {', '.join(missing)}. Install them with `make deps` "
                            f"(apt-get install {' '.join(missing)}).")
        if os.geteuid() != 0:
            raise NodeError("a node runs containers: run pykubelet up as root")

    def claim_root(self) -> None:
        pid_file = self.run_dir / SUPERVISOR_PID
        if pid_file.exists():
            try:
                pid = int(pid_file.read_text().strip())
            except ValueError:
                pid = 0
            if pid and pid_alive(pid):
                raise NodeError(f"a node is already running from {self.root} (pid {pid}); "
                                f"stop it with `pykubelet down --root-dir {self.root}`")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{os.getpid()}\n")
        (self.run_dir / "ready").unlink(missing_ok=True)
        self._claimed = True
        write_node_file(self.run_dir, keep_pods=self.opts.keep_pods,
                        pod_logs_dir=self.opts.settings.kubelet.pod_logs_dir,
                        admin_port_base=self.opts.admin_port_base or 0)

    async def replace_leftovers(self) -> None:
        """A previous supervisor died and left its processes running: stop them (never the
        pods) so this one starts its own; the new services adopt the running pods."""
        leftovers = find_leftovers(self.root)
        if not leftovers:
            return
        log.info("the previous node supervisor is gone but %s still run; replacing them "
                 "(pods keep running and are adopted)", ", ".join(f"{x.name} ({x.pid})" for x in leftovers))
        await stop_leftovers(self.root, leftovers)

    def release_root(self) -> None:
        if self._claimed:
            for name in (SUPERVISOR_PID, "ready", "node.json"):
                (self.run_dir / name).unlink(missing_ok=True)

    def _proc(self, name: str, argv: list[str], ready: Callable[[], Awaitable[bool]] | None = None,
              stop_timeout: float = 20.0,
              umask: int | None = None) -> ManagedProcess:
        p = ManagedProcess(name=name, argv=argv, log_file=self.log_dir / f"{name}.log",
                           pid_file=self.run_dir / f"{name}.pid", ready=ready, stop_timeout=stop_timeout,
                           umask=umask)
        self.processes.append(p)
        return p

    # -- components --------------------------------------------------------------------------

    async def start_nats(self) -> None:
        port = self.opts.nats_port

        async def accepts() -> bool:
            try:
                _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1)
            except OSError:
                return False
            await closed(w)
            return True

        if await accepts():
            raise NodeError(f"port {port} is already in use; pick another with --nats-port")
        # Fresh credentials at every start: one user per service, publishing only its subjects.
        users = write_credentials(self.bus_dir, SERVICES)
        config = write_server_config(self.bus_dir / "nats.conf", port, users)
        p = self._proc("nats", ["nats-server", "-c", str(config)], None)
        p.ready = self._own_listener(p, port, accepts)
        await p.start(ready_timeout=20)

    @staticmethod
    def _own_listener(p: ManagedProcess, port: int,
                      answers: Callable[[], Awaitable[bool]]) -> Callable[[], Awaitable[bool]]:
        """Ready once the port answers and its listener is p's own: a local user who bound the
        port first is refused, not served to the services and pods."""
        async def ready() -> bool:
            if p.pid is None or not await answers():
                return False  # gone: the exit is reported by the next check
            if owns_listener(p.pid, port):
                return True
            raise ProcessExited(f"another process listens on 127.0.0.1:{port}, not {p.name}; stop it or "
                                f"pick another port")
        return ready

    async def start_registry(self) -> None:
        assert self.registry
        reg_dir = self.root / "registry"
        reg_dir.mkdir(parents=True, exist_ok=True)
        cfg = reg_dir / "config.yml"
        cfg.write_text(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {reg_dir / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.registry}\n")

        port = self.opts.registry_port or 0

        async def answers() -> bool:
            return await http_ok("127.0.0.1", port, "/v2/")

        if await answers():
            raise NodeError(f"port {port} is already in use; pick another with --registry-port")
        p = self._proc("registry", ["docker-registry", "serve", str(cfg)], None)
        p.ready = self._own_listener(p, port, answers)
        await p.start(ready_timeout=20)

    async def push_images(self) -> None:
        """In a process of its own: building the images takes tens of MiB that a long-running
        supervisor would keep (freed Python memory is rarely given back)."""
        assert self.registry
        out = self.log_dir / "push-images.log"
        started = time.monotonic()
        try:
            with open(out, "ab") as f:
                code, _, _ = await run_cli(["push-images", "--registry", self.registry], PUSH_TIMEOUT, f)
        except asyncio.TimeoutError:
            raise NodeError(f"pushing the demo images took over {PUSH_TIMEOUT:.0f}s; see {out}") from None
        if code != 0:
            raise NodeError(f"pushing the demo images failed (exit code {code}); see {out}")
        log.info("demo images pushed in %.1fs (%s)", time.monotonic() - started, ", ".join(IMAGES))

    @property
    def sandbox_image(self) -> str:
        pause = IMAGES["pause"]
        return f"{self.registry}/{pause.repository}:{pause.tag}" if self.registry else "registry.k8s.io/pause:3.9"

    async def start_containerd(self) -> None:
        restrict = kernel_refuses_negative_oom_score_adj()
        if restrict:
            log.info("kernel refuses negative oom_score_adj here (no CAP_SYS_RESOURCE): "
                     "containerd gets restrict_oom_score_adj = true")
        # Made here, private, before containerd and the CNI plugins it runs (umask 022) make them
        # readable by all.
        private_dir(cni_conf_dir(self.root))
        private_dir(cni_ipam_dir(self.root))
        conf_dir = self.opts.cni_conf_dir or cni_conf_dir(self.root)
        # An agent's directory as on any host (/etc/cni/net.d is 0755): its pods write there.
        conf_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        write_config(self.containerd, cni_conf_dir=conf_dir, cni_bin_dir=CNI_BIN_DIR,
                     sandbox_image=self.sandbox_image, registry=self.registry, restrict_oom=restrict,
                     systemd_cgroup=self.opts.settings.kubelet.cgroup_driver == "systemd")
        endpoint = self.containerd.endpoint
        forker = self.opts.forker

        async def ready() -> bool:
            if forker is not None:
                # Asked from a forked child: gRPC started here would make every later fork unsafe.
                return await forker.check_in_child(lambda: asyncio.run(runtime_answers(endpoint)), 5.0)
            return await runtime_answers(endpoint)

        # containerd writes files containers read (each sandbox's resolv.conf, hostname and hosts)
        # with modes the umask narrows: it runs with the usual 022, as its systemd unit does.
        p = self._proc("containerd", ["containerd", "--config", str(self.containerd.config)], ready,
                       stop_timeout=30, umask=0o022)
        await p.start(ready_timeout=60)

    def service_argv(self, service: str) -> list[str]:
        # Through the CLI, as the systemd units run them: it applies the process settings
        # (shared/process/tuning.py) before the service imports anything.
        return [sys.executable, "-m", "services.cli.main", service, *self.service_args(service)]

    def service_args(self, service: str) -> list[str]:
        # --root-dir first: a forked service's title may be cut at the length of the supervisor's
        # command line, and the leftover check looks for the root dir in it.
        argv = ["--root-dir", str(self.root), "--nats-url", self.nats_url, "--bus-credentials", str(credentials_file(self.bus_dir, service)),
                "--container-runtime-endpoint", self.runtime_endpoint, "--pod-cidr", self.pod_cidr]
        a = self.opts.args
        if self.opts.admin_port_base:
            argv += ["--admin-port-base", str(self.opts.admin_port_base)]
        if a.config:
            argv += ["--config", str(Path(a.config).resolve())]
        if a.hostname_override:
            argv += ["--hostname-override", a.hostname_override]
        if a.pleg_relist_period:
            argv += ["--pleg-relist-period", a.pleg_relist_period]
        if a.pod_logs_dir:
            argv += ["--pod-logs-dir", str(Path(a.pod_logs_dir).resolve())]
        if a.kubeconfig:
            argv += ["--kubeconfig", str(Path(a.kubeconfig).resolve())]
        if getattr(a, "node_ip", None):
            argv += ["--node-ip", a.node_ip]
        # Every other kubelet flag as it was given: each service reads the same configuration.
        argv += forwarded_argv(a, skip=SUPERVISOR_SETS)
        return argv

    async def start_services(self) -> None:
        # A fresh admin token at every start, as fresh bus credentials: the services read it as
        # they start, and a token an earlier run let out is worth nothing now.
        self.admin_token = write_token(self.root)
        for service in SERVICES:
            port = admin_port(service, self.opts.admin_port_base or 0)
            self.admin_ports[service] = port

            p = self._proc(service, self.service_argv(service))

            async def ready(p: ManagedProcess = p, port: int = port) -> bool:
                # The token goes only to the service's own listener, never to a process that
                # bound the port first (that one keeps the service from starting: an exit).
                if p.pid is None or not owns_listener(p.pid, port):
                    return False
                return await http_ok("127.0.0.1", port, "/healthz", token=self.admin_token)

            p.ready = ready
            p.forker, p.service_args = self.opts.forker, self.service_args(service)
            await p.start(ready_timeout=60)
            log.info("%-15s running (pid %d, admin http://127.0.0.1:%d)", service, p.pid, port)

    # -- lifecycle ---------------------------------------------------------------------------

    async def up(self) -> None:
        self.check_prerequisites()
        self.claim_root()
        await self.replace_leftovers()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # What an older pykubelet (umask 022) left readable by other users becomes private.
        private_tree(self.log_dir, "the service logs dir")
        private_tree(self.run_dir, "the run dir")
        log.info("starting a local node in %s (logs in %s)", self.root, self.log_dir)
        await self.start_nats()
        log.info("nats-server     running on %s", self.nats_url)
        if self.registry:
            await self.start_registry()
            log.info("registry        running on http://%s", self.registry)
            if self.opts.push_images:
                log.info("building demo images from busybox-static and pushing them ...")
                await self.push_images()
        if self.opts.runtime_endpoint:
            log.info("runtime         %s (the host's: not started or stopped by pykubelet)", self.runtime_endpoint)
        else:
            await self.start_containerd()
            log.info("containerd      running (%s)", self.containerd.endpoint)
        if self.opts.settings.kubelet.kubelet_cgroups:
            self.enter_kubelet_cgroups(self.opts.settings.kubelet.kubelet_cgroups)
        await self.start_services()

    def enter_kubelet_cgroups(self, cgroup: str) -> None:
        """kubeletCgroups: this supervisor and the bus move there (the runtime, started before,
        stays in its own cgroup); each service moves itself as it starts (shared/process/service.py)."""
        nats = next(p for p in self.processes if p.name == "nats")
        for pid, what in ((os.getpid(), "the supervisor"), (nats.pid, "the bus (nats-server)")):
            if pid is None:
                continue
            try:
                moved_from = kubelet_cgroup.move(pid, cgroup, what)
            except kubelet_cgroup.KubeletCgroupError as exc:
                raise NodeError(str(exc)) from None
            if moved_from:
                log.info("%s moved into kubeletCgroups %s from %s", what, cgroup, moved_from)

    async def down(self) -> None:
        services = [p for p in self.processes if p.name in SERVICES]
        infra = [p for p in self.processes if p.name not in SERVICES]
        for p in reversed(services):
            await p.stop()
        log.info("services stopped")
        if not self.opts.keep_pods and any(p.name == "containerd" and p.pid for p in infra):
            # The volume service is stopped: teardown unmounts what it mounted for the pods.
            await teardown_node(self.root, self.containerd.endpoint, self.opts.settings.kubelet.pod_logs_dir)
        for p in reversed(infra):
            await p.stop()
        self.release_root()
        log.info("node stopped")


def print_where(node: LocalNode, pods: list[dict[str, Any]]) -> None:
    lines = ["", "pykubelet local node is up.", ""]
    if pods:
        lines.append("  pods:")
        for p in pods:
            ip = p["podIP"] or "-"
            why = f"  ({p['why']})" if p["why"] else ""
            lines.append(f"    {p['namespace']}/{p['name']:<32} {p['phase']:<9} {ip}{why}")
    lines += ["", f"  admin apps (root only: `pykubelet admin SERVICE PATH --root-dir {node.root}`, or "
                  f"Authorization: Bearer from {token_path(node.root)}):"]
    for name, port in node.admin_ports.items():
        lines.append(f"    {name:<16} http://127.0.0.1:{port}/readyz  /metrics")
    lines += ["", f"  state & logs:   {node.root}  (service logs in {node.log_dir})",
              f"  container logs: {node.opts.settings.kubelet.pod_logs_dir}",
              f"  see pods:       pykubelet status --root-dir {node.root}",
              f"  stop:           Ctrl-C here, or pykubelet down --root-dir {node.root}", ""]
    print("\n".join(lines), flush=True)


async def run_cli(args: list[str], timeout: float, output: IO[bytes] | None = None) -> tuple[int, bytes, bytes]:
    """`pykubelet ARGS` in a child process: its exit code, stdout and stderr (empty when they go
    to `output`). Killed, and asyncio.TimeoutError raised, after `timeout` seconds."""
    target = output if output is not None else asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.cli.main", *args,
                                                stdin=asyncio.subprocess.DEVNULL, stdout=target, stderr=target)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out or b"", err or b""


async def wait_for_pods(node: LocalNode, timeout: float) -> list[dict[str, Any]]:
    """Wait until no pod is Pending any more (or the timeout); return the pods as `pykubelet
    status -o json` shows them. Rows a previous run left behind do not count: pod status must be
    current first. Asked of `pykubelet status --wait` in a child process: reading the store here
    would keep its code's pages in the supervisor for as long as the node runs."""
    try:
        code, out, err = await run_cli(["status", "--root-dir", str(node.root), "-o", "json", "--wait", str(timeout)],
                                       timeout + STATUS_MARGIN)
    except asyncio.TimeoutError:
        log.warning("pod status not read within %.0fs; see `pykubelet status --root-dir %s`",
                    timeout + STATUS_MARGIN, node.root)
        return []
    try:
        data = json.loads(out)
    except ValueError:
        log.warning("pod status not read: %s", err.decode(errors="replace").strip()[-500:] or
                    f"`pykubelet status` exited with code {code}")
        return []
    for error in data["manifestErrors"]:
        log.warning("manifest %s skipped: %s", error["file"], error["error"])
    pods: list[dict[str, Any]] = data["pods"]
    return pods


async def run_up(opts: UpOptions) -> int:
    # Before anything starts: NATS, containerd and the forked services inherit them.
    self_limits.apply(self_limits.from_config(opts.settings.kubelet))
    node = LocalNode(opts)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if sys.version_info < (3, 12):
        # Subprocesses (NATS, containerd, ...) watched through pidfds: the default watcher of
        # Python 3.11 waits in a thread per child, and the supervisor forks its services only
        # while it runs no thread (services/supervisor/forking.py). 3.12 does this by itself.
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(loop)
        asyncio.set_child_watcher(watcher)
    try:
        up = asyncio.create_task(node.up(), name="node-up")
        stopper = asyncio.create_task(stop.wait(), name="stop-signal")
        done, _ = await asyncio.wait({up, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if up in done:
            up.result()  # raise a start failure here
            pods = await wait_for_pods(node, opts.wait_pods)
            print_where(node, pods)
            (node.run_dir / "ready").write_text("ok\n")
            await stop.wait()
        else:
            up.cancel()
            await asyncio.gather(up, return_exceptions=True)
        log.info("stopping the node ...")
        return 0
    except (NodeError, RuntimeError, TimeoutError, OSError) as exc:
        log.error("%s", exc)
        return 1
    finally:
        await node.down()
