"""env[].valueFrom.fileKeyRef (EnvFiles, on by default since Kubernetes 1.35): a variable's value
read from a file a container (typically an init container) wrote into one of the pod's emptyDir
volumes, in the kubelet's .env format (pkg/kubelet/util/env): `KEY='value'` lines, the value in
single quotes and allowed to span lines, blank lines and `#` comments skipped.

The file is the pod's to write, so it is read as hostile: the path may not lead out of the volume
(a symlink inside it is followed only while it stays inside, as the kubelet's securejoin), only a
regular file is opened (a FIFO would hang the reader, a device node have effects), and at most
MAX_FILE_BYTES are read; a line longer than the kubelet's scanner takes fails the parse as its
does."""

from __future__ import annotations

import os
from pathlib import Path

from shared.host.safe_paths import NotRegularFile, reopen_regular
from shared.host.subpath import open_beneath

# The kubelet reads with a bufio.Scanner, whose longest line is 64 KiB ("token too long").
MAX_LINE = 64 * 1024
# The kubelet reads the whole file; an environment variable cannot exceed 128 KiB anyway
# (exec_strings.py), so a larger file is refused rather than read.
MAX_FILE_BYTES = 1 << 20


class EnvFileError(ValueError):
    """The file cannot be read or parsed; the message says where."""


def parse_env(text: str, key: str) -> str:
    """The value of `key`, "" when the file does not set it (or sets it empty), as the
    kubelet's ParseEnv; EnvFileError for a malformed file."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].lstrip(" \t")
        i += 1
        if len(line) > MAX_LINE:
            raise EnvFileError(f"line {number} is longer than {MAX_LINE} bytes")
        if not line or line.startswith("#"):
            continue
        name, value = _assignment(line, number)
        if value != value.lstrip(" \t"):
            # Whitespace after '=': as bash, the variable is empty (and the rest is not read).
            if name == key:
                return ""
            continue
        if not value.startswith("'"):
            raise EnvFileError(f"invalid environment variable format at line {number}: value must be enclosed in "
                               "single quotes")
        found, i = _quoted(lines, i, value[1:], number)
        if name == key:
            return found
    return ""


def _assignment(line: str, number: int) -> tuple[str, str]:
    """NAME and what follows '=' on a line."""
    eq = line.find("=")
    if eq == -1:
        raise EnvFileError(f"invalid environment variable format at line {number}: missing '='")
    name = line[:eq].rstrip(" \t")
    if not name:
        raise EnvFileError(f"invalid environment variable format at line {number}: empty variable name")
    if name != line[:eq]:
        raise EnvFileError(f"invalid environment variable format at line {number}: whitespace before '=' is not "
                           "allowed")
    return name, line[eq + 1:]


def _quoted(lines: list[str], i: int, rest: str, start: int) -> tuple[str, int]:
    """A single-quoted value from `rest` (after the opening quote) on, over as many lines as it
    takes; the value and the index of the line after it."""
    parts, number = [], start
    while True:
        close = rest.find("'")
        if close != -1:
            parts.append(rest[:close])
            after = rest[close + 1:].lstrip(" \t")
            if after and not after.startswith("#"):
                raise EnvFileError(f"invalid environment variable format at line {number}: unexpected content after "
                                   "closing quote")
            return "".join(parts), i
        parts.append(rest + "\n")
        if i >= len(lines):
            raise EnvFileError(f"invalid environment variable format starting at line {start}: unclosed single quote")
        if len(lines[i]) > MAX_LINE:
            raise EnvFileError(f"line {i + 1} is longer than {MAX_LINE} bytes")
        rest, number, i = lines[i], i + 1, i + 1


def read_env_file(volume: Path, path: str) -> str:
    """The file at `path` inside the volume directory, as text; EnvFileError naming what is wrong."""
    try:
        path_fd = open_beneath(volume, path, make_dirs=False)
    except OSError as exc:
        raise EnvFileError(f"failed to open environment variable file {path!r}: "
                           f"{exc.strerror or exc}") from None
    try:
        fd = reopen_regular(path_fd, path)
    except NotRegularFile as exc:
        raise EnvFileError(f"environment variable file {path!r} is {exc.kind}, not a regular file") from None
    finally:
        os.close(path_fd)
    try:
        data = os.pread(fd, MAX_FILE_BYTES + 1, 0)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise EnvFileError(f"environment variable file {path!r} is larger than {MAX_FILE_BYTES} bytes")
    return data.decode("utf-8", errors="surrogateescape")
