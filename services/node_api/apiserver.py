"""What node-api asks the API server, with the node's credentials: TokenReview and
SubjectAccessReview (the Node authorizer allows nodes to create both, which is how the kubelet
delegates its API auth) and its serving certificate's CSRs."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from services.node_api.auth import Attributes, User
from shared.kube import REQUEST_TIMEOUT


class KubeReviews:
    def __init__(self, api: client.ApiClient) -> None:
        self.authn = client.AuthenticationV1Api(api)
        self.authz = client.AuthorizationV1Api(api)

    async def token_review(self, token: str) -> tuple[bool, User | None, str]:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        review = await self.authn.create_token_review(body, _request_timeout=REQUEST_TIMEOUT)
        st = review.status
        if st is None or not st.authenticated or st.user is None:
            return False, None, (st.error if st else "") or "token not authenticated"
        u = st.user
        extra = tuple(sorted((k, tuple(v)) for k, v in (u.extra or {}).items()))
        return True, User(u.username or "", tuple(u.groups or ()), u.uid or "", extra), ""

    async def access_review(self, user: User, attrs: Attributes) -> tuple[bool, str]:
        spec = {"user": user.name, "groups": list(user.groups), "uid": user.uid,
                "extra": {k: list(v) for k, v in user.extra},
                "resourceAttributes": {"verb": attrs.verb, "group": "", "version": "v1",
                                       "resource": "nodes", "subresource": attrs.subresource,
                                       "name": attrs.node}}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        review = await self.authz.create_subject_access_review(body, _request_timeout=REQUEST_TIMEOUT)
        st = review.status
        return bool(st and st.allowed and not st.denied), (st.reason if st else "") or ""


class KubeCSRs:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.certs = client.CertificatesV1Api(api)

    async def create(self, body: dict[str, Any]) -> str:
        csr = await self.certs.create_certificate_signing_request(body, _request_timeout=REQUEST_TIMEOUT)
        return csr.metadata.name

    async def get(self, name: str) -> dict[str, Any]:
        csr = await self.certs.read_certificate_signing_request(name, _request_timeout=REQUEST_TIMEOUT)
        return self.api.sanitize_for_serialization(csr)
