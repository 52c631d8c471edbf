"""sd_notify: what a Type=notify unit's service sends, on a path or an abstract socket."""

from __future__ import annotations

import os
import socket

import pytest

from shared.process.sd_notify import notify


@pytest.mark.parametrize("abstract", [False, True])
def test_ready_reaches_the_notify_socket(tmp_path, monkeypatch, abstract):
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        if abstract:
            name = f"pykubelet-test-{os.getpid()}"
            listener.bind("\0" + name)
            monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        else:
            listener.bind(str(tmp_path / "notify"))
            monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
        listener.settimeout(2)
        assert notify("READY=1")
        assert listener.recv(100) == b"READY=1"


def test_outside_systemd_nothing_is_sent(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False


def test_a_vanished_socket_is_logged_not_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    assert notify("READY=1") is False
