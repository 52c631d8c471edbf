"""Making sure a container's image is present, by its imagePullPolicy.

Pulls of the same image at the same moment share one CRI PullImage call; different images pull
in parallel up to maxParallelImagePulls, at most registryPullQPS a second (registryBurst at
once), as the kubelet: a pull over that rate fails. A failed pull backs off per (pod, image) as
the kubelet does: ErrImagePull first, ImagePullBackOff while waiting. An image already present
is used only by a pod that could have pulled it (pull_records.py), else pulled with its logins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Callable

from cri_api.v1 import api_pb2 as cri
from prometheus_client import Counter, Histogram

from services.pod_sync.pull_records import PullRecords
from services.pod_sync.pull_secrets import Credential, lookup
from shared.model.podspec import Container
from shared.runtime.cri import CRIError, ImageService
from shared.tasks.retry import Backoff
from shared.tasks.token_bucket import TokenBucket

log = logging.getLogger(__name__)

IMAGE_PULL_DURATION = Histogram(
    "kubelet_image_pull_duration_seconds", "Duration in seconds to pull an image.", ["image_size_in_bytes"],
    buckets=(0.5, 1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 600, 900, 1200, 1800, 2700, 3600))

ENSURE_IMAGE_REQUESTS = Counter(
    "kubelet_image_manager_ensure_image_requests", "Number of ensure-image requests processed by the kubelet.",
    ["pull_policy", "present_locally", "pull_required"])


def _count_request(policy: str, present: bool | None, required: bool | None) -> None:
    """As the kubelet counts them: "unknown" where the check did not get that far."""
    def word(value: bool | None) -> str:
        return "unknown" if value is None else str(value).lower()
    ENSURE_IMAGE_REQUESTS.labels(policy.lower(), word(present), word(required)).inc()


_SIZE_BUCKETS = [(10 * 2**20, "0-10MB"), (100 * 2**20, "10MB-100MB"), (500 * 2**20, "100MB-500MB"),
                 (2**30, "500MB-1GB"), (5 * 2**30, "1GB-5GB"), (10 * 2**30, "5GB-10GB")]


def size_bucket(size: int) -> str:
    return next((label for limit, label in _SIZE_BUCKETS if size < limit), "10GB+")


class ImagePullError(Exception):
    """reason is the kubelet's waiting reason; message tells the user what happened; event is the
    reason of the Warning event that carries the message."""

    def __init__(self, reason: str, message: str, event: str = "Failed") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.event = event


class PullQPSExceeded(Exception):
    """registryPullQPS / registryBurst used up: this pull is not made."""


@dataclass
class EnsuredImage:
    ref: str
    pulled_seconds: float | None  # None: it was already present

    @property
    def note(self) -> str:
        return "image already present on machine" if self.pulled_seconds is None \
            else f"pulled image in {self.pulled_seconds:.2f}s"


class ImageManager:
    def __init__(self, images: ImageService, backoff: Backoff, parallelism: int | None = None,
                 pull_qps: float = 0, pull_burst: int = 0, records: PullRecords | None = None) -> None:
        """pull_qps, pull_burst: registryPullQPS and registryBurst (0 qps: no limit); records:
        which credentials pulled each image (None: a present image is anyone's)."""
        self.records = records
        self._images = images
        self._backoff = backoff
        self._limit = asyncio.Semaphore(parallelism) if parallelism else None
        self._rate = TokenBucket(pull_qps, pull_burst) if pull_qps > 0 else None
        self._last_error: dict[str, str] = {}  # pod/image -> its last failed pull, while in back-off
        self._inflight: dict[tuple[str, tuple[Credential, ...]], asyncio.Future[str]] = {}
        # Told the ID of each image pulled (the image GC's first sight of it: its age counts
        # from the pull, not from the next listing).
        self.on_pulled: Callable[[str], None] | None = None

    async def status(self, ref: str) -> cri.Image | None:
        """What the runtime knows of a present image (its user, for runAsNonRoot)."""
        return await self._images.image_status(ref)

    async def ensure(self, pod_uid: str, container: Container, sandbox_config: cri.PodSandboxConfig | None,
                     on_pull: Callable[[str], None] | None = None,
                     credentials: list[Credential] | None = None) -> EnsuredImage:
        """Return the image reference to create the container from, pulling if the policy says so.
        on_pull is told when a pull really starts, for progress reporting; credentials are the
        pod's imagePullSecrets' (those for the image's registry are tried in turn, as the kubelet
        does; with none, the pull is anonymous)."""
        return await self.ensure_image(pod_uid, container.image, container.imagePullPolicy or "IfNotPresent",
                                       sandbox_config, on_pull, credentials)

    async def ensure_image(self, pod_uid: str, image: str, policy: str, sandbox_config: cri.PodSandboxConfig | None,
                           on_pull: Callable[[str], None] | None = None,
                           credentials: list[Credential] | None = None) -> EnsuredImage:
        """ensure for an image by name: a container's, or an image volume's (the same pull, the
        same back-off per pod and image, the same messages, as the kubelet's image manager)."""
        logins = lookup(credentials or [], image)
        if policy != "Always":
            try:
                present = await self._images.image_status(image)
            except CRIError as exc:  # the kubelet's ErrImageInspect: retried at the pod's next sync
                _count_request(policy, None, None)
                raise ImagePullError("ImageInspectError", f'Failed to inspect image "{image}": {exc.details}',
                                     event="InspectFailed") from None
            if present is None and policy == "Never":
                _count_request(policy, False, None)
            if present is not None:
                secrets = [c.secret for c in logins if c.secret is not None]
                if self.records is None or not self.records.must_pull(image, present.id, secrets):
                    _count_request(policy, True, False)
                    return EnsuredImage(present.id, None)
                _count_request(policy, True, True)
                log.info("image %s is on the node, but pod %s has not shown that it may use it "
                         "(imagePullCredentialsVerificationPolicy %s): it pulls the image with its own credentials%s",
                         image, pod_uid, self.records.policy.name, " (it has none)" if not logins else "")
            elif policy != "Never":
                _count_request(policy, False, True)
            if policy == "Never":
                raise ImagePullError(
                    "ErrImageNeverPull",
                    f'Container image "{image}" is not present with pull policy of Never')
        else:
            _count_request(policy, None, True)
        key = f"{pod_uid}/{image}"
        if self._backoff.remaining_since_last_failure(key) > 0:
            # As the kubelet 1.37: the waiting message carries the failed pull's error.
            last = self._last_error.get(key)
            raise ImagePullError("ImagePullBackOff", f'Back-off pulling image "{image}"' + (f": {last}" if last else ""))
        self._last_error.pop(key, None)
        if on_pull is not None:
            on_pull(f'Pulling image "{image}"')
        start = time.monotonic()
        try:
            ref = await self._pull_shared(image, sandbox_config, logins)
        except (CRIError, PullQPSExceeded) as exc:
            self._backoff.next(key, time.time())
            message = f'Failed to pull image "{image}": {exc.details if isinstance(exc, CRIError) else exc}'
            self._last_error[key] = f"ErrImagePull: {message}"
            raise ImagePullError("ErrImagePull", message) from None
        return EnsuredImage(ref, time.monotonic() - start)

    def forget(self, pod_uid: str) -> None:
        self._backoff.forget(f"{pod_uid}/")
        for key in [k for k in self._last_error if k.startswith(f"{pod_uid}/")]:
            del self._last_error[key]

    async def _pull_shared(self, image: str, sandbox_config: cri.PodSandboxConfig | None,
                           logins: list[Credential]) -> str:
        # Shared only between pulls with the same logins: one pod's secret never pulls for another.
        key = (image, tuple(logins))
        fut = self._inflight.get(key)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._inflight[key] = fut
            if self.records is not None:
                self.records.pulling(image)
            try:
                ref, login = await self._pull(image, sandbox_config, logins)
                fut.set_result(ref)
                if self.records is not None:
                    self.records.pulled(image, ref, login.secret if login is not None else None)
            except BaseException as exc:
                fut.set_exception(exc)
                fut.exception()  # retrieved: nobody else may be waiting
                if self.records is not None:
                    self.records.failed(image)
            finally:
                del self._inflight[key]
        return await asyncio.shield(fut)

    async def _pull(self, image: str, sandbox_config: cri.PodSandboxConfig | None,
                    logins: list[Credential]) -> tuple[str, Credential | None]:
        """The image's ID, and the login that pulled it (None: anonymous)."""
        async with (self._limit or contextlib.nullcontext()):
            # As the kubelet: a pull over the rate fails (and backs off), it does not queue.
            if self._rate is not None and not self._rate.try_acquire():
                log.warning("pull of image %s not made: more than registryPullQPS %g a second "
                            "(registryBurst %d); it is tried again after its back-off", image, self._rate.qps,
                            self._rate.burst)
                raise PullQPSExceeded(f"pull QPS exceeded (registryPullQPS {self._rate.qps:g}, "
                                      f"registryBurst {self._rate.burst})")
            start = time.monotonic()
            log.info("pulling image %s%s", image, f" ({len(logins)} login(s) to try)" if logins else "")
            ref, login = await self._pull_with(image, sandbox_config, logins)
            took = time.monotonic() - start
            size = 0
            with contextlib.suppress(CRIError):
                status = await self._images.image_status(ref)
                size = status.size if status else 0
            IMAGE_PULL_DURATION.labels(size_bucket(size)).observe(took)
            log.info("pulled image %s in %.2fs", image, took)
            if self.on_pulled is not None:
                self.on_pulled(ref)
            return ref, login

    async def _pull_with(self, image: str, sandbox_config: cri.PodSandboxConfig | None,
                         logins: list[Credential]) -> tuple[str, Credential | None]:
        """Anonymous without logins; else each login in turn, failing with all their errors."""
        if not logins:
            return await self._images.pull_image(image, sandbox_config), None
        errors: list[CRIError] = []
        for login in logins:
            try:
                return await self._images.pull_image(image, sandbox_config, login.auth_config()), login
            except CRIError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise CRIError("pull_image", errors[-1].code, "; ".join(
            f"with the login for {login.key!r}: {e.details}" for login, e in zip(logins, errors, strict=True)))
