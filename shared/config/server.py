"""The kubelet API server's part of KubeletConfiguration: listener, TLS, authentication and
authorization, with the v1beta1 config file's defaults (the secure ones: no anonymous access,
webhook authentication and authorization, no read-only port)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator
from pydantic.alias_generators import to_camel

from shared.model.durations import to_seconds
from shared.model.ip import ip_address

# tlsCurvePreferences: Go's tls.CurveID values and OpenSSL's names for them.
GO_CURVES = {23: "prime256v1", 24: "secp384r1", 25: "secp521r1", 29: "X25519"}
GO_CURVE_NAMES = {23: "CurveP256", 24: "CurveP384", 25: "CurveP521", 29: "X25519", 4588: "X25519MLKEM768"}

# Go's crypto/tls names (what the kubelet's tlsCipherSuites takes) -> OpenSSL names.
# TLS 1.3 suites are not configurable, in Go or here.
GO_CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
}
TLS_VERSIONS = ("VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13")


class _Section(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class X509Authentication(_Section):
    client_ca_file: str = Field(default="", alias="clientCAFile")


class WebhookAuthentication(_Section):
    enabled: StrictBool = True
    cache_ttl: float = Field(default=120.0, alias="cacheTTL")

    @field_validator("cache_ttl", mode="before")
    @classmethod
    def _ttl(cls, v: Any) -> float:
        return to_seconds(v)


class AnonymousAuthentication(_Section):
    enabled: StrictBool = False


class Authentication(_Section):
    x509: X509Authentication = Field(default_factory=X509Authentication)
    webhook: WebhookAuthentication = Field(default_factory=WebhookAuthentication)
    anonymous: AnonymousAuthentication = Field(default_factory=AnonymousAuthentication)


class WebhookAuthorization(_Section):
    cache_authorized_ttl: float = Field(default=300.0, alias="cacheAuthorizedTTL")
    cache_unauthorized_ttl: float = Field(default=30.0, alias="cacheUnauthorizedTTL")

    @field_validator("cache_authorized_ttl", "cache_unauthorized_ttl", mode="before")
    @classmethod
    def _ttl(cls, v: Any) -> float:
        return to_seconds(v)


class Authorization(_Section):
    mode: Literal["Webhook", "AlwaysAllow"] = "Webhook"
    webhook: WebhookAuthorization = Field(default_factory=WebhookAuthorization)


class ServerConfig(_Section):
    """Mixed into KubeletConfiguration: the fields of the kubelet's HTTPS server."""

    enable_server: StrictBool = True
    address: str = "0.0.0.0"
    port: int = Field(default=10250, ge=1, le=65535)
    read_only_port: int = Field(default=0, ge=0, le=65535)
    tls_cert_file: str = ""
    tls_private_key_file: str = ""
    tls_cipher_suites: list[str] = Field(default_factory=list)
    tls_min_version: str = ""
    tls_curve_preferences: list[int] = Field(default_factory=list)
    authentication: Authentication = Field(default_factory=Authentication)
    authorization: Authorization = Field(default_factory=Authorization)
    enable_debugging_handlers: StrictBool = True
    # PUT /debug/flags/v sets every service's log verbosity (services/node_api/debug_flags.py).
    enable_debug_flags_handler: StrictBool = True
    # false: /debug/pprof/ answers the kubelet's "disabled"; true: pykubelet has no Go runtime to
    # profile and serves no profiles there (`make profile` samples the services with py-spy).
    enable_profiling_handler: StrictBool = True
    streaming_connection_idle_timeout: float = 4 * 3600.0

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        return ip_address(v, "use 0.0.0.0 for all interfaces")

    @field_validator("tls_cipher_suites")
    @classmethod
    def _ciphers(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in GO_CIPHER_SUITES]
        if unknown:
            raise ValueError(f"unknown or insecure cipher suite(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(GO_CIPHER_SUITES))}")
        return v

    @field_validator("tls_curve_preferences")
    @classmethod
    def _curves(cls, v: list[int]) -> list[int]:
        unknown = [str(c) for c in v if c not in GO_CURVE_NAMES]
        if unknown:
            raise ValueError(f"unknown curve ID(s) {', '.join(unknown)}; known: "
                             + ", ".join(f"{i} ({n})" for i, n in GO_CURVE_NAMES.items()))
        if 4588 in v:
            raise ValueError("4588 (X25519MLKEM768) is not offered by this node's TLS library; give one of "
                             + ", ".join(f"{i} ({GO_CURVE_NAMES[i]})" for i in GO_CURVES))
        if len(v) > 1:
            # Python's ssl sets the key exchange groups through SSLContext.set_ecdh_curve: one.
            raise ValueError(f"pykubelet limits the kubelet API's key exchange to one curve, not a preference list "
                             f"of {len(v)}: give the one to use")
        return v

    @field_validator("tls_min_version")
    @classmethod
    def _min_version(cls, v: str) -> str:
        if v and v not in TLS_VERSIONS:
            raise ValueError(f"must be one of {', '.join(TLS_VERSIONS)}")
        return v

    @field_validator("streaming_connection_idle_timeout", mode="before")
    @classmethod
    def _idle(cls, v: Any) -> float:
        return to_seconds(v)
