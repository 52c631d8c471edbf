"""What a unit's launcher becomes once its service is forked (services/supervisor/fork_client.py):
the unit's main process for as long as the service runs.

systemd only follows the processes it started itself: a main process handed over with MAINPID=
is one systemd 252 does not wait for on stop (it sends SIGKILL right after SIGTERM), and whose end
it learns only when the unit's cgroup is empty (a restart after a refused start hung until its
start timeout).
So the process systemd started stays, as this: it passes a SIGTERM or SIGINT on to the service
and, when the service has ended, ends as it did (the fork server, which reaps the service, says
how on the launcher's connection).

It runs as `python -S -I unit_waiter.py PID PIDFD CONNFD`, importing nothing beyond the few
builtin modules below: it is the one process every unit keeps beside its service, and this way it
costs ~4 MiB instead of the launcher's ~12.
"""

import os
import select
import signal
import sys
import time

# Once the service has ended: how long the server's word on how it ended may take.
END_WORD_TIMEOUT = 5.0
PASSED_ON = (signal.SIGTERM, signal.SIGINT)


class Waiter:
    def __init__(self, pid: int, pidfd: int, conn: int) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.conn = conn
        self.stop_asked = False

    def pass_on(self, signum: int, _frame: object = None) -> None:
        """A stop asked of the unit (systemd's SIGTERM, a Ctrl-C) reaches the service."""
        self.stop_asked = True
        try:
            signal.pidfd_send_signal(self.pidfd, signum)
        except ProcessLookupError:
            pass

    def wait(self) -> int:
        """Until the service has ended: its exit code as the server saw it (negative: the signal).
        Without the server's word (it stopped meanwhile) 0 when a stop was asked, else 1."""
        word = b""
        server = True
        ended_at = None
        while True:
            watched = ([self.conn] if server else []) + ([self.pidfd] if ended_at is None else [])
            timeout = None if ended_at is None else max(0.0, ended_at + END_WORD_TIMEOUT - time.monotonic())
            if not watched or timeout == 0.0:
                break
            ready, _, _ = select.select(watched, [], [], timeout)
            if self.pidfd in ready:
                ended_at = time.monotonic()
            if self.conn in ready:
                try:
                    chunk = os.read(self.conn, 64)
                except OSError:
                    chunk = b""
                if not chunk:
                    server = False
                    if ended_at is None:
                        print(f"pykubelet: the fork server closed its end; still watching pid {self.pid}",
                              file=sys.stderr, flush=True)
                    continue
                word += chunk
                line, newline, _ = word.partition(b"\n")
                kind, _, code = line.decode(errors="replace").partition(" ")
                if newline and kind == "exit" and code.lstrip("-").isdigit():
                    return int(code)
        print(f"pykubelet: pid {self.pid} ended and the fork server, which reaps it, did not say how",
              file=sys.stderr, flush=True)
        return 0 if self.stop_asked else 1


def end_as(code: int) -> None:
    """End as the service did: with its exit code, or killed by the same signal."""
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # the two that keep no handler
            signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
        os._exit(128 - code)  # a signal that does not end a process by default
    sys.exit(code)


def main(argv: list[str]) -> None:
    if len(argv) != 3 or not all(a.isdigit() for a in argv):
        print("usage: unit_waiter.py PID PIDFD CONNFD (run by `pykubelet fork`)", file=sys.stderr)
        sys.exit(2)
    waiter = Waiter(*(int(a) for a in argv))
    for sig in PASSED_ON:
        signal.signal(sig, waiter.pass_on)
    # The launcher blocked them across its exec into this: one sent meanwhile is delivered now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
    end_as(waiter.wait())


if __name__ == "__main__":
    main(sys.argv[1:])
