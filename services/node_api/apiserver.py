"""What node-api asks the API server, with the node's credentials: TokenReview and
SubjectAccessReview (the Node authorizer allows nodes to create both, which is how the kubelet
delegates its API auth)."""

from __future__ import annotations

from services.node_api.auth import Attributes, User
from shared.api.client import KubeApi, path


class KubeReviews:
    def __init__(self, api: KubeApi) -> None:
        self.api = api

    async def token_review(self, token: str) -> tuple[bool, User | None, str]:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        review = await self.api.create(path("authentication.k8s.io/v1", "tokenreviews"), body)
        st = review.get("status") or {}
        u = st.get("user")
        if not st.get("authenticated") or not u:
            return False, None, st.get("error") or "token not authenticated"
        extra = tuple(sorted((k, tuple(v)) for k, v in (u.get("extra") or {}).items()))
        return True, User(u.get("username") or "", tuple(u.get("groups") or ()), u.get("uid") or "", extra), ""

    async def access_review(self, user: User, attrs: Attributes) -> tuple[bool, str]:
        spec = {"user": user.name, "groups": list(user.groups), "uid": user.uid,
                "extra": {k: list(v) for k, v in user.extra},
                "resourceAttributes": {"verb": attrs.verb, "group": "", "version": "v1",
                                       "resource": "nodes", "subresource": attrs.subresource,
                                       "name": attrs.node}}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        review = await self.api.create(path("authorization.k8s.io/v1", "subjectaccessreviews"), body)
        st = review.get("status") or {}
        return bool(st.get("allowed") and not st.get("denied")), st.get("reason") or ""
