"""The kubeconfig a node joins its cluster with: the current context's cluster (server, CA,
insecure-skip-tls-verify) and user (client certificate, token, token file, username/password,
exec plugin), turned into what httpx takes (an SSLContext for verify=, an Auth for auth=).

Our own loader rather than lightkube's: importing that one imports all of lightkube (its sync and
async clients, websockets, models), ~7.5 MiB and 115 modules in every service, for this file's
worth of work. It reads what lightkube's loader read, so no kubeconfig that worked stops working;
a field lightkube silently ignored that would change where or as whom the node connects
(tls-server-name, proxy-url, impersonation, ...) is refused by name instead, as is auth-provider.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import math
import os
import signal
import ssl
import stat
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncGenerator, Callable, Generator, Iterator

import httpx
import yaml

from shared.config.settings import ConfigError
from shared.model import safe_yaml

# A kubeconfig is a few KiB (a merged one with many clusters and embedded certificates a few
# hundred); the cap keeps a wrong path (a disk image, a log) from being read into every service.
MAX_SIZE = 8 << 20
# An exec plugin that hangs (waiting on a network or a prompt nobody sees) must not hold the
# request forever; token plugins (aws eks get-token, gke-gcloud-auth-plugin) answer in seconds.
EXEC_TIMEOUT = 30.0
# A token file is read again at most this often (seconds), and at once when the server answers
# 401: the kubelet rotates projected service account tokens well before they expire, and
# client-go's tokenFileAuth re-reads its file once a minute too. Reading it for every request
# would be a file read per API call for nothing.
TOKEN_FILE_PERIOD = 60.0
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1",
                     "client.authentication.k8s.io/v1alpha1")
NO_CONTEXT = ("it has no current context with a cluster and a user; set current-context "
              "(kubectl config use-context)")

# What each entry may hold. `extensions` is metadata for tools (minikube writes it), no
# connection setting; everything not listed is refused by name.
CONTEXT_FIELDS = {"cluster", "user", "namespace", "extensions"}
CLUSTER_FIELDS = {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify",
                  "extensions"}
USER_FIELDS = {"client-certificate", "client-certificate-data", "client-key", "client-key-data", "token",
               "tokenFile", "username", "password", "exec", "auth-provider", "extensions"}
# installHint is shown when the command is missing; interactiveMode and provideClusterInfo are
# accepted and ignored as lightkube did (kubectl writes them for GKE and EKS): the plugin never
# gets a terminal, and is told so in KUBERNETES_EXEC_INFO.
EXEC_FIELDS = {"apiVersion", "command", "args", "env", "installHint", "interactiveMode", "provideClusterInfo"}


class KubeconfigError(ConfigError):
    """A kubeconfig that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Kubeconfig:
    server: str
    verify: ssl.SSLContext
    auth: httpx.Auth | None  # None: the client certificate alone says who the node is


def load(path: Path, client_cert: Path | None = None) -> Kubeconfig:
    """The current context of the kubeconfig at path, ready for httpx.AsyncClient; with
    client_cert (one PEM file, certificate and key), that pair in place of the user's own
    (the client certificate rotateCertificates renewed)."""
    return _Reader(path, client_cert).load()


def cluster_entry(path: Path) -> dict[str, Any]:
    """The current context's cluster as a kubeconfig that sits elsewhere can name it: server,
    CA (a file's path made absolute, or the data as it is) and insecure-skip-tls-verify. The
    whole kubeconfig is checked as load() checks it."""
    reader = _Reader(path)
    reader.load()
    cwhere, cluster, _, _ = reader.current(reader.document())
    out: dict[str, Any] = {"server": reader.string(cwhere, cluster, "server")}
    ca_file = reader.file(cwhere, cluster, "certificate-authority")
    if reader.string(cwhere, cluster, "certificate-authority-data") is not None:
        out["certificate-authority-data"] = "".join(str(cluster["certificate-authority-data"]).split())
    elif ca_file is not None:
        out["certificate-authority"] = str(ca_file.resolve())
    if cluster.get("insecure-skip-tls-verify"):
        out["insecure-skip-tls-verify"] = True
    return out


def client_certificate(path: Path) -> bytes | None:
    """The current user's client certificate (PEM or DER as given); None for a user without one."""
    reader = _Reader(path)
    reader.load()
    _, _, uwhere, user = reader.current(reader.document())
    data = reader.data(uwhere, user, "client-certificate-data")
    if data is not None:
        return data
    cert_file = reader.file(uwhere, user, "client-certificate")
    return None if cert_file is None else cert_file.read_bytes()


def cluster_ca(path: Path) -> bytes | None:
    """The CA (PEM) the current context's API server is verified with; None when the kubeconfig
    names none (the system's roots). The whole kubeconfig is checked as load() checks it."""
    return _Reader(path).ca_pem()


class _Reader:
    def __init__(self, path: Path, client_cert: Path | None = None) -> None:
        self.path = path
        self.client_cert = client_cert

    def error(self, where: str, problem: str) -> KubeconfigError:
        return KubeconfigError(f"cannot use kubeconfig {self.path}: " + (f"{where}: " if where else "") + problem)

    def load(self) -> Kubeconfig:
        cwhere, cluster, uwhere, user = self.current(self.document())
        server = self.string(cwhere, cluster, "server")
        if server is None:
            raise self.error(cwhere, "server is missing")
        if not server.startswith(("https://", "http://")):
            raise self.error(cwhere, f"server {server!r} is not an https:// (or http://) URL")
        return Kubeconfig(server, self.ssl_context(cwhere, cluster, uwhere, user), self.auth(uwhere, user))

    def ca_pem(self) -> bytes | None:
        self.load()  # the whole kubeconfig must be usable, not only its CA
        cwhere, cluster, _, _ = self.current(self.document())
        data = self.data(cwhere, cluster, "certificate-authority-data")
        if data is None:
            path = self.file(cwhere, cluster, "certificate-authority")
            if path is None:
                return None
            data = path.read_bytes()
        if data.lstrip().startswith(b"-----"):
            return data
        return ssl.DER_cert_to_PEM_cert(data).encode()

    def current(self, doc: dict[str, Any]) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
        """The current context's cluster and user, each with where it is (for errors)."""
        context_name = doc.get("current-context")
        if not context_name:
            raise self.error("", NO_CONTEXT)
        if not isinstance(context_name, str):
            raise self.error("current-context", "must be a string")
        context = self.entry(doc, "contexts", "context", context_name, "current-context")
        where = f"context {context_name!r}"
        self.check_fields(where, context, CONTEXT_FIELDS)
        cluster_name, user_name = context.get("cluster"), context.get("user")
        if not cluster_name or not user_name:
            raise self.error(where, f"names no {'cluster' if not cluster_name else 'user'}; {NO_CONTEXT}")
        if not isinstance(cluster_name, str) or not isinstance(user_name, str):
            raise self.error(where, "cluster and user must be names (strings)")
        cluster = self.entry(doc, "clusters", "cluster", cluster_name, where)
        user = self.entry(doc, "users", "user", user_name, where)
        cwhere, uwhere = f"cluster {cluster_name!r}", f"user {user_name!r}"
        self.check_fields(cwhere, cluster, CLUSTER_FIELDS)
        self.check_fields(uwhere, user, USER_FIELDS)
        return cwhere, cluster, uwhere, user

    def document(self) -> dict[str, Any]:
        try:
            mode = self.path.stat().st_mode
        except FileNotFoundError:
            raise self.error("", "no such file") from None
        except OSError as exc:
            raise self.error("", f"cannot read it: {exc.strerror or exc}") from None
        # Not open() on anything but a regular file: a FIFO would block the service's start.
        if not stat.S_ISREG(mode):
            raise self.error("", "not a regular file")
        try:
            with self.path.open("rb") as f:
                raw = f.read(MAX_SIZE + 1)
        except OSError as exc:
            raise self.error("", f"cannot read it: {exc.strerror or exc}") from None
        if len(raw) > MAX_SIZE:
            raise self.error("", f"larger than {MAX_SIZE >> 20} MiB, not a kubeconfig")
        try:
            text = raw.decode()
        except UnicodeDecodeError as exc:
            raise self.error("", f"not UTF-8 text (byte {exc.start})") from None
        try:
            doc = safe_yaml.load(text)
        except yaml.YAMLError as exc:
            raise self.error("", f"not YAML: {exc}") from None
        if not isinstance(doc, dict):
            raise self.error("", f"not a mapping of clusters, users and contexts (a {type(doc).__name__})")
        return doc

    def entry(self, doc: dict[str, Any], section: str, key: str, name: str, named_by: str) -> dict[str, Any]:
        """The `key` mapping of the entry called name in doc[section] (the last of that name,
        as kubectl and lightkube read duplicates)."""
        entries = doc.get(section) or []
        if not isinstance(entries, list):
            raise self.error(section, "not a list")
        found: dict[str, Any] | None = None
        for i, e in enumerate(entries):
            if not isinstance(e, dict):
                raise self.error(f"{section}[{i}]", f"not a mapping with a name and a {key}")
            if e.get("name") == name:
                found = e
        if found is None:
            raise self.error(named_by, f"no {key} named {name!r} in {section}")
        body = found.get(key)
        if body is None:  # `user:` with nothing under it: a user without credentials
            return {}
        if not isinstance(body, dict):
            raise self.error(f"{key} {name!r}", f"its {key} is not a mapping")
        return body

    def check_fields(self, where: str, body: dict[str, Any], known: set[str]) -> None:
        unknown = sorted(str(k) for k in body if k not in known)
        if unknown:
            raise self.error(where, f"{', '.join(unknown)} not supported")

    def string(self, where: str, body: dict[str, Any], field: str) -> str | None:
        """A string field; None when absent or empty (Go's zero value: kubectl reads "" as unset)."""
        value = body.get(field)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self.error(where, f"{field} must be a string (quote it)")
        return value

    def file(self, where: str, body: dict[str, Any], field: str) -> Path | None:
        """A path field; a relative path is relative to the kubeconfig's directory, as kubectl reads it."""
        value = self.string(where, body, field)
        return None if value is None else self.path.parent / value

    def data(self, where: str, body: dict[str, Any], field: str) -> bytes | None:
        value = self.string(where, body, field)
        if value is None:
            return None
        try:  # line breaks are allowed inside, as Go's decoder skips them
            decoded = base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError):
            raise self.error(where, f"{field} is not base64") from None
        if not decoded:
            raise self.error(where, f"{field} is empty")
        return decoded

    def ssl_context(self, cwhere: str, cluster: dict[str, Any], uwhere: str, user: dict[str, Any]) -> ssl.SSLContext:
        insecure = cluster.get("insecure-skip-tls-verify") or False
        if not isinstance(insecure, bool):
            raise self.error(cwhere, "insecure-skip-tls-verify must be true or false")
        # The data wins over the file when both are set, as in client-go. With a CA the server
        # is verified even if insecure-skip-tls-verify is set too (lightkube did the same;
        # kubectl refuses the pair): the safer reading.
        ca_data = self.data(cwhere, cluster, "certificate-authority-data")
        ca_file = self.file(cwhere, cluster, "certificate-authority")
        field = "certificate-authority-data" if ca_data is not None else "certificate-authority"
        try:
            if ca_data is not None:
                # PEM is text, DER binary: the ssl module tells them apart by the type.
                ctx = ssl.create_default_context(
                    cadata=ca_data.decode("ascii") if ca_data.lstrip().startswith(b"-----") else ca_data)
            elif ca_file is not None:
                ctx = ssl.create_default_context(cafile=str(ca_file))
            else:  # as lightkube: certifi's bundle (or SSL_CERT_FILE / SSL_CERT_DIR), or none at all
                ctx = httpx.create_ssl_context(verify=not insecure)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise self.error(cwhere, f"{field}: {getattr(exc, 'strerror', None) or exc}") from None
        cert = self.data(uwhere, user, "client-certificate-data") or self.file(uwhere, user, "client-certificate")
        key = self.data(uwhere, user, "client-key-data") or self.file(uwhere, user, "client-key")
        if self.client_cert is not None:
            cert = key = self.client_cert
        if (cert is None) != (key is None):
            raise self.error(uwhere, "client-certificate needs client-key" if key is None else
                             "client-key needs client-certificate")
        if cert is not None and key is not None:
            with _as_file(cert) as cert_file, _as_file(key) as key_file:
                try:
                    ctx.load_cert_chain(cert_file, key_file, password=self.no_password(uwhere))
                except (OSError, ValueError) as exc:
                    if isinstance(exc, KubeconfigError):
                        raise
                    raise self.error(uwhere, "cannot load client-certificate and client-key: "
                                             f"{getattr(exc, 'strerror', None) or exc}") from None
        return ctx

    def no_password(self, uwhere: str) -> Callable[[], bytes]:
        # Without a callback OpenSSL would prompt on the terminal for an encrypted key: a
        # service waiting on nobody. lightkube had no way to pass a password either.
        def refuse() -> bytes:
            raise self.error(uwhere, "client-key is encrypted; a kubeconfig key must not be")
        return refuse

    def auth(self, uwhere: str, user: dict[str, Any]) -> httpx.Auth | None:
        if user.get("auth-provider") is not None:
            raise self.error(uwhere, "auth-provider not supported (use an exec plugin, as kubectl now does)")
        # The order lightkube chose when several are set: token file, token, exec, basic.
        token_file = self.file(uwhere, user, "tokenFile")
        if token_file is not None:
            return TokenFileAuth(self, uwhere, token_file)
        token = self.string(uwhere, user, "token")
        if token is not None:
            return BearerAuth(token)
        plugin = user.get("exec")
        if plugin is not None:
            return self.exec_auth(f"{uwhere} exec", plugin)
        username, password = self.string(uwhere, user, "username"), self.string(uwhere, user, "password")
        if username is not None and password is not None:
            return httpx.BasicAuth(username, password)
        if username is not None or password is not None:
            raise self.error(uwhere, "username needs password" if password is None else "password needs username")
        return None

    def exec_auth(self, where: str, plugin: object) -> ExecAuth:
        if not isinstance(plugin, dict):
            raise self.error(where, "not a mapping")
        self.check_fields(where, plugin, EXEC_FIELDS)
        api_version = self.string(where, plugin, "apiVersion")
        if api_version not in EXEC_API_VERSIONS:
            raise self.error(where, f"apiVersion {api_version!r} not supported (one of {', '.join(EXEC_API_VERSIONS)})")
        command = self.string(where, plugin, "command")
        if command is None:
            raise self.error(where, "command is missing")
        if os.sep in command and not os.path.isabs(command):  # ./plugin: next to the kubeconfig, as kubectl runs it
            command = str(self.path.parent / command)
        args = plugin.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise self.error(where, "args must be a list of strings")
        env: dict[str, str] = {}
        for i, var in enumerate(plugin.get("env") or []):
            if not (isinstance(var, dict) and isinstance(var.get("name"), str) and isinstance(var.get("value"), str)):
                raise self.error(f"{where} env[{i}]", "must be {name: string, value: string}")
            env[var["name"]] = var["value"]
        hint = plugin.get("installHint")
        return ExecAuth(self, where, api_version, [command, *args], env, hint if isinstance(hint, str) else "")


@contextlib.contextmanager
def _as_file(material: bytes | Path) -> Iterator[str]:
    """A path the ssl module can load: the file itself, or the embedded data in a private
    temporary file (mode 0600, mkstemp's) that is gone again as soon as it has been read."""
    if isinstance(material, Path):
        yield str(material)
        return
    fd, name = tempfile.mkstemp(prefix="pykubelet-kubeconfig-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(material)
        yield name
    finally:
        os.unlink(name)


class BearerAuth(httpx.Auth):
    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._header
        yield request


class _RefreshedTokenAuth(httpx.Auth):
    """A bearer token fetched when needed, kept until valid_until (monotonic) and fetched again
    when the server answers 401 (rotated or revoked meanwhile); the request is then sent once
    more with the new token. Async clients only: the fetch may run a process."""

    def __init__(self, reader: _Reader, where: str) -> None:
        self._reader, self._where = reader, where
        self._token: str | None = None
        self._valid_until = 0.0
        # One fetch at a time: the services send requests concurrently, one exec run serves all.
        self._lock = asyncio.Lock()

    async def fetch(self) -> tuple[str, float]:
        raise NotImplementedError

    def error(self, problem: str) -> KubeconfigError:
        return self._reader.error(self._where, problem)

    async def _current(self, rejected: str | None = None) -> str:
        async with self._lock:
            # A token another request already replaced since this one was rejected is used as is.
            if self._token is None or self._token == rejected or time.monotonic() >= self._valid_until:
                self._token, self._valid_until = await self.fetch()
            return self._token

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self._current()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            fresh = await self._current(rejected=token)
            if fresh != token:  # the same token again would only be refused again
                request.headers["Authorization"] = f"Bearer {fresh}"
                yield request

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise TypeError("kubeconfig token file and exec credentials work with httpx.AsyncClient only")


class TokenFileAuth(_RefreshedTokenAuth):
    def __init__(self, reader: _Reader, where: str, path: Path) -> None:
        super().__init__(reader, f"{where} tokenFile {path}")
        self._path = path

    async def fetch(self) -> tuple[str, float]:
        try:
            with self._path.open("rb") as f:
                token = f.read(MAX_SIZE).decode().strip()
        except OSError as exc:
            raise self.error(f"cannot read it: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise self.error("not a token (not UTF-8)") from None
        if not token:
            raise self.error("it is empty")
        return token, time.monotonic() + TOKEN_FILE_PERIOD


class ExecAuth(_RefreshedTokenAuth):
    """The token an exec credential plugin prints (an ExecCredential), kept until its
    status.expirationTimestamp (forever without one); the plugin runs again on a 401."""

    def __init__(self, reader: _Reader, where: str, api_version: str, argv: list[str], env: dict[str, str],
                 install_hint: str) -> None:
        super().__init__(reader, where)
        self._argv, self._env, self._hint = argv, env, install_hint
        # What client-go passes: plugins built on it read the request from here, and learn
        # that nobody can answer a prompt.
        self._info = json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}})

    async def fetch(self) -> tuple[str, float]:
        command = self._argv[0]
        try:
            # Its own session, so a timeout kills whatever it started too; stdin closed: no prompts.
            proc = await asyncio.create_subprocess_exec(
                *self._argv, env={**os.environ, **self._env, "KUBERNETES_EXEC_INFO": self._info},
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)
        except OSError as exc:
            hint = f" ({self._hint})" if self._hint else ""
            raise self.error(f"cannot run {command}: {exc.strerror or exc}{hint}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), EXEC_TIMEOUT)
        except BaseException as exc:  # timed out, or the request was cancelled: the plugin goes too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            if isinstance(exc, asyncio.TimeoutError):
                raise self.error(f"{command} did not answer within {EXEC_TIMEOUT:g} s") from None
            raise
        if proc.returncode != 0:
            stderr = err.decode(errors="replace").strip()[-500:]
            raise self.error(f"{command} exited with {proc.returncode}" + (f": {stderr}" if stderr else ""))
        # Its output is never quoted in an error: it holds a credential.
        try:
            credential = json.loads(out)
        except ValueError:
            raise self.error(f"{command} printed no ExecCredential JSON ({len(out)} bytes)") from None
        status = credential.get("status") if isinstance(credential, dict) else None
        token = status.get("token") if isinstance(status, dict) else None
        if not isinstance(status, dict) or not isinstance(token, str) or not token:
            raise self.error(f"{command} printed an ExecCredential without status.token (a client "
                             "certificate from an exec plugin is not supported)")
        return token, self._valid_until_of(command, status.get("expirationTimestamp"))

    def _valid_until_of(self, command: str, expiry: object) -> float:
        if expiry is None:
            return math.inf
        try:
            when = datetime.fromisoformat(expiry) if isinstance(expiry, str) else None
        except ValueError:
            when = None
        if when is None or when.tzinfo is None:
            raise self.error(f"{command} printed status.expirationTimestamp {str(expiry)[:40]!r}, not an "
                             "RFC 3339 time")
        # Up to the instant it expires: a request that races the expiry gets a 401 and a fresh token.
        return time.monotonic() + (when - datetime.now(timezone.utc)).total_seconds()
