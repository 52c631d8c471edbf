"""Node log query (enableSystemLogQuery): `GET /logs/?query=SERVICE` answers with a service's
logs from the journal (journalctl --unit), or from /var/log/SERVICE, /var/log/SERVICE.log or
/var/log/SERVICE/SERVICE.log where the journal has no such unit; `?query=DIR/FILE` with a
slash names a file below /var/log. sinceTime, untilTime, tailLines, pattern and boot narrow a
journal query. As the kubelet 1.37 answers it (pkg/kubelet/kubelet_server_journal.go): the
same parameters, checks and messages (apimachinery's field errors), 400 for a parameter that
does not parse, 406 for a query that is not allowed, the same journalctl command line, a
gzip answer when asked for exactly "gzip", and 30 seconds for the whole answer.

Everything here comes from the request, and journalctl runs as root: a service name is only
letters, digits and -_.:@ (the kubelet's check) and goes to journalctl as one `--unit=` argument,
a pattern as one `--grep=` argument; no shell is involved. A file is opened only below /var/log
and only when it is a regular file (a FIFO would hang the answer)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import posixpath
import re
import stat
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from shared.model.go_text import go_json, go_quote

log = logging.getLogger(__name__)

MAX_TAIL_LINES = 100_000
MAX_SERVICE_LENGTH = 256
MAX_SERVICES = 4
DEADLINE = 30.0  # seconds for the whole answer, as the kubelet's context deadline
CHUNK = 64 * 1024
CONTENT_TYPE = "text/plain;charset=UTF-8"
_UNSAFE_SERVICE_CHARACTERS = re.compile(r"[^a-zA-Z\-_.:0-9@]+")
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})\Z")
_GO_INT = re.compile(r"[+-]?[0-9]+\Z")
_INT64 = 2**63


class QueryError(Exception):
    """A query the kubelet refuses; `status` is 400 (it does not parse) or 406 (not allowed),
    the message is apimachinery's aggregate of field errors."""

    def __init__(self, status: int, errors: list[str]) -> None:
        super().__init__(aggregate(errors))
        self.status = status


def aggregate(errors: list[str]) -> str:
    """apimachinery's errors.NewAggregate(...).Error(): one error as is, more in brackets, each
    message once."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _value(value: Any) -> str:
    """How a field error shows its bad value: a string quoted, a number as is, the rest as JSON."""
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, (bool, int, float)):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return go_json(value)


def invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_value(value)}: {detail}"


@dataclass(frozen=True)
class GoTime:
    """An RFC 3339 time as Go's time.Parse keeps it: the instant and the offset it was written in."""

    at: datetime  # aware, in the offset it was written with
    nanos: int    # the fraction of the second, to the nanosecond

    def journal(self) -> str:
        """Go's Format("2006-1-2 15:4:5") of it: no zero padding, in its own offset."""
        t = self.at
        return f"{t.year}-{t.month}-{t.day} {t.hour}:{t.minute}:{t.second}"

    def json(self) -> str:
        """Go's time.MarshalJSON: RFC 3339 with the fraction's trailing zeros dropped."""
        fraction = f".{self.nanos:09d}".rstrip("0") if self.nanos else ""
        offset = self.at.utcoffset() or timedelta(0)
        if not offset:
            zone = "Z"
        else:
            minutes = int(offset.total_seconds()) // 60
            zone = f"{'+' if minutes > 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
        return self.at.strftime("%Y-%m-%dT%H:%M:%S") + fraction + zone

    def key(self) -> tuple[datetime, int]:
        return self.at, self.nanos  # whole seconds in `at`, the fraction in `nanos`


def parse_rfc3339(text: str) -> GoTime | None:
    m = _RFC3339.match(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    digits, zone = m.group(7) or "", m.group(8)
    if zone == "Z":
        tz = timezone.utc
    else:
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            return None
        tz = timezone((1 if zone[0] == "+" else -1) * timedelta(hours=hours, minutes=minutes))
    try:
        at = datetime(year, month, day, hour, minute, second, tzinfo=tz)
    except ValueError:
        return None
    return GoTime(at, int((digits + "000000000")[:9]) if digits else 0)


def parse_go_int(text: str) -> tuple[int | None, str]:
    """Go's strconv.Atoi: the number, or None and Go's error."""
    if not _GO_INT.match(text):
        return None, f"strconv.Atoi: parsing {go_quote(text)}: invalid syntax"
    number = int(text)
    if not -_INT64 <= number < _INT64:
        return None, f"strconv.Atoi: parsing {go_quote(text)}: value out of range"
    return number, ""


_PERL_ONLY = ("(?=", "(?!", "(?<=", "(?<!", "(?>", "(?(", "(?#", "(?P=")


def go_regexp_error(pattern: str) -> str | None:
    """Why Go's regexp/syntax (Perl flags) refuses a pattern, or None. Python's parser finds the
    malformed ones; the Perl constructs Python has and Go lacks (backreferences, lookaround,
    atomic groups, conditionals, comments) are refused by name, as Go refuses them."""
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            if not in_class and pattern[i + 1] in "123456789":
                return f"error parsing regexp: invalid escape sequence: `\\{pattern[i + 1]}`"
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            i += 2 if pattern[i + 1:i + 2] == "]" or pattern[i + 1:i + 3] == "^]" else 1
            continue
        elif ch == "(":
            for construct in _PERL_ONLY:
                if pattern.startswith(construct, i):
                    return f"error parsing regexp: invalid or unsupported Perl syntax: `{construct}`"
        i += 1
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"error parsing regexp: {exc.msg}: `{pattern}`"
    return None


@dataclass
class Options:
    since: GoTime | None = None
    until: GoTime | None = None
    tail_lines: int | None = None
    boot: int | None = None
    pattern: str = ""

    def any(self) -> bool:
        return self != Options()


@dataclass
class LogQuery:
    services: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    options: Options = field(default_factory=Options)


def _options(first: Callable[[str], str], errors: list[str]) -> Options:
    o = Options(pattern=first("pattern"))
    for name in ("sinceTime", "untilTime"):
        if text := first(name):
            when = parse_rfc3339(text)
            if when is None:
                errors.append(invalid(name, text, "invalid time format"))
            setattr(o, "since" if name == "sinceTime" else "until", when)
    for name in ("boot", "tailLines"):
        if text := first(name):
            number, problem = parse_go_int(text)
            if number is None:
                errors.append(invalid(name, text, problem))
            setattr(o, "boot" if name == "boot" else "tail_lines", number)
    return o


def parse(query: dict[str, list[str]]) -> LogQuery | None:
    """The kubelet's newNodeLogQuery: None when the request asks nothing of a log query (then
    /logs/ serves files as without enableSystemLogQuery); QueryError(400) when a value does not
    parse."""
    errors: list[str] = []
    q = LogQuery()
    queries = query.get("query")
    for value in queries or []:
        if "/" in value or "\\" in value:
            q.files.append(value)
        elif value.strip():
            q.services.append(value)
    if queries is not None and not q.files and not q.services:
        errors.append(invalid("query", queries, "may not be empty"))
    q.options = _options(lambda name: (query.get(name) or [""])[0], errors)
    if errors:
        raise QueryError(400, errors)
    if q == LogQuery():
        return None
    return q


def _service_errors(services: list[str]) -> list[str]:
    errors = []
    for s in services:
        if len(s) > MAX_SERVICE_LENGTH:
            errors.append(invalid("query", s, f"length must be less than {MAX_SERVICE_LENGTH}"))
        elif _UNSAFE_SERVICE_CHARACTERS.search(s):
            errors.append(invalid("query", s, "input contains unsupported characters"))
    if len(services) > MAX_SERVICES:
        errors.append(f"query: Too many: {len(services)}: must have at most {MAX_SERVICES} items")
    return errors


def _strerror(code: int) -> str:
    """An errno as Go's syscall.Errno prints it (lower case)."""
    text = os.strerror(code)
    return text[:1].lower() + text[1:]


class NotServed(OSError):
    """A name below the log directory that is not served; the message says why in Go's words."""


class OutsideRoot(NotServed):
    def __init__(self) -> None:
        super().__init__("path escapes from parent")


def resolve_in_root(root: Path, name: str) -> Path:
    """A name below root as Go's os.Root resolves it: an absolute name, or one that leads out
    of root through ".." or a symlink, escapes; raises OSError with Go's words."""
    if name.startswith("/"):
        raise OutsideRoot()
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / name))
    if not target.is_relative_to(base):
        raise OutsideRoot()
    return target


def _go_os_error(op: str, name: str, exc: OSError) -> str:
    if isinstance(exc, NotServed):
        return f"{op} {name}: {exc}"
    return f"{op} {name}: {_strerror(exc.errno or errno.EIO)}"


def validate(q: LogQuery, log_dir: Path) -> None:
    """The kubelet's nodeLogQuery.validate; raises QueryError(406)."""
    errors = _service_errors(q.services)
    if not q.files and not q.services:
        errors.append("query: Required value: cannot be empty with options")
    elif q.files and q.services:
        errors.append(invalid("query", f"[{' '.join(q.files)}], [{' '.join(q.services)}]",
                              "cannot specify a file and service"))
    elif len(q.files) > 1:
        errors.append(invalid("query", q.files, "cannot specify more than one file"))
    elif len(q.files) == 1 and q.options.any():
        errors.append(invalid("query", q.files, "cannot specify file with options"))
    elif len(q.files) == 1:
        try:
            os.stat(resolve_in_root(log_dir, q.files[0]))
        except OSError as exc:
            errors.append(invalid("query", q.files, _go_os_error("statat", q.files[0], exc)))
    o = q.options
    if o.since is not None and o.until is not None and o.since.key() > o.until.key():
        errors.append(f"untilTime: Invalid value: {go_quote(o.until.json())}: must be after `sinceTime`")
    if o.boot is not None and o.boot > 0:
        errors.append(invalid("boot", o.boot, "must be less than 1"))
    if o.tail_lines is not None and not 0 <= o.tail_lines <= MAX_TAIL_LINES:
        errors.append(invalid("tailLines", o.tail_lines, f"must be between 0 and {MAX_TAIL_LINES}, inclusive"))
    if (problem := go_regexp_error(o.pattern)) is not None:
        errors.append(invalid("pattern", o.pattern, problem))
    if errors:
        raise QueryError(406, errors)


def journalctl_args(q: LogQuery, services: list[str]) -> list[str]:
    """The kubelet's getLoggingCmd (Linux)."""
    o = q.options
    args = ["--utc", "--no-pager", "--output=short-precise"]
    if o.since is not None:
        args.append(f"--since={o.since.journal()}")
    if o.until is not None:
        args.append(f"--until={o.until.journal()}")
    if o.tail_lines is not None:
        args += ["--pager-end", f"--lines={o.tail_lines}"]
    args += [f"--unit={s}" for s in services if s]
    if o.pattern:
        args.append(f"--grep={o.pattern}")
    if o.boot is not None:
        args += ["--boot", str(o.boot)]
    return args


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = asyncio.get_running_loop().time() + seconds

    def left(self) -> float:
        return max(0.0, self.end - asyncio.get_running_loop().time())


@dataclass
class NodeLogQuery:
    """Answers a validated query with services (a query naming a file is served as /logs/FILE)."""

    log_dir: Path
    journalctl: str = "journalctl"

    async def _journal_units(self, deadline: Deadline) -> str | None:
        """What `journalctl --field _SYSTEMD_UNIT` prints (stdout and stderr), None when it fails."""
        try:
            proc = await asyncio.create_subprocess_exec(self.journalctl, "--field", "_SYSTEMD_UNIT",
                                                        stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.STDOUT)
        except OSError:
            return None
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), deadline.left())
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return None
        return out.decode(errors="replace") if proc.returncode == 0 else None

    async def answer(self, q: LogQuery) -> AsyncIterator[bytes]:
        """The kubelet's nodeLogQuery.Copy: services the journal knows from journalctl, the others
        from /var/log (only without options)."""
        deadline = Deadline(DEADLINE)
        units = await self._journal_units(deadline)
        native = [s for s in q.services if units is not None and f"{s}.service" in units]
        files = [s for s in q.services if s not in native]
        if native:
            async for chunk in self._journal(q, native, deadline):
                yield chunk
        if files and q.options.any():
            yield (f"\noptions present and query resolved to log files for [{' '.join(files)}]\n"
                   "try without specifying options\n").encode()
            return
        for service in files:
            async for chunk in self._file_log(service, deadline):
                yield chunk

    async def _journal(self, q: LogQuery, services: list[str], deadline: Deadline) -> AsyncIterator[bytes]:
        args = journalctl_args(q, services)
        log.info("node log query: journalctl %s", " ".join(args))
        try:
            proc = await asyncio.create_subprocess_exec(self.journalctl, *args, stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.STDOUT)
        except OSError:
            if not q.options.boot:
                yield b"\nerror: journal output not available\n"
            return
        assert proc.stdout is not None
        try:
            while True:
                try:
                    chunk = await asyncio.wait_for(proc.stdout.read(CHUNK), deadline.left())
                except TimeoutError:
                    break  # the kubelet's context deadline ends the command and the answer
                if not chunk:
                    break
                yield chunk
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()

    async def _file_log(self, service: str, deadline: Deadline) -> AsyncIterator[bytes]:
        """The kubelet's heuristicsCopyFileLogs: SERVICE, SERVICE.log, SERVICE/SERVICE.log below
        the log directory, the first that is a file."""
        problem = "log not found for " + service
        for name in (service, f"{service}.log", f"{service}/{service}.log"):
            try:
                fd = _open_regular(self.log_dir, name)
            except FileNotFoundError:
                continue
            except OSError as exc:
                problem = f"error getting log for {service}: {_go_os_error('openat', name, exc)}"
                break
            if fd is None:  # a directory: as if it were not there
                continue
            try:
                while chunk := await asyncio.to_thread(os.read, fd, CHUNK):
                    yield chunk
                    if not deadline.left():
                        yield f"\nerror getting log for {service}: context deadline exceeded\n".encode()
                        break
            finally:
                os.close(fd)
            return
        yield f"\n{problem}\n".encode()


def _open_regular(root: Path, name: str) -> int | None:
    """An open descriptor of root/name, None for a directory; OSError for anything else that is
    not a regular file, or that lies outside root."""
    path = resolve_in_root(root, name)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            os.close(fd)
            return None
        if not stat.S_ISREG(mode):
            raise NotServed("not a regular file")
        if not Path(os.readlink(f"/proc/self/fd/{fd}")).is_relative_to(os.path.realpath(root)):
            raise OutsideRoot()
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


async def gzipped(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The answer compressed as Go's gzip.BestSpeed writer compresses it."""
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    try:
        async for chunk in body:
            if out := z.compress(chunk):
                yield out
        yield z.flush()
    finally:
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            await aclose()


def file_path(name: str) -> str:
    """The file a query names, cleaned as the kubelet's file server cleans a path (validate has
    checked that it lies below the log directory)."""
    return posixpath.normpath("/" + name).lstrip("/")
