"""The termination message pod-sync reads back from an exited container: the kubelet's limits,
and nothing a container planted on the host side can block the read or leak a host file."""

from __future__ import annotations

import os
import stat

from cri_api.v1 import api_pb2 as cri

from services.pod_sync.runtime_view import FALLBACK_LOG_BYTES, MAX_MESSAGE_BYTES, termination_message
from shared.runtime.cri import labels as L

PATH = "/dev/termination-log"


def _status(*host_paths: str, exit_code: int = 1, policy: str = "File", log_path: str = "") -> cri.ContainerStatus:
    return cri.ContainerStatus(
        id="c1", state=cri.CONTAINER_EXITED, exit_code=exit_code, log_path=log_path,
        annotations={L.TERMINATION_MESSAGE_PATH: PATH, L.TERMINATION_MESSAGE_POLICY: policy},
        mounts=[cri.Mount(container_path=PATH, host_path=p) for p in host_paths])


def test_the_message_is_the_last_4096_bytes_as_the_kubelet_reads_it(tmp_path):
    msg = tmp_path / "0.termination-log"
    msg.write_bytes(b"x" * 100_000 + b"THE-END\n")
    text = termination_message(_status(str(msg)))
    assert len(text.encode()) == MAX_MESSAGE_BYTES and text.endswith("THE-END\n")
    msg.write_bytes("é".encode() * 2999 + b"!")  # 5999 bytes: the cut falls inside a character
    text = termination_message(_status(str(msg)))
    assert text == "é" * 2047 + "!", "the half character is dropped, not shown as a replacement"


def test_a_volume_mounted_at_the_same_path_is_not_what_is_read(tmp_path):
    # A FIFO planted in an emptyDir and mounted (subPath) at the termination path first; the
    # runtime mounts the termination log over it, and that is what the container wrote.
    fifo, msg = tmp_path / "fifo", tmp_path / "0.termination-log"
    os.mkfifo(fifo)
    msg.write_text("bye\n")
    assert termination_message(_status(str(fifo), str(msg))) == "bye\n"


def test_a_fifo_a_symlink_or_a_device_gives_a_note_not_a_wait_or_a_host_file(tmp_path):
    (tmp_path / "secret").write_text("host secret\n")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    os.mknod(tmp_path / "dev", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    kinds = {"fifo": "a FIFO", "link": "a symbolic link", "dev": "a character device"}
    for name, kind in kinds.items():
        text = termination_message(_status(str(tmp_path / name), policy="FallbackToLogsOnError",
                                           log_path=str(tmp_path / "nolog")))
        assert text == f"Error on reading termination log {PATH}: it is {kind}, not a regular file"
        assert str(tmp_path) not in text


def test_fallback_to_logs_keeps_80_lines_and_2048_bytes(tmp_path):
    log = tmp_path / "0.log"
    log.write_text("".join(f"2026-01-01T00:00:00.{i:09d}Z stdout F line {i} {'y' * 20}\n" for i in range(200)))
    empty = tmp_path / "0.termination-log"
    empty.write_text("")
    text = termination_message(_status(str(empty), policy="FallbackToLogsOnError", log_path=str(log)))
    assert len(text.encode()) <= FALLBACK_LOG_BYTES and text.endswith(f"line 199 {'y' * 20}")
    assert "line 120 " not in text  # beyond the last 80 lines
    short = tmp_path / "short.log"
    short.write_text("".join(f"2026-01-01T00:00:00Z stderr F line {i}\n" for i in range(100)))
    text = termination_message(_status(str(empty), policy="FallbackToLogsOnError", log_path=str(short)))
    assert text.splitlines() == [f"line {i}" for i in range(20, 100)]
    assert termination_message(_status(str(empty), exit_code=0, policy="FallbackToLogsOnError",
                                       log_path=str(short))) == ""


def test_a_log_that_is_not_a_regular_file_is_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "0.log")
    empty = tmp_path / "0.termination-log"
    empty.write_text("")
    text = termination_message(_status(str(empty), policy="FallbackToLogsOnError", log_path=str(tmp_path / "0.log")))
    assert text == "Error on reading termination message from logs: it is a FIFO, not a regular file"
