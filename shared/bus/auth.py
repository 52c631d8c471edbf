"""Who may talk on the bus: one password per service, and the subjects each may publish.

Whoever starts the node (`pykubelet up`, an installer) writes one credentials file per service
(0600 in a 0700 directory) and the nats-server config listing those users with their publish
permissions, taken from each event's `publishers`. Anonymous connections are refused, and a
service that publishes a subject it does not own is refused by the server. Every service may
subscribe to every subject of the node: events only say "look again", the store holds the state.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from shared.bus.messages import SUBJECT_PREFIX, Event
from shared.config.settings import ConfigError

BUS_DIR = "bus"  # under the root dir: the credentials files and the server's config


class CredentialsError(ConfigError):
    """Bus credentials that cannot be used; the message says which file and what to do."""


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str


def _event_types(base: type[Event] = Event) -> list[type[Event]]:
    out = []
    for sub in base.__subclasses__():
        out.append(sub)
        out.extend(_event_types(sub))
    return out


def publish_subjects(service: str) -> list[str]:
    """The subjects a service may publish: those of the events that name it a publisher."""
    return sorted({e.subject for e in _event_types() if service in e.publishers})


def credentials_file(directory: Path, service: str) -> Path:
    return directory / f"{service}.json"


def write_credentials(directory: Path, services: list[str]) -> dict[str, Credentials]:
    """A fresh random password per service, each in its own file readable by root only."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    out = {}
    for service in services:
        creds = Credentials(service, secrets.token_urlsafe(32))
        path = credentials_file(directory, service)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            json.dump({"user": creds.user, "password": creds.password}, f)
        out[service] = creds
    return out


def read_credentials(path: Path) -> Credentials:
    """A service's credentials file: a regular file that only its owner can read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise CredentialsError(f"bus credentials {path}: {exc.strerror}; the node's supervisor or installer "
                               "writes them (pykubelet up does)") from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CredentialsError(f"bus credentials {path}: not a regular file")
        if st.st_mode & 0o077:
            raise CredentialsError(f"bus credentials {path} can be read by others (mode "
                                   f"{stat.S_IMODE(st.st_mode):04o}); chmod 600 it")
        try:
            data = json.loads(f.read(4096))
            return Credentials(str(data["user"]), str(data["password"]))
        except (ValueError, KeyError, TypeError):
            raise CredentialsError(f"bus credentials {path}: expected JSON with user and password") from None


def server_config(port: int, users: dict[str, Credentials]) -> str:
    """nats-server config: loopback only, these users, each publishing only what it owns."""
    entries = []
    for service, creds in sorted(users.items()):
        # An empty allow list would mean "anything" to nats-server: deny all instead.
        subjects = publish_subjects(service)
        permissions = {"publish": subjects if subjects else {"deny": [">"]}, "subscribe": [f"{SUBJECT_PREFIX}.>"]}
        entries.append("    {user: %s, password: %s, permissions: %s}" % (
            json.dumps(creds.user), json.dumps(creds.password), json.dumps(permissions)))
    return ("listen: 127.0.0.1:%d\n" % port
            + "authorization {\n  users = [\n" + ",\n".join(entries) + "\n  ]\n}\n")


def write_server_config(path: Path, port: int, users: dict[str, Credentials]) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(server_config(port, users))
    return path
