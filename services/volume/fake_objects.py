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

    def register_pod(self, uid: str, refs: set[tuple[str, str, str]]) -> None:
        self.registered[uid] = refs

    def forget_pod(self, uid: str) -> None:
        return None

    def stop_unused_watches(self, referenced: set[tuple[str, str, str]]) -> None:
        return None
