"""How many connections the kubelet API holds, and which one goes when it is full.

A client that opens connections and never finishes a request (slowloris) must not lock out the
clients that do. Deadlines alone do not achieve that: the attacker opens a new connection for
each one the deadline ends, and whoever connects while every slot is taken is refused. Refusing
by client address alone does not either: the attacker may share the address of the legitimate
clients (a pod with hostNetwork, any local user: everyone is 127.0.0.1 or the node's IP).

So connections are ranked by what they have proven. One that has not yet passed authentication
(in its TLS handshake, still sending its first request head, or refused by the gate) has proven
nothing and holds its slot only until someone else needs it: when the node or the client's share
is full, the oldest such connection is closed to make room for the new one. A legitimate client
needs its slot for a few milliseconds before its first request is authenticated; a slow one
needs it for seconds, so under attack it is always the attacker's connections that are oldest.
Idle keep-alive connections of authenticated clients go next (HTTP lets a server close those at
any time; the client reconnects). A connection serving an authenticated request (a response,
`logs -f`, exec, port-forward) is never closed to make room: when all are such, a new one is
refused.

A client (one address) may hold at most `per_client` connections, less than the whole, so one
client alone never makes the node close another client's connections: it only competes with
itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Slot:
    """One connection's place. `shed` closes the connection at once."""

    client: str
    shed: Callable[[], None]
    trusted: bool = False    # a request on it passed authentication
    busy: bool = False       # serving an authenticated request or stream
    _limits: ConnectionLimits | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._limits is not None:
            self._limits._release(self)
            self._limits = None


class ConnectionLimits:
    def __init__(self, total: int, per_client: int) -> None:
        if not 0 < per_client < total:
            raise ValueError(f"per-client connection limit {per_client} must be between 0 and the total {total}")
        self.total, self.per_client = total, per_client
        self._slots: dict[Slot, None] = {}      # in the order they were opened
        self._by_client: dict[str, int] = {}
        self.shed_count = 0
        self.refused_count = 0

    def __len__(self) -> int:
        return len(self._slots)

    def held_by(self, client: str) -> int:
        return self._by_client.get(client, 0)

    def admit(self, client: str, shed: Callable[[], None]) -> Slot | None:
        """A slot for a new connection from client, closing another to make room when needed;
        None when there is no room (the caller closes the new connection)."""
        if self.held_by(client) >= self.per_client and not self._make_room(client):
            self.refused_count += 1
            return None
        if len(self._slots) >= self.total and not self._make_room(None):
            self.refused_count += 1
            return None
        slot = Slot(client, shed, _limits=self)
        self._slots[slot] = None
        self._by_client[client] = self.held_by(client) + 1
        return slot

    def _make_room(self, client: str | None) -> bool:
        victim = None
        for slot in self._slots:  # oldest first
            if slot.busy or (client is not None and slot.client != client):
                continue
            if not slot.trusted:
                victim = slot
                break
            if victim is None:
                victim = slot  # the oldest idle authenticated one, if no unproven one is found
        if victim is None:
            return False
        victim.release()
        self.shed_count += 1
        try:
            victim.shed()
        except Exception:  # closing a connection must not stop the new one being served
            log.exception("closing connection of %s failed", victim.client)
        return True

    def _release(self, slot: Slot) -> None:
        del self._slots[slot]
        left = self._by_client[slot.client] - 1
        if left:
            self._by_client[slot.client] = left
        else:
            del self._by_client[slot.client]
