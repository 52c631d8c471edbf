"""A throwaway PKI for a test cluster: a CA, the API server's serving cert, client certs."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class CertPair:
    cert: Path
    key: Path


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write(path: Path, key, cert: x509.Certificate) -> CertPair:
    key_path, cert_path = path.with_suffix(".key"), path.with_suffix(".crt")
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return CertPair(cert_path, key_path)


def _name(cn: str, orgs: list[str] | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs or []]
    return x509.Name(attrs)


class PKI:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.timezone.utc)
        self._valid = (now - dt.timedelta(hours=1), now + dt.timedelta(days=2))
        self._ca_key = _key()
        name = _name("pykubelet-test-ca")
        self._ca_cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                         .public_key(self._ca_key.public_key()).serial_number(x509.random_serial_number())
                         .not_valid_before(self._valid[0]).not_valid_after(self._valid[1])
                         .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                         .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                        critical=True)
                         .sign(self._ca_key, hashes.SHA256()))
        self.ca = _write(self.dir / "ca", self._ca_key, self._ca_cert)

    def issue(self, filename: str, cn: str, orgs: list[str] | None = None, server: bool = False,
              ips: list[str] | None = None, dns: list[str] | None = None) -> CertPair:
        key = _key()
        b = (x509.CertificateBuilder().subject_name(_name(cn, orgs)).issuer_name(self._ca_cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(self._valid[0]).not_valid_after(self._valid[1])
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                   else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if ips or dns:
            sans = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips or []] + [x509.DNSName(d) for d in dns or []]
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return _write(self.dir / filename, key, b.sign(self._ca_key, hashes.SHA256()))

    def sign_csr(self, csr_pem: bytes, seconds: float, server: bool = True) -> bytes:
        """Issue a certificate for a CSR (subject and SANs as requested), valid for `seconds`."""
        csr = x509.load_pem_x509_csr(csr_pem)
        now = dt.datetime.now(dt.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(csr.subject).issuer_name(self._ca_cert.subject)
             .public_key(csr.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(seconds=5)).not_valid_after(now + dt.timedelta(seconds=seconds))
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                   else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        try:
            b = b.add_extension(csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value,
                                critical=False)
        except x509.ExtensionNotFound:
            pass
        return b.sign(self._ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    def sign_public_key(self, public_key, seconds: int, uris: list[str]) -> x509.Certificate:
        """A leaf for a key, with URI SANs only (a pod certificate), valid `seconds` from the
        current second on (the API server wants a whole second: the status repeats the times)."""
        start = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        return (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(self._ca_cert.subject)
                .public_key(public_key).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(start + dt.timedelta(seconds=seconds))
                .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in uris]),
                               critical=True)
                .sign(self._ca_key, hashes.SHA256()))

    @property
    def ca_certificate(self) -> x509.Certificate:
        return self._ca_cert

    def service_account_key(self) -> Path:
        key = _key()
        path = self.dir / "sa.key"
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        return path


def self_signed_ca_pem(cn: str) -> str:
    """A CA certificate of its own (EC P-256, a day), as PEM: what a trust bundle carries."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def kubeconfig(path: Path, server: str, ca: Path, client: CertPair, user: str) -> Path:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {user}
  user:
    client-certificate: {client.cert}
    client-key: {client.key}
contexts:
- name: test
  context: {{cluster: test, user: {user}}}
current-context: test
""")
    return path
