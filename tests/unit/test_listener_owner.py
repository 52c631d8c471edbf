"""Who listens on a loopback port (shared/process/listener_owner.py): the admin token goes only to root."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from shared.process.listener_owner import listener_uids, owns_listener, root_listens

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
V6_HEADER = ("  sl  local_address                         remote_address                        st tx_queue rx_queue "
             "tr tm->when retrnsmt   uid  timeout inode\n")


def _proc(tmp_path, tcp: list[str], tcp6: list[str] = ()):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(HEADER + "".join(tcp))
    (tmp_path / "net" / "tcp6").write_text(V6_HEADER + "".join(tcp6))
    return tmp_path


def _v4(addr: str, port: int, state: str, uid: int) -> str:
    return f"   0: {addr}:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000 {uid:5d} 0 4242 1\n"


def _v6(addr: str, port: int, uid: int) -> str:
    return (f"   0: {addr}:{port:04X} 00000000000000000000000000000000:0000 0A 00000000:00000000 "
            f"00:00000000 00000000 {uid:5d} 0 4343 1\n")


def test_a_root_listener_on_loopback_is_root(tmp_path):
    proc = _proc(tmp_path, [_v4("0100007F", 10260, "0A", 0), _v4("0100007F", 10261, "0A", 65534),
                            _v4("0100007F", 10262, "01", 65534)])  # 01: an established connection
    assert root_listens(10260, proc)
    assert not root_listens(10261, proc), "a local user bound the port first"
    assert listener_uids(10262, proc) == [] and not root_listens(10262, proc), "nothing listens"


def test_a_wildcard_or_ipv6_squatter_counts(tmp_path):
    proc = _proc(tmp_path, [_v4("0100007F", 10260, "0A", 0), _v4("00000000", 10260, "0A", 1000)],
                 [_v6("00000000000000000000000000000000", 10261, 1000),
                  _v6("0000000000000000FFFF00000100007F", 10262, 0)])
    assert listener_uids(10260, proc) == [0, 1000] and not root_listens(10260, proc)
    assert not root_listens(10261, proc), "[::] takes 127.0.0.1's connections too"
    assert root_listens(10262, proc)


def test_the_kernels_own_tables():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert listener_uids(port) == [os.geteuid()]
    assert listener_uids(port) == []


# -- which process: NATS and the registry count as started only on a listener of their own --

def _listen() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_a_listener_of_our_own_is_ours():
    with _listen() as s:
        port = s.getsockname()[1]
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
