"""Image volumes (volumes[].image): an OCI image's filesystem mounted read-only in a container.

There is nothing on the host to set up: pod-sync pulls the image (by the volume's pullPolicy,
with the pod's pull secrets, with the same back-off and messages as a container's image) and the
CRI Mount names the image instead of a host path; the runtime mounts it. As the kubelet, a pull
that fails stops only the containers that mount that volume (ErrImagePull, then
ImagePullBackOff); unlike the kubelet, a volume no container mounts is not pulled at all.

containerd mounts images from 2.1 and their subPaths from 2.2; an older one would ignore the
image and bind-mount an empty host path, so such a container is refused with a reason naming
the runtime, before anything is created.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from cri_api.v1 import api_pb2 as cri

from services.pod_sync.images import EnsuredImage, ImageManager
from services.pod_sync.pull_secrets import Credential
from shared.model.podspec import Container, Pod
from shared.runtime.cri import RuntimeService

# containerd's first versions that mount an image volume, and one's subPath.
CONTAINERD_IMAGE_VOLUMES = (2, 1)
CONTAINERD_IMAGE_SUBPATH = (2, 2)

# How a CRI runtime starts the error of an image it could not mount (cri-api's errors).
IMAGE_VOLUME_MOUNT_FAILED = "ImageVolumeMountFailed"

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


class ImageVolumeUnsupported(ValueError):
    """The runtime cannot mount this container's image volumes: a container config error."""


def runtime_refusal(version: cri.VersionResponse, sub_path: bool) -> str | None:
    """Why this runtime cannot mount image volumes (with a subPath when sub_path), or None.
    Only containerd's versions are known; another runtime is trusted to refuse what it lacks."""
    if version.runtime_name != "containerd":
        return None
    found = _VERSION.match(version.runtime_version)
    if found is None:
        return None  # a development build: trusted
    have = (int(found[1]), int(found[2]))
    need = CONTAINERD_IMAGE_SUBPATH if sub_path else CONTAINERD_IMAGE_VOLUMES
    if have >= need:
        return None
    what = "image volumes with a subPath need" if sub_path else "image volumes need"
    return (f"{what} containerd {need[0]}.{need[1]} or newer, and this node runs containerd "
            f"{version.runtime_version}: upgrade containerd, or mount the files another way")


def mounted_image_volumes(pod: Pod, container: Container) -> list[str]:
    """Names of the pod's image volumes this container mounts, once each, in volumeMounts order."""
    images = {v.name for v in pod.spec.volumes if v.kind == "image"}
    return list(dict.fromkeys(m.name for m in container.volumeMounts if m.name in images))


@dataclass(frozen=True)
class MountedImage:
    volume: str
    reference: str  # as the pod names it
    image: EnsuredImage  # its ID, and whether it was pulled now
    annotations: dict[str, str]

    @property
    def spec(self) -> cri.ImageSpec:
        """The CRI mount's image, as the kubelet names it: by ID, with the name the user gave
        and the pod's annotations."""
        return cri.ImageSpec(image=self.image.ref, user_specified_image=self.reference, annotations=self.annotations)


class ImageVolumes:
    def __init__(self, images: ImageManager, runtime: RuntimeService) -> None:
        self._images = images
        self._runtime = runtime

    async def ensure(self, pod: Pod, container: Container, sandbox_config: cri.PodSandboxConfig | None,
                     on_pull: Callable[[str], None] | None = None,
                     credentials: list[Credential] | None = None) -> list[MountedImage]:
        """Each image volume the container mounts, pulled when its policy says so. Raises
        ImagePullError for a volume whose image cannot be had, ImageVolumeUnsupported when the
        runtime cannot mount them."""
        names = mounted_image_volumes(pod, container)
        if not names:
            return []
        sub_path = any(m.subPath for m in container.volumeMounts if m.name in names)
        why = runtime_refusal(await self._runtime.version(), sub_path)
        if why is not None:
            raise ImageVolumeUnsupported(f"volume {names[0]!r}: {why}")
        volumes = {v.name: v for v in pod.spec.volumes}
        mounted = []
        for name in names:
            source = volumes[name].image
            assert source is not None and source.pullPolicy is not None  # an image volume, defaulted
            got = await self._images.ensure_image(pod.uid, source.reference, source.pullPolicy, sandbox_config,
                                                  on_pull, credentials)
            mounted.append(MountedImage(name, source.reference, got, dict(pod.metadata.annotations)))
        return mounted
