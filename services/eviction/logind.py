"""systemd-logind on the system bus, as the kubelet's node shutdown manager uses it: the longest
delay an inhibitor may hold a shutdown (InhibitDelayMaxUSec), a "delay" inhibitor lock on
shutdown, the PrepareForShutdown signal, and a reload of logind's configuration (SIGHUP) after
the delay was raised in a drop-in.

A delay lock is a file descriptor: logind holds the shutdown (at most InhibitDelayMaxSec) until
every holder closed its descriptor. `systemd-inhibit --list` shows it. The unit tests' fake is
services/eviction/fake_logind.py.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Iterator, Protocol

from jeepney import DBusAddress, DBusErrorResponse, MatchRule, new_method_call
from jeepney.bus_messages import message_bus
from jeepney.fds import FileDescriptor
from jeepney.io.blocking import DBusConnection, open_dbus_connection
from jeepney.wrappers import unwrap_msg

LOGIN_MANAGER = "org.freedesktop.login1.Manager"
LOGIN = DBusAddress("/org/freedesktop/login1", bus_name="org.freedesktop.login1", interface=LOGIN_MANAGER)
LOGIN_PROPERTIES = DBusAddress("/org/freedesktop/login1", bus_name="org.freedesktop.login1",
                               interface="org.freedesktop.DBus.Properties")
SHUTDOWN_SIGNAL = MatchRule(type="signal", interface=LOGIN_MANAGER, member="PrepareForShutdown",
                            path="/org/freedesktop/login1")
CALL_TIMEOUT = 10.0
USEC_PER_SEC = 1_000_000


class LogindError(RuntimeError):
    """logind (or the bus) refused or did not answer; the message says what was asked."""


def logind_pid(answer: object) -> int:
    """The bus daemon's answer as a process to signal: a pid above 1. Anything else (0 is this
    process group, -1 every process, 1 init) is refused rather than signalled."""
    if isinstance(answer, bool) or not isinstance(answer, int) or answer <= 1:
        raise LogindError(f"the system bus named {answer!r} as systemd-logind's process: not a pid to signal")
    return answer


class Inhibitor(Protocol):
    """What the node shutdown manager needs of logind; Logind here, FakeLogind in the unit tests."""

    def inhibit_delay(self) -> float: ...

    def delay_shutdown(self, who: str, why: str) -> FileDescriptor: ...

    def reload(self) -> None: ...

    def shutdown_signals(self, stop: threading.Event, poll: float = 1.0) -> Iterator[bool]: ...


class Logind:
    """Method calls one at a time on one connection (able to receive the lock's descriptor);
    the signals on a connection of their own, read by the thread that iterates them."""

    def __init__(self, bus: str = "SYSTEM") -> None:
        self.bus = bus
        self._conn: DBusConnection | None = None
        self._lock = threading.Lock()

    def _call(self, address: DBusAddress, method: str, signature: str, body: tuple[Any, ...]) -> tuple[Any, ...]:
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = open_dbus_connection(bus=self.bus, enable_fds=True)
                reply = self._conn.send_and_get_reply(new_method_call(address, method, signature, body),
                                                      timeout=CALL_TIMEOUT)
                return tuple(unwrap_msg(reply))
            except DBusErrorResponse as exc:
                raise LogindError(f"{address.bus_name} refused {method}: {exc.name}: "
                                  f"{' '.join(map(str, exc.data))}") from None
            except (OSError, ConnectionError, TimeoutError) as exc:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None  # made again on the next call: the bus may have restarted
                raise LogindError(f"no answer to {method} on the system bus: {exc}") from exc

    def inhibit_delay(self) -> float:
        """InhibitDelayMaxSec as logind runs with it now, in seconds."""
        (variant,) = self._call(LOGIN_PROPERTIES, "Get", "ss", (LOGIN_MANAGER, "InhibitDelayMaxUSec"))
        return int(variant[1]) / USEC_PER_SEC

    def delay_shutdown(self, who: str, why: str) -> FileDescriptor:
        (fd,) = self._call(LOGIN, "Inhibit", "ssss", ("shutdown", who, why, "delay"))
        return fd

    def reload(self) -> None:
        """logind reads its configuration again on SIGHUP. Sent to the process that owns logind's
        bus name (the bus daemon says which), not through systemd's KillUnit: that asks for
        CAP_SYS_ADMIN, which eviction's unit does not have."""
        (answer,) = self._call(message_bus, "GetConnectionUnixProcessID", "s", (LOGIN.bus_name,))
        pid = logind_pid(answer)
        try:
            os.kill(pid, signal.SIGHUP)
        except OSError as exc:
            raise LogindError(f"cannot signal systemd-logind (pid {pid}) to reload: {exc}") from exc

    def shutdown_signals(self, stop: threading.Event, poll: float = 1.0) -> Iterator[bool]:
        """Each PrepareForShutdown's argument (True: a shutdown begins; False: it was cancelled),
        until `stop` is set. Blocks: run it on a thread of its own."""
        try:
            conn = open_dbus_connection(bus=self.bus)
        except (OSError, ConnectionError) as exc:
            raise LogindError(f"cannot connect to the system bus: {exc}") from exc
        with conn:
            conn.send_and_get_reply(message_bus.AddMatch(SHUTDOWN_SIGNAL), timeout=CALL_TIMEOUT)
            with conn.filter(SHUTDOWN_SIGNAL, bufsize=16) as signals:
                while not stop.is_set():
                    try:
                        msg = conn.recv_until_filtered(signals, timeout=poll)
                    except TimeoutError:
                        continue
                    if msg.body and isinstance(msg.body[0], bool):
                        yield msg.body[0]
