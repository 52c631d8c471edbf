"""Static pods from a URL (staticPodURL): the kubelet's HTTP pod source.

Every httpCheckFrequency the URL is fetched with the staticPodURLHeader headers. A 200 answer
is the whole truth: one Pod, or a PodList, or an empty body for none. Anything else (the
server unreachable, another status, a manifest that does not validate) is recorded as the
URL's manifest error and leaves the pods as they were, as the kubelet leaves them. The body is
what a server sends, so it is read up to the manifest size limit and no further.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import httpx

from services.pod_sync.static_source import ScanResult, apply_static_pods, static_pod
from shared.model.podspec import MAX_MANIFEST_BYTES, ManifestInvalid, parse_manifest_text
from shared.process.http_body import read_at_most
from shared.store import Store

log = logging.getLogger(__name__)

SOURCE = "http"
FETCH_TIMEOUT = 10.0  # the kubelet's HTTP source client timeout
MAX_REDIRECTS = 10    # as Go's http.Client


class FetchFailed(Exception):
    pass


async def fetch(client: httpx.AsyncClient, url: str, headers: list[tuple[str, str]]) -> str:
    try:
        async with client.stream("GET", url, headers=headers) as resp:
            if resp.status_code != 200:
                raise FetchFailed(f"{url}: {resp.status_code} {resp.reason_phrase}")
            body = await read_at_most(resp, MAX_MANIFEST_BYTES)
            if body is None:
                raise FetchFailed(f"{url}: the answer is over {MAX_MANIFEST_BYTES} bytes (1.5 MiB, the API "
                                  "server's limit for a manifest)")
    except httpx.HTTPError as exc:
        raise FetchFailed(f"{url}: {type(exc).__name__}: {exc}") from None
    try:
        return body.decode()
    except UnicodeDecodeError:
        raise FetchFailed(f"{url}: the answer is not UTF-8 text") from None


def pods_from_text(text: str, url: str, node_name: str) -> ScanResult:
    """The pods of one answer: a Pod, a PodList, or none for an empty body (ManifestInvalid)."""
    result = ScanResult({}, {}, {})
    if not text.strip():
        return result
    raw = parse_manifest_text(text)
    if isinstance(raw, dict) and raw.get("kind") == "PodList":
        items = raw.get("items") or []
        if not isinstance(items, list):
            raise ManifestInvalid("items: must be a list of pods")
        found = []
        for i, item in enumerate(items):
            try:
                found.append(static_pod(item, node_name, url, SOURCE))
            except ManifestInvalid as exc:
                raise ManifestInvalid(f"items[{i}]: {exc}") from None
    elif isinstance(raw, dict) and raw.get("kind") == "Pod":
        found = [static_pod(raw, node_name, url, SOURCE)]
    else:
        raise ManifestInvalid("kind: must be Pod or PodList")
    names: set[str] = set()
    for pod in found:
        if pod.full_name in names:
            raise ManifestInvalid(f"pod {pod.full_name} is defined twice; pod names must be unique")
        names.add(pod.full_name)
        result.pods[pod.uid] = pod
        result.sources[pod.uid] = url
    return result


class URLPodSource:
    def __init__(self, url: str, headers: dict[str, list[str]], node_name: str, store: Store, every: float,
                 on_change: Callable[[set[str]], Awaitable[None]] | None = None) -> None:
        self.url = url
        self.headers = [(name, value) for name, values in headers.items() for value in values]
        self.node_name = node_name
        self.store = store
        self.every = every
        self.on_change = on_change
        self.synced = asyncio.Event()  # set after the first answer (or failure)

    async def check(self, client: httpx.AsyncClient) -> set[str]:
        """Fetch once and apply the answer; return the UIDs whose desire changed."""
        try:
            result, known = pods_from_text(await fetch(client, self.url, self.headers), self.url, self.node_name), True
        except (FetchFailed, ManifestInvalid) as exc:
            why = f"cannot fetch {exc}" if isinstance(exc, FetchFailed) else f"manifest invalid: {exc}"
            log.warning("staticPodURL %s: %s; its pods stay as they are", self.url, why)
            result, known = ScanResult({}, {}, {self.url: why}), False
        return await self.store.run(apply_static_pods, self.store, SOURCE, result, lambda p: p == self.url, known)

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=FETCH_TIMEOUT, follow_redirects=True, max_redirects=MAX_REDIRECTS,
                                     trust_env=False) as client:
            while True:
                changed = await self.check(client)
                self.synced.set()
                if changed and self.on_change is not None:
                    await self.on_change(changed)
                await asyncio.sleep(self.every)
