"""Container lifecycle hooks (postStart, preStop): exec through CRI, httpGet, sleep."""

from __future__ import annotations

import asyncio

import httpx

from shared.model.podspec import Container, LifecycleHandler
from shared.runtime.cri import CRIError, RuntimeService

# The kubelet caps what it keeps of a hook's output.
MAX_OUTPUT = 10 * 1024


class HookFailed(Exception):
    pass


def _port(container: Container, port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.ports:
        if p.name == port:
            return p.containerPort
    raise HookFailed(f"port {port!r} is not a named port of container {container.name}")


async def run_hook(runtime: RuntimeService, handler: LifecycleHandler, container: Container,
                   container_id: str, pod_ip: str, timeout: float) -> None:
    """Run one handler within `timeout` seconds; raise HookFailed with what went wrong."""
    if handler.sleep is not None:
        await asyncio.sleep(min(handler.sleep.seconds, timeout))
        return
    if handler.exec is not None:
        try:
            done = await runtime.exec_sync(container_id, handler.exec.command, timeout)
        except CRIError as exc:
            raise HookFailed(f"exec {handler.exec.command} failed: {exc.details}") from None
        if done.exit_code != 0:
            out = (done.stdout + done.stderr)[:MAX_OUTPUT].decode(errors="replace").strip()
            raise HookFailed(f"command {handler.exec.command!r} exited with {done.exit_code}: {out}")
        return
    get = handler.httpGet
    if get is None:  # shared/model/podspec.py admits a handler with exactly one action
        raise HookFailed("the handler names no action")
    host = get.host or pod_ip or "127.0.0.1"
    url = f"{get.scheme.lower()}://{host}:{_port(container, get.port)}{get.path}"
    headers = {h.name: h.value for h in get.httpHeaders}
    try:
        async with httpx.AsyncClient(verify=False, timeout=timeout) as client:
            resp = await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        raise HookFailed(f"HTTP GET {url}: {exc}") from None
    if resp.status_code >= 400:
        raise HookFailed(f"HTTP GET {url}: {resp.status_code} {resp.text[:MAX_OUTPUT]}")
