"""Pushing built images to a registry over the Distribution HTTP API (plain http, loopback)."""

from __future__ import annotations

import httpx

from shared.runtime.images.build import Blob, BuiltImage

TIMEOUT = httpx.Timeout(30.0, connect=5.0)


class PushError(RuntimeError):
    pass


def _check(resp: httpx.Response, what: str) -> None:
    if resp.status_code >= 300:
        raise PushError(f"{what}: registry answered {resp.status_code}: {resp.text[:300]}")


def _push_blob(client: httpx.Client, repo: str, blob: Blob) -> None:
    if client.head(f"/v2/{repo}/blobs/{blob.digest}").status_code == 200:
        return
    start = client.post(f"/v2/{repo}/blobs/uploads/")
    _check(start, f"start upload of {blob.digest[:19]}")
    location = start.headers["Location"]
    sep = "&" if "?" in location else "?"
    put = client.put(f"{location}{sep}digest={blob.digest}", content=blob.data,
                     headers={"Content-Type": "application/octet-stream"})
    _check(put, f"upload of {blob.digest[:19]}")


def push_image(registry: str, image: BuiltImage, login: tuple[str, str] | None = None) -> str:
    """Push to e.g. '127.0.0.1:5000' (with HTTP basic auth when a login is given); return the
    full reference."""
    repo, tag = image.spec.repository, image.spec.tag
    try:
        with httpx.Client(base_url=f"http://{registry}", timeout=TIMEOUT, auth=login) as client:
            for blob in [image.config, *image.layers]:
                _push_blob(client, repo, blob)
            resp = client.put(f"/v2/{repo}/manifests/{tag}", content=image.manifest.data,
                              headers={"Content-Type": image.manifest.media_type})
            _check(resp, f"manifest {repo}:{tag}")
    except httpx.HTTPError as exc:
        raise PushError(f"cannot push {repo}:{tag} to {registry}: {exc}") from None
    return f"{registry}/{repo}:{tag}"


def wait_for_registry(registry: str, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://{registry}/v2/", timeout=2).status_code in (200, 401):
                return
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise PushError(f"registry at {registry} did not answer within {timeout:.0f}s: {last}")
