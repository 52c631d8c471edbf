"""The kernel's OOM kills, read from /dev/kmsg as the kubelet's OOM watcher reads them.

Since Linux 4.19 every OOM kill logs one line naming the memory cgroup whose limit was hit and
the cgroup, name and PID of the process killed:

    oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=...,mems_allowed=0,
    oom_memcg=/kubepods/burstable/pod<uid>/<id>,task_memcg=/kubepods/...,task=hog,pid=4242,uid=0

When the node itself ran out, "global_oom" stands where oom_memcg is: that kill is the root
cgroup's ("/"), as cAdvisor's parser takes it.

Reading starts at the end of the kernel's buffer: kills from before the start are not counted,
as the kubelet's counts start with the kubelet. A process name is the killed program's own
(up to 15 bytes, anything but NUL), so it is cut out from the right and made printable before it
reaches an event.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)

KMSG = "/dev/kmsg"
RECORD_MAX = 8192  # a kmsg read returns one record; the kernel's limit is below this
_TAIL = re.compile(r",pid=(\d+),uid=(\d+)$")


@dataclass(frozen=True)
class OomKill:
    memcg: str         # the cgroup whose memory ran out ("/": the node's)
    victim_memcg: str  # the cgroup of the process killed
    task: str          # its name, printable
    pid: int


def parse_record(record: bytes) -> OomKill | None:
    """The kill a kmsg record tells of, or None for any other record."""
    text = record.decode("utf-8", errors="replace").rstrip("\n")
    _, sep, message = text.partition(";")  # "priority,sequence,usec,flags;message"
    if not sep or not message.startswith("oom-kill:"):
        return None
    tail = _TAIL.search(message)
    head, task_sep, task = message[:tail.start()].rpartition(",task=") if tail else ("", "", "")
    if not tail or not task_sep:
        return None
    fields: dict[str, str] = {}
    for part in head.removeprefix("oom-kill:").split(","):
        key, eq, value = part.partition("=")
        if eq:
            fields.setdefault(key, value)  # the kernel's fields come first, before any name
    memcg, victim = fields.get("oom_memcg"), fields.get("task_memcg")
    if memcg is None or victim is None:
        # A node-wide OOM ("global_oom" instead of oom_memcg=): the node's, whichever process
        # went, as cAdvisor's parser (which the kubelet uses) counts it.
        memcg = victim = "/"
    return OomKill(memcg, victim, "".join(ch if ch.isprintable() else "?" for ch in task)[:64], int(tail[1]))


class KmsgReader:
    """/dev/kmsg from its end, without blocking: each read is one record."""

    def __init__(self, path: str = KMSG) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.lseek(self._fd, 0, os.SEEK_END)

    def fileno(self) -> int:
        return self._fd

    def records(self) -> list[bytes]:
        """Every record logged since the last call."""
        found = []
        while True:
            try:
                found.append(os.read(self._fd, RECORD_MAX))
            except BlockingIOError:
                return found
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before they were read: go on
                    continue
                raise

    def close(self) -> None:
        os.close(self._fd)


async def watch(reader: KmsgReader, on_kill: Callable[[OomKill], None]) -> None:
    """Call on_kill for every OOM kill the reader sees from now on, until cancelled; the reader is
    closed then."""
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    loop.add_reader(reader.fileno(), readable.set)
    try:
        while True:
            await readable.wait()
            readable.clear()
            for record in reader.records():
                kill = parse_record(record)
                if kill is not None:
                    on_kill(kill)
    finally:
        loop.remove_reader(reader.fileno())
        reader.close()
