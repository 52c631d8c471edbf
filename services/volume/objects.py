"""Where configMap, secret, service-account-token and pod certificate contents come from.

In cluster mode the API server (services.volume.api_objects); in standalone mode nowhere: the
kubelet does not allow static pods to use them either, and the error says so."""

from __future__ import annotations

from typing import Any, Protocol

from shared.model.podspec import Pod


class ObjectUnavailable(Exception):
    """The object cannot be read now (not found, forbidden, no API server); the message says why."""


class ObjectSource(Protocol):
    async def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap object as a dict, None when it does not exist."""

    async def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Secret object as a dict, None when it does not exist."""

    async def service_account_token(self, pod: Pod, audience: str, expiration_seconds: int) -> str:
        """A token for the pod's service account, bound to the pod (TokenRequest)."""

    async def persistent_volume_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def persistent_volume(self, name: str) -> dict[str, Any] | None: ...

    async def csi_driver(self, name: str) -> dict[str, Any] | None: ...

    async def volume_attachment(self, name: str) -> dict[str, Any] | None: ...

    async def cluster_trust_bundle(self, name: str) -> dict[str, Any] | None: ...

    async def cluster_trust_bundles(self, label_selector: str) -> list[dict[str, Any]]:
        """Every ClusterTrustBundle whose labels match the selector (the API's syntax)."""
        ...

    async def pod_certificate(self, pod: Pod, volume: str, index: int, source: dict[str, Any]) -> tuple[bytes, bytes]:
        """The private key and certificate chain (PEM) of the podCertificate source at `index` of
        the projected volume `volume` (services.volume.pod_certificates)."""
        ...

    def register_pod(self, uid: str, refs: set[tuple[str, str, str]]) -> None:
        """Before the pod's volumes are set up, with the (kind, namespace, name) they read."""

    def forget_pod(self, uid: str) -> None:
        """The pod is gone: drop what was kept for it (watches, tokens)."""

    def stop_unused_watches(self, referenced: set[tuple[str, str, str]]) -> None:
        """Stop watching (kind, namespace, name) objects no pod's volumes refer to any more."""


class NoApiObjects:
    """No API objects for these pods: standalone mode (no API server), or static pods, which the
    kubelet does not allow to use configMaps, secrets, tokens or claims either."""

    def __init__(self, why: str) -> None:
        self.why = why

    def _refuse(self, what: str) -> ObjectUnavailable:
        return ObjectUnavailable(f"static pods may not use {what}{self.why}")

    async def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise self._refuse(f'configMap volumes (configmap "{name}")')

    async def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise self._refuse(f'secret volumes (secret "{name}")')

    async def service_account_token(self, pod: Pod, audience: str, expiration_seconds: int) -> str:
        raise self._refuse("service account tokens")

    async def persistent_volume_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise self._refuse(f'persistentVolumeClaims (claim "{name}"); use an inline csi volume')

    async def persistent_volume(self, name: str) -> dict[str, Any] | None:
        raise self._refuse("persistent volumes")

    async def csi_driver(self, name: str) -> dict[str, Any] | None:
        return None  # no CSIDriver objects to read: the driver's defaults apply

    async def volume_attachment(self, name: str) -> dict[str, Any] | None:
        return None

    async def cluster_trust_bundle(self, name: str) -> dict[str, Any] | None:
        raise self._refuse(f'clusterTrustBundle projections (ClusterTrustBundle "{name}")')

    async def cluster_trust_bundles(self, label_selector: str) -> list[dict[str, Any]]:
        raise self._refuse("clusterTrustBundle projections")

    async def pod_certificate(self, pod: Pod, volume: str, index: int, source: dict[str, Any]) -> tuple[bytes, bytes]:
        raise self._refuse("podCertificate projections")

    def register_pod(self, uid: str, refs: set[tuple[str, str, str]]) -> None:
        return None

    def forget_pod(self, uid: str) -> None:
        return None

    def stop_unused_watches(self, referenced: set[tuple[str, str, str]]) -> None:
        return None  # nothing is watched


# What static pods (from the manifest directory) may read, in either mode.
STATIC_POD_OBJECTS = NoApiObjects("")
# Standalone mode: every pod is a static pod, and there is no API server.
STANDALONE_OBJECTS = NoApiObjects(" (pykubelet runs in standalone mode, without an API server)")
