"""services/supervisor/unit_waiter.sh, the process each forked unit keeps as its main process:
it ends as the server says the service ended, passes a stop on to the service, and says so when
the connection ends without a word. Run by /bin/sh (dash here) and by bash (/bin/sh elsewhere),
with a `sleep` standing in for the service and a socket pair for the fork server's connection."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from services.supervisor.fork_client import WAITER, WAITER_CONN_FD

SHELLS = ["/bin/sh", "bash"]


@pytest.fixture(params=SHELLS)
def shell(request):
    found = shutil.which(request.param)
    assert found, f"{request.param} is needed to check the waiter under it; install it"
    return found


class Unit:
    """A waiter for a stand-in service, and the server's end of its connection."""

    def __init__(self, shell: str, stop_asked: bool = False) -> None:
        self.service = subprocess.Popen(["sleep", "60"])
        self.server, launcher = socket.socketpair()
        # fd 3 as the launcher leaves it (close_fds would close it: Python's fds are not
        # inheritable, so nothing else is passed on).
        self.waiter = subprocess.Popen([shell, str(WAITER), str(self.service.pid), "1" if stop_asked else "0"],
                                       close_fds=False, preexec_fn=lambda: _as_conn_fd(launcher.fileno()),
                                       stderr=subprocess.PIPE, text=True)
        launcher.close()
        time.sleep(0.3)  # the shell has set its traps

    def say(self, data: bytes) -> None:
        self.server.sendall(data)

    def end(self) -> tuple[int, str]:
        """The waiter's return code (negative: its signal) and what it said."""
        try:
            _, err = self.waiter.communicate(timeout=10)
            return self.waiter.returncode, err
        finally:
            self.server.close()
            if self.service.poll() is None:
                self.service.kill()
            self.service.wait(5)


def _as_conn_fd(fd: int) -> None:
    os.dup2(fd, WAITER_CONN_FD)
    os.set_inheritable(WAITER_CONN_FD, True)


@pytest.mark.parametrize("word, expected", [("exit 0", 0), ("exit 2", 2), ("exit -9", -signal.SIGKILL),
                                            ("exit -15", -signal.SIGTERM)])
def test_the_waiter_ends_as_the_server_says_the_service_ended(shell, word, expected):
    unit = Unit(shell)
    unit.say(word.encode() + b"\n")
    assert unit.end()[0] == expected


def test_a_stop_reaches_the_service_and_the_waiter_ends_with_its_code(shell):
    unit = Unit(shell)
    unit.say(b"ex")  # part of the line before the stop: a signal interrupting the read loses none of it
    time.sleep(0.1)
    unit.waiter.send_signal(signal.SIGTERM)
    assert unit.service.wait(10) == -signal.SIGTERM
    unit.waiter.send_signal(signal.SIGINT)  # a second stop for a service already gone: nothing breaks
    time.sleep(0.1)
    unit.say(b"it 143\n")
    assert unit.end()[0] == 143


@pytest.mark.parametrize("stop_asked, expected", [(False, 1), (True, 0)])
def test_an_end_without_a_word_is_said_and_counts_as_a_failure_unless_a_stop_was_asked(shell, stop_asked, expected):
    unit = Unit(shell, stop_asked)
    unit.server.close()
    code, err = unit.end()
    assert code == expected
    assert f"pid {unit.service.pid} ended and the fork server, which reaps it, did not say how" in err


@pytest.mark.parametrize("word", ["exit", "exit x", "exit 1; touch /tmp/pwned", "exit --1", "pid 4", "exit 1 2"])
def test_a_word_that_is_not_an_exit_code_is_no_word(shell, word, tmp_path):
    unit = Unit(shell)
    unit.say(word.encode() + b"\n")
    code, err = unit.end()
    assert code == 1, err
    assert "did not say how" in err
