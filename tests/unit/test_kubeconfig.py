"""shared/api/kubeconfig.py against a real loopback server (HTTPS with a throwaway CA, or plain
HTTP): CA file and data, insecure-skip-tls-verify, client certificates as files and as data,
token, token file rotation, basic auth, exec plugins (cache, expiry, 401, failures), what is
refused by name, and hostile files."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import re
import ssl
import sys
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from shared.api import kubeconfig
from shared.api.client import ApiError, api_client
from shared.api.client import KubeconfigError as ReExported
from shared.api.kubeconfig import KubeconfigError, load

NOW = datetime.datetime.now(datetime.timezone.utc)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key, password: bytes | None = None) -> bytes:
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def _cert(cn: str, key, issuer_cert=None, issuer_key=None, ca=False, ip=False) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    b = (x509.CertificateBuilder().subject_name(name)
         .issuer_name(issuer_cert.subject if issuer_cert else name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(NOW - datetime.timedelta(hours=1))
         .not_valid_after(NOW + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                                          key_agreement=False, encipher_only=False, decipher_only=False),
                            critical=True)
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                            critical=False)
    if ip:
        import ipaddress
        b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                            critical=False)
    return b.sign(issuer_key or key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class Pki:
    """A throwaway CA, the API server's certificate for 127.0.0.1, a node's client certificate,
    and a CA that signed none of them."""

    def __init__(self, d: Path) -> None:
        ca_key, other_key, server_key, self.client_key = _key(), _key(), _key(), _key()
        ca = _cert("test-ca", ca_key, ca=True)
        self.ca = _pem(ca)
        self.other_ca = _pem(_cert("other-ca", other_key, ca=True))
        self.client = _pem(_cert("system:node:n1", self.client_key, ca, ca_key))
        self.client_key_pem = _pem_key(self.client_key)
        self.dir = d
        for name, data in {"ca.crt": self.ca, "other-ca.crt": self.other_ca, "server.crt": _pem(
                _cert("kube-apiserver", server_key, ca, ca_key, ip=True)), "server.key": _pem_key(server_key),
                "client.crt": self.client, "client.key": self.client_key_pem}.items():
            (d / name).write_bytes(data)

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.dir / "server.crt", self.dir / "server.key")
        ctx.load_verify_locations(self.dir / "ca.crt")
        ctx.verify_mode = ssl.CERT_OPTIONAL  # the client certificate's CN is echoed when there is one
        return ctx


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


class Server:
    """Echoes the Authorization header and the client certificate's CN; answers 401 to any
    Authorization not in `accept` (when set)."""

    def __init__(self, tls: ssl.SSLContext | None = None, accept: set[str] | None = None) -> None:
        self.tls, self.accept = tls, accept
        self.seen: list[str] = []

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _handle(self, reader, writer) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            writer.close()
            return
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if ": " in line)
        auth = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        self.seen.append(auth)
        peer = writer.get_extra_info("peercert") or {}
        cn = dict(rdn[0] for rdn in peer.get("subject", ())).get("commonName", "")
        ok = self.accept is None or auth in self.accept
        body = json.dumps({"authorization": auth, "cn": cn} if ok else {"reason": "Unauthorized"}).encode()
        writer.write(f"HTTP/1.1 {'200 OK' if ok else '401 Unauthorized'}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await writer.drain()
        writer.close()


def write(path: Path, cluster: dict, user: dict | None, *, context: dict | None = None,
          current: str | None = "ctx", **top) -> Path:
    doc = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": cluster}],
           "users": [{"name": "u", "user": user}],
           "contexts": [{"name": "ctx", "context": context or {"cluster": "c", "user": "u"}}], **top}
    if current is not None:
        doc["current-context"] = current
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


async def get(cfg: kubeconfig.Kubeconfig) -> httpx.Response:
    async with httpx.AsyncClient(base_url=cfg.server, verify=cfg.verify, auth=cfg.auth, trust_env=False) as c:
        return await c.get("/api/v1/nodes/n1")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- the cluster: CA, insecure-skip-tls-verify --------------------------------------------------

@pytest.mark.parametrize("how", ["file", "relative file", "data"])
async def test_the_server_is_verified_with_the_ca_file_or_data(pki, tmp_path, how):
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(pki.ca)
    ca = {"file": {"certificate-authority": str(tmp_path / "pki" / "ca.crt")},
          "relative file": {"certificate-authority": "pki/ca.crt"},  # next to the kubeconfig, not the cwd
          "data": {"certificate-authority-data": b64(pki.ca)}}[how]
    async with Server(pki.server_context()) as s:
        cfg = load(write(tmp_path / "kubeconfig", {"server": s.url, **ca}, {"token": "t0k"}))
        resp = await get(cfg)
        assert resp.status_code == 200 and resp.json()["authorization"] == "Bearer t0k"

        wrong = load(write(tmp_path / "wrong", {"server": s.url, "certificate-authority-data": b64(pki.other_ca)},
                           {"token": "t0k"}))
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await get(wrong)


async def test_insecure_skip_tls_verify_and_without_it_the_default_bundle(pki, tmp_path, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with Server(pki.server_context()) as s:
        insecure = load(write(tmp_path / "a", {"server": s.url, "insecure-skip-tls-verify": True}, {"token": "x"}))
        assert (await get(insecure)).status_code == 200
        verified = load(write(tmp_path / "b", {"server": s.url}, {"token": "x"}))  # certifi's bundle
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await get(verified)
        # A CA given as well wins over insecure-skip-tls-verify: the server is still verified.
        both = load(write(tmp_path / "c", {"server": s.url, "insecure-skip-tls-verify": True,
                                           "certificate-authority-data": b64(pki.other_ca)}, {"token": "x"}))
        with pytest.raises(httpx.ConnectError):
            await get(both)


# --- the user: client certificates, token, token file, basic ------------------------------------

@pytest.mark.parametrize("how", ["files", "relative files", "data"])
async def test_a_client_certificate_from_files_or_data(pki, tmp_path, monkeypatch, how):
    tls = pki.server_context()
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(private_tmp))
    loaded: list[tuple[str, int]] = []
    original = ssl.SSLContext.load_cert_chain

    def spy(self, certfile, keyfile=None, password=None):
        loaded.extend((f, os.stat(f).st_mode & 0o777) for f in (certfile, keyfile))
        return original(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    user = {"files": {"client-certificate": str(pki.dir / "client.crt"), "client-key": str(pki.dir / "client.key")},
            "relative files": {"client-certificate": "client.crt", "client-key": "client.key"},
            "data": {"client-certificate-data": b64(pki.client), "client-key-data": b64(pki.client_key_pem)}}[how]
    where = pki.dir if how == "relative files" else tmp_path
    async with Server(tls) as s:
        cfg = load(write(where / f"kubeconfig-{how.replace(' ', '-')}",
                         {"server": s.url, "certificate-authority-data": b64(pki.ca)}, user))
        assert cfg.auth is None, "the certificate alone says who the node is"
        resp = await get(cfg)
    assert resp.json()["cn"] == "system:node:n1"
    if how == "data":
        assert all(f.startswith(str(private_tmp)) and mode == 0o600 for f, mode in loaded), loaded
        assert list(private_tmp.iterdir()) == [], "the key written for the ssl module is removed again"


def test_a_client_certificate_needs_its_key_and_an_encrypted_key_is_refused(pki, tmp_path):
    cluster = {"server": "https://127.0.0.1:1", "certificate-authority-data": b64(pki.ca)}
    with pytest.raises(KubeconfigError, match="user 'u': client-certificate needs client-key"):
        load(write(tmp_path / "k", cluster, {"client-certificate-data": b64(pki.client)}))
    encrypted = _pem_key(pki.client_key, b"secret")
    with pytest.raises(KubeconfigError, match="client-key is encrypted"):
        load(write(tmp_path / "k", cluster, {"client-certificate-data": b64(pki.client),
                                             "client-key-data": b64(encrypted)}))
    with pytest.raises(KubeconfigError, match="cannot load client-certificate and client-key"):
        load(write(tmp_path / "k", cluster, {"client-certificate-data": b64(pki.client),
                                             "client-key-data": b64(pki.ca)}))
    with pytest.raises(KubeconfigError, match="client-certificate and client-key: No such file"):
        load(write(tmp_path / "k", cluster, {"client-certificate": "nope.crt", "client-key": "nope.key"}))


async def test_token_and_basic_auth(tmp_path):
    async with Server() as s:
        cfg = load(write(tmp_path / "k", {"server": s.url}, {"token": "abc"}))
        assert (await get(cfg)).json()["authorization"] == "Bearer abc"
        cfg = load(write(tmp_path / "k", {"server": s.url}, {"username": "admin", "password": "pw"}))
        assert (await get(cfg)).json()["authorization"] == "Basic " + b64(b"admin:pw")
    with pytest.raises(KubeconfigError, match="username needs password"):
        load(write(tmp_path / "k", {"server": "http://x"}, {"username": "admin"}))
    with pytest.raises(KubeconfigError, match="token must be a string"):
        load(write(tmp_path / "k", {"server": "http://x"}, {"token": 1234}))


async def test_a_token_file_is_read_again_after_a_rotation(tmp_path, monkeypatch):
    token_file = tmp_path / "secrets" / "token"
    token_file.parent.mkdir()
    token_file.write_text("tok1\n")
    async with Server(accept={"Bearer tok2", "Bearer tok3"}) as s:
        # Relative: next to the kubeconfig. tokenFile wins over token, as in lightkube.
        api = await api_client(write(tmp_path / "k", {"server": s.url}, {"tokenFile": "secrets/token",
                                                                          "token": "ignored"}),
                               qps=100, burst=100, root_dir=tmp_path)
        try:
            with pytest.raises(ApiError) as err:
                await api.get("/api/v1/nodes/n1")
            assert err.value.status == 401
            assert s.seen == ["Bearer tok1"], "a 401 re-reads the file; the same token is not sent again"

            token_file.write_text("tok2")  # rotated
            await api.get("/api/v1/nodes/n1")
            assert s.seen[1:] == ["Bearer tok1", "Bearer tok2"], "kept for a minute, re-read on the 401"
            await api.get("/api/v1/nodes/n1")
            assert s.seen[3:] == ["Bearer tok2"]

        finally:
            await api.close()


async def test_a_token_file_is_read_again_once_its_period_is_over(tmp_path, monkeypatch):
    monkeypatch.setattr(kubeconfig, "TOKEN_FILE_PERIOD", 0.0)
    token_file = tmp_path / "token"
    token_file.write_text("tok1")
    async with Server() as s:
        cfg = load(write(tmp_path / "k", {"server": s.url}, {"tokenFile": str(token_file)}))
        await get(cfg)
        token_file.write_text("tok2")
        await get(cfg)  # read before the request: no 401 needed
        assert s.seen == ["Bearer tok1", "Bearer tok2"]
        token_file.unlink()
        with pytest.raises(KubeconfigError, match=r"user 'u' tokenFile .*/token: cannot read it: No such file"):
            await get(cfg)


# --- exec plugins -------------------------------------------------------------------------------

PLUGIN = r'''
import json, os, pathlib, subprocess, sys, time
count = pathlib.Path(sys.argv[1])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["spec"] == {"interactive": False} and sys.stdin.read() == "", info
mode = os.environ.get("PLUGIN_MODE", "ok")
if mode == "fail":
    sys.stderr.write("boom: no credentials\n")
    sys.exit(3)
if mode == "garbage":
    print("Traceback (most recent call last): secret-ish output")
    sys.exit(0)
if mode == "no-token":
    print(json.dumps({"kind": "ExecCredential", "status": {"clientCertificateData": "x"}}))
    sys.exit(0)
if mode == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pathlib.Path(sys.argv[1] + ".child").write_text(str(child.pid))
    time.sleep(60)
status = {"token": "exec-%d" % n}
if os.environ.get("EXPIRY"):
    status["expirationTimestamp"] = os.environ["EXPIRY"]
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
'''


def exec_user(tmp_path: Path, mode: str = "ok", expiry: str = "",
              api_version: str = "client.authentication.k8s.io/v1") -> dict:
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    return {"exec": {"apiVersion": api_version, "command": sys.executable,
                     "args": [str(script), str(tmp_path / "runs")],
                     "env": [{"name": "PLUGIN_MODE", "value": mode}, {"name": "EXPIRY", "value": expiry}],
                     "interactiveMode": "IfAvailable", "provideClusterInfo": False, "installHint": "install it"}}


def runs(tmp_path: Path) -> int:
    return int((tmp_path / "runs").read_text()) if (tmp_path / "runs").exists() else 0


@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1alpha1"])
async def test_an_exec_token_is_kept_until_it_expires(tmp_path, version):
    later = (NOW + datetime.timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    async with Server() as s:
        cfg = load(write(tmp_path / "k", {"server": s.url},
                         exec_user(tmp_path, expiry=later, api_version=f"client.authentication.k8s.io/{version}")))
        assert runs(tmp_path) == 0, "the plugin runs when a request needs it, not at load"
        await asyncio.gather(*(get(cfg) for _ in range(4)))
        assert s.seen == ["Bearer exec-1"] * 4 and runs(tmp_path) == 1, "one run serves concurrent requests"


async def test_an_expired_exec_token_is_fetched_again(tmp_path):
    earlier = (NOW - datetime.timedelta(minutes=1)).isoformat()
    async with Server() as s:
        cfg = load(write(tmp_path / "k", {"server": s.url}, exec_user(tmp_path, expiry=earlier)))
        await get(cfg)
        await get(cfg)
        assert s.seen == ["Bearer exec-1", "Bearer exec-2"]


async def test_the_exec_plugin_runs_again_on_a_401(tmp_path):
    async with Server(accept={"Bearer exec-2"}) as s:  # the first token was revoked
        api = await api_client(write(tmp_path / "k", {"server": s.url}, exec_user(tmp_path)),
                               qps=100, burst=100, root_dir=tmp_path)
        try:
            await api.get("/api/v1/nodes/n1")
            await api.get("/api/v1/nodes/n1")
        finally:
            await api.close()
    assert s.seen == ["Bearer exec-1", "Bearer exec-2", "Bearer exec-2"] and runs(tmp_path) == 2


@pytest.mark.parametrize("mode, message", [
    ("fail", r"user 'u' exec: .*python.* exited with 3: boom: no credentials"),
    ("garbage", r"printed no ExecCredential JSON \(\d+ bytes\)$"),
    ("no-token", r"without status.token \(a client certificate from an exec plugin is not supported\)"),
])
async def test_an_exec_plugin_that_fails_or_prints_garbage(tmp_path, mode, message):
    cfg = load(write(tmp_path / "k", {"server": "http://127.0.0.1:1"}, exec_user(tmp_path, mode)))
    with pytest.raises(KubeconfigError, match=message) as err:
        await get(cfg)
    assert str(tmp_path / "k") in str(err.value) and "secret-ish" not in str(err.value)


async def test_an_exec_plugin_that_hangs_is_killed_with_what_it_started(tmp_path, monkeypatch):
    monkeypatch.setattr(kubeconfig, "EXEC_TIMEOUT", 1.0)
    cfg = load(write(tmp_path / "k", {"server": "http://127.0.0.1:1"}, exec_user(tmp_path, "hang")))
    with pytest.raises(KubeconfigError, match="did not answer within 1 s"):
        await get(cfg)
    child = int((tmp_path / "runs.child").read_text())
    await asyncio.sleep(0.2)
    try:
        state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z"), "the plugin's own child is killed too"


async def test_an_exec_plugin_that_is_missing_or_bad_expiry(tmp_path, monkeypatch):
    user = exec_user(tmp_path)
    user["exec"]["command"] = "no-such-plugin-anywhere"
    cfg = load(write(tmp_path / "k", {"server": "http://127.0.0.1:1"}, user))
    with pytest.raises(KubeconfigError, match="cannot run no-such-plugin-anywhere: .*install it"):
        await get(cfg)
    cfg = load(write(tmp_path / "k", {"server": "http://127.0.0.1:1"}, exec_user(tmp_path, expiry="tomorrow")))
    with pytest.raises(KubeconfigError, match="expirationTimestamp 'tomorrow', not an RFC 3339 time"):
        await get(cfg)


async def test_a_relative_exec_command_runs_next_to_the_kubeconfig(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    plugin = tmp_path / "bin" / "plugin"
    plugin.write_text(f"#!{sys.executable}\n" + PLUGIN)
    plugin.chmod(0o755)
    user = exec_user(tmp_path)
    user["exec"].update(command="bin/plugin", args=[str(tmp_path / "runs")])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    async with Server() as s:
        cfg = load(write(tmp_path / "k", {"server": s.url}, user))
        assert (await get(cfg)).json()["authorization"] == "Bearer exec-1"


def test_exec_config_errors_are_named(tmp_path):
    user = exec_user(tmp_path, api_version="client.authentication.k8s.io/v2")
    with pytest.raises(KubeconfigError, match=r"user 'u' exec: apiVersion 'client.authentication.k8s.io/v2' not"):
        load(write(tmp_path / "k", {"server": "http://x"}, user))
    user = exec_user(tmp_path)
    user["exec"]["env"] = [{"name": "A"}]
    with pytest.raises(KubeconfigError, match=r"exec env\[0\]: must be \{name: string, value: string\}"):
        load(write(tmp_path / "k", {"server": "http://x"}, user))
    del user["exec"]["command"]
    with pytest.raises(KubeconfigError, match="command is missing"):
        load(write(tmp_path / "k", {"server": "http://x"}, user))


# --- refused by name ----------------------------------------------------------------------------

@pytest.mark.parametrize("cluster, user, message", [
    ({"tls-server-name": "api"}, {}, "cluster 'c': tls-server-name not supported"),
    ({"proxy-url": "http://p:3128"}, {}, "cluster 'c': proxy-url not supported"),
    ({}, {"auth-provider": {"name": "gcp"}}, "user 'u': auth-provider not supported"),
    ({}, {"token": "t", "as": "admin"}, "user 'u': as not supported"),
    ({}, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x", "newThing": 1}},
     "user 'u' exec: newThing not supported"),
])
def test_what_lightkube_ignored_is_refused_by_name(tmp_path, cluster, user, message):
    f = write(tmp_path / "k", {"server": "https://127.0.0.1:6443", **cluster}, user)
    with pytest.raises(KubeconfigError, match=message) as err:
        load(f)
    assert str(err.value).startswith(f"cannot use kubeconfig {f}: ")


def test_extensions_and_namespace_are_accepted(tmp_path):
    ext = [{"name": "cluster_info", "extension": {"provider": "minikube.sigs.k8s.io"}}]
    cfg = load(write(tmp_path / "k", {"server": "https://127.0.0.1:6443", "extensions": ext},
                     {"token": "t", "extensions": ext},
                     context={"cluster": "c", "user": "u", "namespace": "kube-system", "extensions": ext},
                     preferences={}))
    assert cfg.server == "https://127.0.0.1:6443"


# --- contexts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"current": None}, "it has no current context with a cluster and a user; set current-context "
                        "(kubectl config use-context)"),
    ({"current": "prod"}, "current-context: no context named 'prod' in contexts"),
    ({"context": {"cluster": "c2", "user": "u"}}, "context 'ctx': no cluster named 'c2' in clusters"),
    ({"context": {"cluster": "c", "user": "admin"}}, "context 'ctx': no user named 'admin' in users"),
    ({"context": {"cluster": "c"}}, "context 'ctx': names no user; it has no current context"),
])
def test_context_problems_are_named(tmp_path, kwargs, message):
    f = write(tmp_path / "k", {"server": "https://127.0.0.1:6443"}, {"token": "t"}, **kwargs)
    with pytest.raises(KubeconfigError) as err:
        load(f)
    assert str(err.value).startswith(f"cannot use kubeconfig {f}: ") and message in str(err.value)
    assert isinstance(err.value, ReExported), "shared.api.client's KubeconfigError is this one"


def test_a_cluster_needs_a_server_url(tmp_path):
    with pytest.raises(KubeconfigError, match="cluster 'c': server is missing"):
        load(write(tmp_path / "k", {"certificate-authority-data": "eA=="}, {"token": "t"}))
    with pytest.raises(KubeconfigError, match="not an https:// .or http://. URL"):
        load(write(tmp_path / "k", {"server": "127.0.0.1:6443"}, {"token": "t"}))


# --- hostile input ------------------------------------------------------------------------------

@pytest.mark.parametrize("content, message", [
    (b"- a\n- b\n", "not a mapping of clusters, users and contexts (a list)"),
    (b"", "not a mapping of clusters, users and contexts (a NoneType)"),
    (b"{{{ not yaml", "not YAML"),
    (b"\xff\xfe\x00garbage", "not UTF-8 text (byte 0)"),
    (b"#" * (kubeconfig.MAX_SIZE + 1), "larger than 8 MiB"),
    (b"clusters: nope\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]",
     "clusters: not a list"),
    (b"contexts: [just-a-string]\ncurrent-context: x", "contexts[0]: not a mapping"),
    (b"current-context: [x]", "current-context: must be a string"),
])
def test_hostile_files(tmp_path, content, message):
    f = tmp_path / "kubeconfig"
    f.write_bytes(content)
    with pytest.raises(KubeconfigError, match=re.escape(message)) as err:
        load(f)
    assert str(f) in str(err.value)


def test_a_missing_file_a_directory_and_a_fifo(tmp_path):
    with pytest.raises(KubeconfigError, match="no such file"):
        load(tmp_path / "missing")
    with pytest.raises(KubeconfigError, match="not a regular file"):
        load(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(KubeconfigError, match="not a regular file"):
        load(tmp_path / "fifo")  # and not blocked opening it


@pytest.mark.parametrize("cluster, user, message", [
    ({"certificate-authority-data": "!!not base64!!"}, {"token": "t"},
     "cluster 'c': certificate-authority-data is not base64"),
    ({"certificate-authority-data": b64(b"garbage")}, {"token": "t"},
     "cluster 'c': certificate-authority-data: "),
    ({"certificate-authority": "missing.crt"}, {"token": "t"}, "cluster 'c': certificate-authority: No such file"),
    ({}, {"client-certificate-data": "@@@", "client-key-data": "eA=="},
     "user 'u': client-certificate-data is not base64"),
    ({"insecure-skip-tls-verify": "yes"}, {"token": "t"}, "insecure-skip-tls-verify must be true or false"),
])
def test_bad_certificate_fields_are_named(tmp_path, cluster, user, message):
    with pytest.raises(KubeconfigError, match=message):
        load(write(tmp_path / "k", {"server": "https://127.0.0.1:6443", **cluster}, user))


def test_certificate_data_may_be_wrapped_across_lines(pki, tmp_path):
    wrapped = "\n".join(b64(pki.ca)[i:i + 64] for i in range(0, len(b64(pki.ca)), 64))
    cfg = load(write(tmp_path / "k", {"server": "https://127.0.0.1:6443", "certificate-authority-data": wrapped},
                     {"token": "t"}))
    assert any(c["subject"] == ((("commonName", "test-ca"),),) for c in cfg.verify.get_ca_certs())
