"""Telling systemd how a service is doing (sd_notify), for Type=notify units.

A unit started by systemd gets NOTIFY_SOCKET; `systemctl start` returns once the service sends
READY=1, so a node's units are up in order and a failed start is a failed start. Outside systemd
the variable is absent and nothing is sent. The protocol is one datagram on a unix socket; an
address starting with '@' is in the abstract namespace.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Send e.g. "READY=1" or "STOPPING=1"; True when a systemd was there to hear it."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(address)
            s.sendall(state.encode())
        return True
    except OSError as exc:
        log.warning("could not notify systemd (%s): %s", state, exc)
        return False
