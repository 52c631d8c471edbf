"""The supervisor counts NATS and the registry as started only when their port's listener is
the process it started."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from services.supervisor.port_owner import listener_inodes, owns_listener


def _listen() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_a_listener_of_our_own_is_ours():
    with _listen() as s:
        port = s.getsockname()[1]
        assert listener_inodes(port)
        assert owns_listener(os.getpid(), port)


def test_a_listener_of_another_process_is_not_ours():
    child = subprocess.Popen([sys.executable, "-c", (
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(30)\n")], stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        assert not owns_listener(os.getpid(), port)
        assert owns_listener(child.pid, port)
    finally:
        child.kill()
        child.wait()


def test_no_listener_and_a_gone_process_are_not_ours():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening
        port = s.getsockname()[1]
        assert not owns_listener(os.getpid(), port)
    assert not owns_listener(2 ** 22 + 1, port)
