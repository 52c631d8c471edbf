"""Making sure a container's image is present, by its imagePullPolicy.

Pulls of the same image at the same moment share one CRI PullImage call; different images pull
in parallel. A failed pull backs off per (pod, image) as the kubelet does: ErrImagePull first,
ImagePullBackOff while waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time

from cri_api.v1 import api_pb2 as cri
from prometheus_client import Histogram

from services.pod_sync.backoff import Backoff
from shared.cri import CRIError, ImageService
from shared.podspec import Container

log = logging.getLogger(__name__)

IMAGE_PULL_DURATION = Histogram(
    "kubelet_image_pull_duration_seconds", "Duration in seconds to pull an image.", ["image_size_in_bytes"],
    buckets=(0.5, 1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 600, 900, 1200, 1800, 2700, 3600))


class ImagePullError(Exception):
    """reason is the kubelet's waiting reason; message tells the user what happened."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class ImageManager:
    def __init__(self, images: ImageService, backoff: Backoff) -> None:
        self._images = images
        self._backoff = backoff
        self._inflight: dict[str, asyncio.Future[str]] = {}

    async def ensure(self, pod_uid: str, container: Container,
                     sandbox_config: cri.PodSandboxConfig | None) -> str:
        """Return the image reference to create the container from, pulling if the policy says so."""
        image = container.image
        policy = container.imagePullPolicy
        if policy != "Always":
            present = await self._images.image_status(image)
            if present is not None:
                return present.id
            if policy == "Never":
                raise ImagePullError(
                    "ErrImageNeverPull",
                    f'Container image "{image}" is not present with pull policy of Never')
        key = f"{pod_uid}/{image}"
        now = time.time()
        if self._backoff.remaining_since_last_failure(key) > 0:
            raise ImagePullError("ImagePullBackOff", f'Back-off pulling image "{image}"')
        try:
            return await self._pull_shared(image, sandbox_config)
        except CRIError as exc:
            self._backoff.next(key, now)
            raise ImagePullError("ErrImagePull", f'Failed to pull image "{image}": {exc.details}') from None

    def forget(self, pod_uid: str) -> None:
        self._backoff.forget(f"{pod_uid}/")

    async def _pull_shared(self, image: str, sandbox_config: cri.PodSandboxConfig | None) -> str:
        fut = self._inflight.get(image)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._inflight[image] = fut
            start = time.monotonic()
            log.info("pulling image %s", image)
            try:
                ref = await self._images.pull_image(image, sandbox_config)
                fut.set_result(ref)
                IMAGE_PULL_DURATION.labels("0").observe(time.monotonic() - start)
                log.info("pulled image %s in %.2fs", image, time.monotonic() - start)
            except BaseException as exc:
                fut.set_exception(exc)
                # Nobody else may be waiting; mark the exception retrieved to avoid noise.
                fut.exception()
            finally:
                del self._inflight[image]
        return await asyncio.shield(fut)
