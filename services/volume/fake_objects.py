"""An in-memory ObjectSource for unit tests (the fake of services.volume.objects.ObjectSource)."""

from __future__ import annotations

import copy
from typing import Any

from services.volume.pod_certificates import PodCertificates
from shared.model.podspec import Pod


class FakeObjectSource:
    def __init__(self) -> None:
        self.config_maps: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.volumes: dict[str, dict[str, Any]] = {}
        self.drivers: dict[str, dict[str, Any]] = {}
        self.attachments: dict[str, dict[str, Any]] = {}
        self.trust_bundles: dict[str, dict[str, Any]] = {}  # name -> ClusterTrustBundle
        self.bundle_selectors: list[str] = []  # each list's labelSelector, as asked
        self.token_requests: list[tuple[str, str, int]] = []  # (pod uid, audience, expiration)
        self.registered: dict[str, set[tuple[str, str, str]]] = {}  # pod uid -> the objects it refers to
        # PodCertificateRequests by (namespace, name); a test answers them by setting their status.
        self.pod_certificate_requests: dict[tuple[str, str], dict[str, Any]] = {}
        self._made = 0
        self.node_name = "node1"
        self.events: list[tuple[str, str, str, str]] = []  # (pod uid, type, reason, message)
        self.certificates = PodCertificates(lambda pod, *event: self.events.append((str(pod.uid), *event)))

    async def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.config_maps.get((namespace, name))

    async def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.secrets.get((namespace, name))

    async def service_account_token(self, pod: Pod, audience: str, expiration_seconds: int) -> str:
        self.token_requests.append((pod.uid, audience, expiration_seconds))
        return f"token-for-{pod.spec.serviceAccountName or 'default'}-{len(self.token_requests)}"

    async def persistent_volume_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get((namespace, name))

    async def persistent_volume(self, name: str) -> dict[str, Any] | None:
        return self.volumes.get(name)

    async def csi_driver(self, name: str) -> dict[str, Any] | None:
        return self.drivers.get(name)

    async def volume_attachment(self, name: str) -> dict[str, Any] | None:
        return self.attachments.get(name)

    async def cluster_trust_bundle(self, name: str) -> dict[str, Any] | None:
        return self.trust_bundles.get(name)

    async def cluster_trust_bundles(self, label_selector: str) -> list[dict[str, Any]]:
        """Only what unit tests need of selectors: "" (everything) and k=v terms."""
        self.bundle_selectors.append(label_selector)
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        return [b for b in self.trust_bundles.values()
                if all((b.get("metadata", {}).get("labels") or {}).get(k) == v for k, v in wanted.items())]

    async def pod_certificate(self, pod: Pod, volume: str, index: int, source: dict[str, Any]) -> tuple[bytes, bytes]:
        return await self.certificates.bundle(self, pod, volume, index, source)

    async def service_account_uid(self, namespace: str, name: str) -> str:
        return f"uid-of-sa-{name}"

    async def node_uid(self) -> str:
        return "uid-of-node1"

    async def create_pod_certificate_request(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        made = copy.deepcopy(body)
        self._made += 1  # as generateName: never the name of one made before
        made["metadata"]["name"] = f"req-{self._made - 1}"
        self.pod_certificate_requests[(namespace, made["metadata"]["name"])] = made
        return made

    async def pod_certificate_request(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pod_certificate_requests.get((namespace, name))

    def register_pod(self, uid: str, refs: set[tuple[str, str, str]]) -> None:
        self.registered[uid] = refs

    def forget_pod(self, uid: str) -> None:
        return None

    def stop_unused_watches(self, referenced: set[tuple[str, str, str]]) -> None:
        return None
