"""An in-memory ObjectSource for unit tests (the fake of services.volume.objects.ObjectSource)."""

from __future__ import annotations

from typing import Any

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

    def register_pod(self, uid: str, refs: set[tuple[str, str, str]]) -> None:
        self.registered[uid] = refs

    def forget_pod(self, uid: str) -> None:
        return None

    def stop_unused_watches(self, referenced: set[tuple[str, str, str]]) -> None:
        return None
