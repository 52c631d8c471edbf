"""The kubelet API's self-signed serving certificate, as the kubelet makes one when no
tlsCertFile is given: for the node's name, localhost and its addresses, valid a year. node-api
makes it at its first start; `pykubelet install` makes it up front and names it in tlsCertFile."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

SELF_SIGNED_DAYS = 365


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
