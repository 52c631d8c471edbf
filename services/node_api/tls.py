"""The kubelet API's TLS: the serving certificate (given, or self-signed at first start as the
kubelet does) and the server context that asks for, and verifies, client certificates."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from pathlib import Path

from shared.config import ConfigError, KubeletConfiguration
from shared.server_config import GO_CIPHER_SUITES

SELF_SIGNED_DAYS = 365
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


def write_self_signed(cert_path: Path, key_path: Path, hostname: str, addresses: list[str]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{hostname}@{int(now.timestamp())}")])
    sans: list[x509.GeneralName] = [x509.DNSName(hostname), x509.DNSName("localhost")]
    for a in {*addresses, "127.0.0.1"}:
        sans.append(x509.IPAddress(ipaddress.ip_address(a)))
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=SELF_SIGNED_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(cert_path.parent, 0o700)
    # The key is created 0600 before any byte of it is written.
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


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
    ctx.set_alpn_protocols(["http/1.1"])
    ca = cfg.authentication.x509.client_ca_file
    if ca:
        try:
            ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"authentication.x509.clientCAFile {ca}: cannot load: {exc}") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
