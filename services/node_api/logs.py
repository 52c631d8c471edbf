"""Container logs behind GET /containerLogs/{namespace}/{pod}/{container}, as the kubelet serves them.

Query parameters decode and validate as the kubelet's getContainerLogs does (v1.PodLogOptions), and
the CRI log file (`<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <content>` per line) is read as
pkg/kubelet/kuberuntime/logs does: both streams in file order, one timestamp prefix per record
(partial records included), tail counted in file lines, limitBytes cutting the output.
Unlike the kubelet, a follower survives log rotation: it finishes the renamed file, then reads the
new one from its start.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import BinaryIO

from shared.host.safe_paths import open_regular

log = logging.getLogger(__name__)

READ_SIZE = 64 * 1024

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_INT64 = range(-(2**63), 2**63)
_INT_RE = re.compile(r"[+-]?[0-9]+")
_RFC3339_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?(Z|[+-][0-9]{2}:[0-9]{2})")

# One CRI record. Tag "P" or "P:<more tags>" is a partial line: its newline is not content.
# Any other tag is a full line, whose content keeps its newline. Groups: (timestamp,) partial
# content, full content (one of the two is empty).
_TS = rb"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[+-][0-9]{2}:[0-9]{2})"
_BODY = rb" (?:stdout|stderr) (?:P(?::[^ \n]*)? (.*)\n|[^ \n]* (.*\n))"
_CONTENT = re.compile(rb"^" + _TS + _BODY, re.MULTILINE)
_RECORD = re.compile(rb"^(" + _TS + rb")" + _BODY, re.MULTILINE)
# The file's last line when it has no newline yet (the kubelet still writes it when not following).
_LAST_RECORD = re.compile(rb"(" + _TS + rb") (?:stdout|stderr) (?:P(?::[^ \n]*)? (.*)|[^ \n]* (.*))")

Record = tuple[bytes, ...]  # (partial, full), or (timestamp, partial, full) for _RECORD


class LogQueryError(ValueError):
    """A bad containerLogs query parameter; status_code is the kubelet's (400 undecodable, 422 invalid)."""

    def __init__(self, param: str, message: str, status_code: int = 422) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.status_code = status_code


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    since_time: datetime | None = None
    tail_lines: int | None = None
    limit_bytes: int | None = None


def _bool(query: Mapping[str, Sequence[str]], name: str) -> bool:
    # The apiserver's query conversion: only absence, "0" and "false" (any case) are false.
    values = query.get(name)
    return values is not None and len(values) > 0 and values[0] != "0" and values[0].lower() != "false"


def _int(query: Mapping[str, Sequence[str]], name: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    raw = values[0]
    if not _INT_RE.fullmatch(raw) or int(raw) not in _INT64:
        raise LogQueryError(name, f"must be an integer, got {raw!r}", 400)
    return int(raw)


def _time(query: Mapping[str, Sequence[str]], name: str) -> tuple[bool, datetime | None]:
    """(given, time); an empty value or "null" is given but means no time, as in metav1.Time."""
    values = query.get(name)
    if not values:
        return False, None
    raw = values[0]
    if raw in ("", "null"):
        return True, None
    try:
        return True, _parse_rfc3339(raw)
    except ValueError:
        raise LogQueryError(name, f"must be an RFC3339 time such as 2006-01-02T15:04:05Z, got {raw!r}",
                            400) from None


def _parse_rfc3339(raw: str) -> datetime:
    m = _RFC3339_RE.fullmatch(raw)
    if m is None:
        raise ValueError(raw)
    y, mo, d, h, mi, s, frac, zone = m.groups()
    micros = int((frac or "0").ljust(6, "0")[:6])
    return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micros, tzinfo=_zone(zone.encode()))


def parse_log_options(query: Mapping[str, Sequence[str]]) -> LogOptions:
    """Decode and validate a containerLogs query as the kubelet does.

    `query` maps each parameter to its values, blank values kept (a bare `?follow` is true), e.g.
    `urllib.parse.parse_qs(qs, keep_blank_values=True)`. Only the first value of a parameter counts.
    """
    query = dict(query)
    # The kubelet still honours the old "tail" parameter; "all" means no tail.
    tail = query.get("tail")
    if tail and tail[0]:
        if tail[0] == "all":
            query.pop("tailLines", None)
        else:
            query["tailLines"] = [tail[0]]
    # Every parameter decodes (400) before any is validated (422), as in the kubelet.
    tail_lines = _int(query, "tailLines")
    limit_bytes = _int(query, "limitBytes")
    since_seconds = _int(query, "sinceSeconds")
    since_time_given, since_time = _time(query, "sinceTime")
    if tail_lines is not None and tail_lines < 0:
        raise LogQueryError("tailLines", f"must be greater than or equal to 0, got {tail_lines}")
    if limit_bytes is not None and limit_bytes < 1:
        raise LogQueryError("limitBytes", f"must be greater than 0, got {limit_bytes}")
    if since_seconds is not None and since_time_given:
        raise LogQueryError("sinceTime", "at most one of `sinceTime` or `sinceSeconds` may be specified")
    if since_seconds is not None and since_seconds < 1:
        raise LogQueryError("sinceSeconds", f"must be greater than 0, got {since_seconds}")
    return LogOptions(follow=_bool(query, "follow"), previous=_bool(query, "previous"),
                      timestamps=_bool(query, "timestamps"), since_seconds=since_seconds,
                      since_time=since_time, tail_lines=tail_lines, limit_bytes=limit_bytes)


def _zone(zone: bytes) -> timezone:
    if zone == b"Z":
        return timezone.utc
    sign = -1 if zone[:1] == b"-" else 1
    return timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))


def _split_ts(ts: bytes) -> tuple[bytes, bytes, bytes]:
    """Date and time to the second, fraction digits, zone of a timestamp _TS matched."""
    if ts[-1:] == b"Z":
        head, zone = ts[:-1], b"Z"
    else:
        head, zone = ts[:-6], ts[-6:]
    return head[:19], head[20:], zone


def _nanos(frac: bytes) -> int:
    return int((frac + b"000000000")[:9]) if frac else 0


@functools.lru_cache(maxsize=4096)
def _epoch_seconds(second: bytes, zone: bytes) -> int | None:
    try:
        dt = datetime(int(second[0:4]), int(second[5:7]), int(second[8:10]), int(second[11:13]),
                      int(second[14:16]), int(second[17:19]), tzinfo=_zone(zone))
    except ValueError:
        return None  # shaped like a time but not one (month 13): the kubelet can't parse it either
    return int(dt.timestamp())


def _epoch_ns(ts: bytes) -> int | None:
    second, frac, zone = _split_ts(ts)
    seconds = _epoch_seconds(second, zone)
    return None if seconds is None else seconds * 1_000_000_000 + _nanos(frac)


def _fixed_ts(ts: bytes) -> bytes:
    """The kubelet's output format, RFC3339 with exactly nine fraction digits, keeping the zone."""
    if len(ts) == 30 and ts[-1:] == b"Z":
        return ts  # already fixed, as CRI runtimes write it unless the fraction ends in zeros
    second, frac, zone = _split_ts(ts)
    if zone[1:] == b"00:00":
        zone = b"Z"
    return b"%s.%s%s" % (second, (frac + b"000000000")[:9], zone)


def _tail_start(fd: int, lines: int) -> int:
    """Offset where the last `lines` newline-terminated lines start, read backwards from the end.

    An unterminated last line is not counted (but sits after the offset), like the kubelet's tail.
    """
    pos = os.fstat(fd).st_size
    seen = 0
    while pos > 0:
        start = max(0, pos - READ_SIZE)
        block = os.pread(fd, pos - start, start)
        n = block.count(b"\n")
        if seen + n <= lines:
            seen += n
            pos = start
            continue
        end = len(block)
        while True:
            end = block.rfind(b"\n", 0, end)
            seen += 1
            if seen > lines:
                return start + end + 1
    return 0


def _open(path: Path) -> BinaryIO:
    # The runtime's file, with what a container printed: opened as any file a pod fills, never
    # following a link or waiting on a FIFO (shared/host/safe_paths.py).
    return os.fdopen(open_regular(path), "rb", buffering=0)


def read_log(path: Path, opts: LogOptions, still_running: Callable[[], Awaitable[bool]], *,
             poll_interval: float = 0.2) -> LogStream:
    """Open a container's CRI log file now (FileNotFoundError before any output) and stream it.

    `still_running` is asked when a follower is at the end of the file; once it says no, the
    file is read to its end once more and the stream ends.
    """
    return LogStream(path, _open(path), opts, still_running, poll_interval)


class LogStream(AsyncIterator[bytes]):
    """The output of one log read, in chunks as written to the HTTP response. Ends the read on aclose()."""

    def __init__(self, path: Path, file: BinaryIO, opts: LogOptions,
                 still_running: Callable[[], Awaitable[bool]], poll_interval: float) -> None:
        self._path = path
        self._file = file
        self._opts = opts
        self._still_running = still_running
        self._poll_interval = poll_interval
        self._since = _Since.of(opts)
        self._plain = self._since is None and not opts.timestamps
        self._pattern = _CONTENT if self._plain else _RECORD
        self._pending = b""  # the read's start of a line not ended yet
        self._rotation_seen = False  # the path names a new file; the old one is drained first
        self._ending = False  # the container stopped: what it wrote is read, then the read ends
        self._chunks = self._run()

    def __anext__(self) -> Awaitable[bytes]:
        return self._chunks.__anext__()

    async def aclose(self) -> None:
        try:
            await self._chunks.aclose()
        finally:
            self._file.close()

    def _render(self, records: list[Record]) -> bytes:
        if self._plain:
            return b"".join(map(b"".join, records))
        if self._since is not None:
            keep = self._since.keeps
            records = [r for r in records if keep(r[0])]
        if self._opts.timestamps:
            return b"".join([b"%s %s%s" % (_fixed_ts(ts), partial, full) for ts, partial, full in records])
        return b"".join([partial + full for _, partial, full in records])

    def _rotated(self) -> bool:
        """Whether the path now names another file than the one being read."""
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return False  # between the rename and the runtime reopening its log
        own = os.fstat(self._file.fileno())
        return (st.st_ino, st.st_dev) != (own.st_ino, own.st_dev)

    async def _run(self) -> AsyncGenerator[bytes, None]:
        """The read: from tail's start, record batches cut to tail (without follow) and
        limitBytes, until the file ends or, following, the container has stopped."""
        opts = self._opts
        try:
            if opts.tail_lines is not None:
                start = await asyncio.to_thread(_tail_start, self._file.fileno(), opts.tail_lines)
                self._file.seek(start)
            # Without follow, tail also caps the records written (the kubelet's "limited mode").
            records_left = None if opts.follow else opts.tail_lines
            bytes_left = opts.limit_bytes
            if records_left == 0:
                return
            while (batch := await self._next()) is not None:
                records, at_end = batch
                if records_left is not None:
                    records = records[:records_left]
                    records_left -= len(records)
                out = self._render(records)
                if bytes_left is not None:
                    if len(out) >= bytes_left:
                        yield out[:bytes_left]
                        return
                    bytes_left -= len(out)
                if out:
                    yield out
                if at_end or records_left == 0:
                    return
                await asyncio.sleep(0)  # a big file must not hold the event loop until it is done
        finally:
            self._file.close()

    async def _next(self) -> tuple[list[Record], bool] | None:
        """The next complete records and whether the read ends after them; None when it ends now."""
        while True:
            data = self._file.read(READ_SIZE)
            if data:
                records = self._complete_records(data)
                if records is not None:
                    return records, False
            elif not self._opts.follow:
                return self._last_record(), True
            elif not await self._wait_for_more():
                return None

    def _complete_records(self, data: bytes) -> list[Record] | None:
        """The records of the complete lines read so far (None: no line ended yet); the rest waits."""
        buf = self._pending + data if self._pending else data
        end = buf.rfind(b"\n") + 1
        self._pending = buf[end:]
        if not end:
            return None
        records: list[Record] = self._pattern.findall(buf, 0, end)
        if log.isEnabledFor(logging.DEBUG) and len(records) != buf.count(b"\n", 0, end):
            log.debug("%s: skipped %d lines not in CRI log format", self._path,
                      buf.count(b"\n", 0, end) - len(records))
        return records

    def _last_record(self) -> list[Record]:
        """An unterminated last line, written as it is when the read ends there."""
        m = _LAST_RECORD.fullmatch(self._pending)
        return [m.groups(b"")[1:] if self._plain else m.groups(b"")] if m else []

    async def _wait_for_more(self) -> bool:
        """At the end of the file while following: False once the read should end. A rotated
        log is drained, then the new file opened; a stopped container's last writes are read."""
        if self._rotation_seen:
            # The old file is drained; an unterminated line in it never gets its end.
            self._rotation_seen, self._pending = False, b""
            try:
                new = _open(self._path)
            except FileNotFoundError:
                return True
            self._file.close()
            self._file = new
        elif self._rotated():
            self._rotation_seen = True  # writes may have landed after our last read: drain once more
        elif self._ending:
            return False
        elif not await self._still_running():
            self._ending = True  # read what the container wrote before it stopped, then end
        else:
            await asyncio.sleep(self._poll_interval)
        return True


@dataclass(frozen=True)
class _Since:
    """The cut-off of sinceSeconds/sinceTime: older records are not written."""

    ns: int  # since the epoch
    fixed: bytes | None  # the cut-off as a fixed-format UTC timestamp, None if it has none

    @classmethod
    def of(cls, opts: LogOptions) -> _Since | None:
        cutoffs = []
        if opts.since_seconds is not None:
            cutoffs.append(time.time_ns() - opts.since_seconds * 1_000_000_000)
        if opts.since_time is not None:
            t = opts.since_time if opts.since_time.tzinfo else opts.since_time.replace(tzinfo=timezone.utc)
            cutoffs.append((t - _EPOCH) // timedelta(microseconds=1) * 1000)
        if not cutoffs:
            return None
        ns = max(cutoffs)  # the later of the two, as the kubelet's NewLogOptions picks
        seconds, frac = divmod(ns, 1_000_000_000)
        try:
            second = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        except (OverflowError, ValueError, OSError):
            return cls(ns, None)
        if len(second) != 19:  # a year before 1000 has no four-digit form here
            return cls(ns, None)
        return cls(ns, f"{second}.{frac:09d}Z".encode())

    def keeps(self, ts: bytes) -> bool:
        # Runtimes write UTC with nine digits; such stamps compare as strings, others need parsing.
        if self.fixed is not None and len(ts) == 30 and ts[-1:] == b"Z":
            return ts >= self.fixed
        ns = _epoch_ns(ts)
        return ns is not None and ns >= self.ns
