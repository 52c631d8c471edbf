"""`pykubelet containerd` and `pykubelet push-images`: the runtime and the demo images for a node
whose processes are containers (docker-compose.yml).

`pykubelet containerd` runs containerd with the config `pykubelet configure` wrote. When it is
stopped (SIGTERM: `docker compose down` or `stop`), it first removes every pod pykubelet created
through CRI, unmounts what is left under the pod directories and removes the pod bridge, so a
stopped node leaves no containers, mounts, veths or NAT rules behind; then it stops containerd.
That is what `pykubelet up` does when it stops.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from services.supervisor.containerd_config import ContainerdLayout
from services.supervisor.teardown import teardown_node
from shared.runtime.cri import CRIClient, CRIError
from shared.tasks.retry import until_done

log = logging.getLogger("pykubelet.containerd")

READY_TIMEOUT = 60.0
TEARDOWN_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0


async def _ready(endpoint: str, proc: asyncio.subprocess.Process) -> None:
    cri = CRIClient(endpoint, timeout=2)

    async def answers() -> None:
        if proc.returncode is not None:
            raise RuntimeError(f"containerd exited with code {proc.returncode} while starting")
        await cri.version()

    try:
        await until_done(f"waiting for containerd on {endpoint}", answers, log, initial=0.2, cap=1.0,
                         timeout=READY_TIMEOUT, retry_on=(CRIError,), level=logging.DEBUG)
    except CRIError as exc:
        raise RuntimeError(f"containerd did not answer on {endpoint}: {exc}") from None
    finally:
        await cri.close()


async def _run(root: Path, pod_logs_dir: str) -> int:
    layout = ContainerdLayout(root / "containerd")
    if not layout.config.exists():
        log.error("%s is missing: run `pykubelet configure --root-dir %s` first", layout.config, root)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    proc = await asyncio.create_subprocess_exec("containerd", "--config", str(layout.config))
    await _ready(layout.endpoint, proc)
    ready_file = layout.base / "ready"  # what a container healthcheck looks for
    ready_file.touch()
    log.info("containerd ready on %s", layout.endpoint)
    waiter = asyncio.create_task(proc.wait(), name="containerd")
    stopper = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready_file.unlink(missing_ok=True)
    if waiter.done():
        log.error("containerd exited with %s", proc.returncode)
        stopper.cancel()
        return proc.returncode or 1
    log.info("stopping: removing the node's pods first")
    await teardown_node(root, layout.endpoint, pod_logs_dir, TEARDOWN_TIMEOUT)
    proc.terminate()
    try:
        await asyncio.wait_for(waiter, STOP_TIMEOUT)
    except asyncio.TimeoutError:
        proc.kill()
        await waiter
    log.info("containerd stopped")
    return 0


def containerd(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pykubelet containerd", description=__doc__.split("\n\n")[1])
    p.add_argument("--root-dir", default="/var/lib/pykubelet", help="the node's state (/var/lib/pykubelet)")
    p.add_argument("--pod-logs-dir", default="/var/log/pods", help="where the pods' logs are (/var/log/pods)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    return asyncio.run(_run(Path(args.root_dir), args.pod_logs_dir))


def push_images(argv: list[str]) -> int:
    from shared.runtime.images.build import IMAGES, build_image, busybox_applets
    from shared.runtime.images.registry import PushError, push_image, wait_for_registry

    p = argparse.ArgumentParser(prog="pykubelet push-images",
                                description="Build the demo and pause images from busybox-static and push them.")
    p.add_argument("--registry", default="127.0.0.1:5000", help="HOST:PORT of a plain-http registry (127.0.0.1:5000)")
    args = p.parse_args(argv)
    try:
        wait_for_registry(args.registry)
        applets = busybox_applets()
        for spec in IMAGES.values():
            print(f"pushed {push_image(args.registry, build_image(spec, applets))}", flush=True)
    except PushError as exc:
        print(f"pykubelet push-images: {exc}", file=sys.stderr)
        return 1
    return 0
