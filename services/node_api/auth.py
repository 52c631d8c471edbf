"""Who is asking, and may they: the kubelet API's authentication and authorization.

Authentication as the kubelet: an x509 client certificate that chained to clientCAFile (the
TLS handshake checked it; CN is the user, O the groups), else a bearer token reviewed by the
API server (TokenReview, cached for authentication.webhook.cacheTTL), else system:anonymous when
anonymous access is enabled. Tokens the API server rejected are cached apart from the ones it
accepted, so a flood of made-up tokens cannot push a real one out of the cache; a review that
failed is not repeated for the same token for FAILED_REVIEW_TTL; concurrent requests with the
same token share one review. Authorization maps the request to the attributes of a `nodes`
subresource the way the kubelet does and asks the API server (SubjectAccessReview, cached), or
allows everything in AlwaysAllow mode.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Generic, Hashable, Protocol, TypeVar

from shared.config.server import Authentication, Authorization

log = logging.getLogger(__name__)

ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"
AUTHENTICATED = "system:authenticated"
CACHE_SIZE = 4096
# A TokenReview that failed (API server unreachable, throttling, erroring) counts as a rejection
# this long: a client retrying, or many requests with one token, cost one review per token per
# FAILED_REVIEW_TTL, not one each (a short time: the token may be fine once the API server is).
FAILED_REVIEW_TTL = 5.0

VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
         "DELETE": "delete"}
# The kubelet 1.37's subresources of a path (its nodeAuthorizerAttributesGetter, with
# KubeletFineGrainedAuthz, which 1.36 locked on): a path of FINE_GRAINED is first asked as its
# own subresource, then as the one SUBRESOURCES gives it (proxy for every path not there); a
# request is allowed when one of them is. /spec is pykubelet's (cAdvisor's MachineInfo), which the
# kubelet no longer serves.
FINE_GRAINED = (("/allocatedPods", "pods"), ("/pods", "pods"), ("/healthz", "healthz"), ("/configz", "configz"),
                ("/runningpods", "pods"))
SUBRESOURCES = (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"), ("/checkpoint", "checkpoint"),
                ("/statusz", "statusz"), ("/flagz", "configz"), ("/spec", "spec"))


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Attributes:
    verb: str
    subresource: str
    node: str
    path: str


class AuthError(Exception):
    """401 (authentication failed or missing) or 403 (not allowed); message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# A TokenReview's answer: authenticated, the user, the API server's error when not.
Review = tuple[bool, User | None, str]


class ReviewAPI(Protocol):
    """The two API server reviews the kubelet API delegates to."""

    async def token_review(self, token: str) -> Review: ...
    async def access_review(self, user: User, attrs: Attributes) -> tuple[bool, str]: ...


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class TTLCache(Generic[K, V]):
    size: int = CACHE_SIZE
    _items: OrderedDict[K, tuple[V, float]] = field(default_factory=OrderedDict)

    def get(self, key: K) -> V | None:
        hit = self._items.get(key)
        if hit is None:
            return None
        value, expires = hit
        if time.monotonic() >= expires:
            del self._items[key]
            return None
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._items[key] = (value, time.monotonic() + ttl)
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def user_from_peercert(peercert: dict[str, Any] | None) -> User | None:
    """ssl's getpeercert() of a verified client certificate -> CN user with O groups."""
    if not peercert:
        return None
    cn, orgs = "", []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                cn = value
            elif key == "organizationName":
                orgs.append(value)
    return User(cn, tuple(orgs)) if cn else None


def _first(table: tuple[tuple[str, str], ...], path: str) -> str | None:
    """The subresource of the first prefix the path is (or is below), as the kubelet's isSubpath."""
    return next((name for prefix, name in table if path == prefix or path.startswith(prefix + "/")), None)


def request_attributes(method: str, path: str, node: str) -> list[Attributes]:
    """What the request is asked as, in the kubelet's order."""
    verb = VERBS.get(method.upper(), method.lower())
    subresources = [_first(FINE_GRAINED, path), _first(SUBRESOURCES, path) or "proxy"]
    return [Attributes(verb, sub, node, path) for sub in subresources if sub]


def forbidden(user: User, attrs: list[Attributes]) -> str:
    """The kubelet's 403 message: the attributes differ only by subresource."""
    subs = " ".join(a.subresource for a in attrs)
    return f"Forbidden (user={user.name}, verb={attrs[0].verb}, resource=nodes, subresource(s)=[{subs}])"


class Authenticator:
    def __init__(self, cfg: Authentication, reviews: ReviewAPI | None) -> None:
        self.cfg = cfg
        self.reviews = reviews if cfg.webhook.enabled else None
        self._accepted: TTLCache[str, Review] = TTLCache()
        self._rejected: TTLCache[str, Review] = TTLCache()
        self._reviewing: dict[str, asyncio.Future[Review]] = {}

    def describe(self) -> str:
        methods = []
        if self.cfg.x509.client_ca_file:
            methods.append(f"x509 ({self.cfg.x509.client_ca_file})")
        if self.cfg.webhook.enabled:
            methods.append("webhook" if self.reviews else "webhook (unavailable: no API server in standalone mode)")
        if self.cfg.anonymous.enabled:
            methods.append("anonymous")
        return ", ".join(methods) or "none: every request is refused"

    async def authenticate(self, peercert: dict[str, Any] | None, authorization: str | None) -> User:
        user = user_from_peercert(peercert)
        if user is not None:
            return User(user.name, (*user.groups, AUTHENTICATED))
        if authorization:
            scheme, _, token = authorization.partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token and self.reviews is not None:
                return await self._review_token(token)
            raise AuthError(401, "Unauthorized")
        if self.cfg.anonymous.enabled:
            return User(ANONYMOUS, (UNAUTHENTICATED,))
        raise AuthError(401, "Unauthorized")

    async def _review_token(self, token: str) -> User:
        key = hashlib.sha256(token.encode()).hexdigest()
        result = self._accepted.get(key) or self._rejected.get(key)
        if result is None:
            pending = self._reviewing.get(key)
            if pending is None:
                pending = asyncio.ensure_future(self._review(key, token))
                self._reviewing[key] = pending
                pending.add_done_callback(lambda _: self._reviewing.pop(key, None))
            # Shielded: a waiter that goes away (its connection closed) leaves the review to
            # the others, and its result to the cache.
            result = await asyncio.shield(pending)
        ok, user, error = result
        if not ok or user is None:
            raise AuthError(401, "Unauthorized")
        return user

    async def _review(self, key: str, token: str) -> Review:
        assert self.reviews is not None
        try:
            result = await self.reviews.token_review(token)
        except Exception as exc:  # an unreachable API server must not let anyone in
            log.warning("TokenReview failed: %s", exc)
            result = (False, None, f"TokenReview failed: {exc}")
            self._rejected.put(key, result, FAILED_REVIEW_TTL)
            return result
        ok, user, _ = result
        cache = self._accepted if ok and user is not None else self._rejected
        cache.put(key, result, self.cfg.webhook.cache_ttl)
        return result


class Authorizer:
    def __init__(self, cfg: Authorization, reviews: ReviewAPI | None, node: str) -> None:
        self.cfg = cfg
        self.reviews = reviews
        self.node = node
        self._decisions: TTLCache[tuple[Any, ...], tuple[bool, str]] = TTLCache()

    async def authorize(self, user: User, method: str, path: str) -> Attributes:
        """The attributes the request is allowed as (the first of the kubelet's that is)."""
        candidates = request_attributes(method, path, self.node)
        if self.cfg.mode == "AlwaysAllow":
            return candidates[0]
        if self.reviews is None:
            raise AuthError(403, f"{forbidden(user, candidates)}: authorization mode Webhook needs an API "
                                 f"server (set authorization.mode: AlwaysAllow in standalone mode)")
        reasons = []
        for attrs in candidates:
            allowed, reason = await self._decide(user, attrs, candidates)
            if allowed:
                return attrs
            if reason:
                reasons.append(reason)
        raise AuthError(403, forbidden(user, candidates) + (f": {'; '.join(reasons)}" if reasons else ""))

    async def _decide(self, user: User, attrs: Attributes, candidates: list[Attributes]) -> tuple[bool, str]:
        assert self.reviews is not None
        # The path is part of the attributes the kubelet sends, but not of the resource decision.
        key = (user, attrs.verb, attrs.subresource)
        decision = self._decisions.get(key)
        if decision is None:
            try:
                decision = await self.reviews.access_review(user, attrs)
            except Exception as exc:
                log.warning("SubjectAccessReview failed: %s", exc)
                raise AuthError(403, f"{forbidden(user, candidates)}: authorization check failed") from None
            w = self.cfg.webhook
            self._decisions.put(key, decision, w.cache_authorized_ttl if decision[0] else w.cache_unauthorized_ttl)
        return decision
