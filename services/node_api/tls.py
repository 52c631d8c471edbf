"""The kubelet API's TLS: the serving certificate (given, or self-signed at first start as the
kubelet does) and the server context that asks for, and verifies, client certificates."""

from __future__ import annotations

import ssl
from pathlib import Path

from shared.api.self_signed import write_self_signed
from shared.config.server import GO_CIPHER_SUITES, GO_CURVES
from shared.config.settings import ConfigError, KubeletConfiguration

_TLS_VERSIONS = {"VersionTLS10": ssl.TLSVersion.TLSv1, "VersionTLS11": ssl.TLSVersion.TLSv1_1,
                 "VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3}


def serving_cert_paths(cfg: KubeletConfiguration, cert_dir: Path, hostname: str,
                       addresses: list[str]) -> tuple[Path, Path]:
    """tlsCertFile/tlsPrivateKeyFile when set; otherwise <cert-dir>/kubelet.crt and .key, made
    once (self-signed for the node's name and addresses) and reused on later starts."""
    if bool(cfg.tls_cert_file) != bool(cfg.tls_private_key_file):
        raise ConfigError("tlsCertFile and tlsPrivateKeyFile go together: set both or neither")
    if cfg.tls_cert_file:
        for name, value in (("tlsCertFile", cfg.tls_cert_file), ("tlsPrivateKeyFile", cfg.tls_private_key_file)):
            if not Path(value).is_file():
                raise ConfigError(f"{name} {value}: no such file")
        return Path(cfg.tls_cert_file), Path(cfg.tls_private_key_file)
    cert, key = cert_dir / "kubelet.crt", cert_dir / "kubelet.key"
    if not (cert.is_file() and key.is_file()):
        write_self_signed(cert, key, hostname, addresses)
    return cert, key


def server_context(cfg: KubeletConfiguration, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    """TLS 1.2+ unless tlsMinVersion says otherwise; client certificates are requested and, when
    presented, must chain to authentication.x509.clientCAFile (else the handshake fails).
    Without cert, the certificate is loaded later (serverTLSBootstrap)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if cert is not None:
        try:
            ctx.load_cert_chain(str(cert), str(key) if key else None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the serving certificate {cert} / key {key}: {exc}") from None
    ctx.minimum_version = _TLS_VERSIONS.get(cfg.tls_min_version, ssl.TLSVersion.TLSv1_2)
    if cfg.tls_cipher_suites:
        ctx.set_ciphers(":".join(GO_CIPHER_SUITES[c] for c in cfg.tls_cipher_suites))
    for curve in cfg.tls_curve_preferences:  # one at most (shared/config/server.py)
        ctx.set_ecdh_curve(GO_CURVES[curve])
    ctx.set_alpn_protocols(["http/1.1"])
    ca = cfg.authentication.x509.client_ca_file
    if ca:
        try:
            ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"authentication.x509.clientCAFile {ca}: cannot load: {exc}") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
