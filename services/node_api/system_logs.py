"""GET /logs/ and /logs/{path}: the node's /var/log, as the kubelet serves it when
enableSystemLogHandler and enableDebuggingHandlers are true (`kubectl get --raw
/api/v1/nodes/NODE/proxy/logs/`; authorized as nodes/log).

The kubelet hands the path to Go's http.FileServer; so does this, in its shape: a directory is
listed as Go lists one (`<pre>` of links, names sorted, a directory's with a trailing slash) or
answered by its index.html, a directory named without its trailing slash is redirected to it
(301), a file is sent with the type its extension says (text/plain; charset=utf-8 for text
without one), a missing path is "404 page not found". The path is cleaned as Go's path.Clean
cleans it, so ".." never climbs out of /var/log.

Two differences, both refusals where the kubelet would read on:
- a symlink whose target is outside /var/log is not followed (403): a pod that can write into
  /var/log (log shippers mount it) could otherwise let anyone allowed nodes/log read any file
  of the host through a link;
- only directories and regular files are served (403): opening a FIFO would hang the request.
"""

from __future__ import annotations

import asyncio
import html
import mimetypes
import os
import posixpath
import stat
from pathlib import Path
from urllib.parse import quote, unquote

from services.node_api import log_query
from services.node_api.http import HTTPError, Request, Response
from services.node_api.log_query import NodeLogQuery, QueryError

NODE_LOG_DIR = Path("/var/log")
CHUNK = 64 * 1024
SNIFF_BYTES = 512  # what Go's http.DetectContentType looks at
DISABLED = "logs endpoint is disabled."


def clean(raw: str) -> str:
    """The request's path below /logs/, percent-decoded and cleaned as Go's path.Clean("/"+p),
    relative (no leading slash; "" for the directory itself)."""
    try:
        path = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise HTTPError(400, "the log path is not valid UTF-8") from None
    if "\0" in path:
        raise HTTPError(400, "the log path has a NUL byte")
    return posixpath.normpath("/" + path).lstrip("/")


def content_type(name: str, head: bytes) -> str:
    guessed, encoding = mimetypes.guess_type(name, strict=False)
    if encoding == "gzip":
        return "application/gzip"
    if guessed:
        return f"{guessed}; charset=utf-8" if guessed.startswith("text/") else guessed
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut at the sniffed length is still text.
        if exc.start < len(head) - 3:
            return "application/octet-stream"
        text = head[:exc.start].decode("utf-8")
    if any(ord(ch) < 0x20 and ch not in "\t\n\r\x0c\x1b" for ch in text):
        return "application/octet-stream"
    return "text/plain; charset=utf-8"


def listing(directory: Path) -> bytes:
    """A directory as Go's http.FileServer lists one."""
    rows = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        name = entry.name + ("/" if entry.is_dir(follow_symlinks=True) else "")
        rows.append(f'<a href="{html.escape(quote(name), quote=True)}">{html.escape(name, quote=False)}</a>\n')
    return ('<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n'
            + "".join(rows) + "</pre>\n").encode()


class FileChunks:
    """A file's first `size` bytes (its size when asked: Content-Length is sent first, and a log
    may grow meanwhile), read on a thread; closed when read to the end or by aclose(), also
    when never started (a HEAD request)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd: int | None = fd
        self.left = size

    def __aiter__(self) -> FileChunks:
        return self

    async def __anext__(self) -> bytes:
        if self.fd is None or self.left <= 0:
            await self.aclose()
            raise StopAsyncIteration
        chunk = await asyncio.to_thread(os.read, self.fd, min(CHUNK, self.left))
        if not chunk:  # truncated meanwhile: the response ends short, as Go's would
            await self.aclose()
            raise StopAsyncIteration
        self.left -= len(chunk)
        return chunk

    async def aclose(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class SystemLogs:
    """query: answers node log queries (enableSystemLogQuery); None: /logs/ serves files only."""

    def __init__(self, root: Path = NODE_LOG_DIR, query: NodeLogQuery | None = None) -> None:
        self.root = root
        self.query = query

    async def serve(self, req: Request) -> Response:
        below = req.path.removeprefix("/logs/")
        if self.query is not None:
            try:
                return await self._query(req, below)
            except QueryError as exc:
                raise HTTPError(exc.status, str(exc)) from None
        return await asyncio.to_thread(self._open, clean(below), req.path.endswith("/"))

    async def _query(self, req: Request, below: str) -> Response:
        """The kubelet's order: a query that does not parse is refused (400) before anything else;
        a request without query parameters is a file request."""
        q = log_query.parse(req.query)
        if q is None:
            return await asyncio.to_thread(self._open, clean(below), req.path.endswith("/"))
        if below not in ("", "/"):
            raise HTTPError(406, "path not allowed in query mode")
        await asyncio.to_thread(log_query.validate, q, self.root)
        if q.files:
            name = q.files[0]
            return await asyncio.to_thread(self._open, log_query.file_path(name), name.endswith("/"))
        assert self.query is not None
        body = self.query.answer(q)
        if req.header("accept-encoding") == "gzip":
            return Response(200, log_query.gzipped(body), log_query.CONTENT_TYPE, [("Content-Encoding", "gzip")])
        return Response(200, body, log_query.CONTENT_TYPE)

    def _open(self, rel: str, asked_as_directory: bool) -> Response:
        root = Path(os.path.realpath(self.root))
        target = Path(os.path.realpath(root / rel))
        if not target.is_relative_to(root):
            raise HTTPError(403, f"/logs/{rel} leads outside {self.root} (a symlink): not served")
        try:
            st = os.stat(target)
        except (FileNotFoundError, NotADirectoryError):
            raise HTTPError(404, "404 page not found") from None
        except PermissionError:
            raise HTTPError(403, "403 Forbidden") from None
        if stat.S_ISDIR(st.st_mode):
            if not asked_as_directory and rel:
                # Go redirects a directory named without its slash, relative to the last segment.
                return Response(301, b"", headers=[("Location", quote(posixpath.basename(rel)) + "/")])
            index = target / "index.html"
            if index.is_file():
                return self._file(index, root)
            try:
                return Response(200, listing(target), "text/html; charset=utf-8")
            except OSError as exc:
                raise HTTPError(500, f"cannot list /logs/{rel}: {exc.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise HTTPError(403, f"/logs/{rel} is not a regular file: not served")
        if asked_as_directory:
            # Go redirects a file asked with a trailing slash to its name.
            return Response(301, b"", headers=[("Location", "../" + quote(posixpath.basename(rel)))])
        return self._file(target, root)

    def _file(self, path: Path, root: Path) -> Response:
        """Open a file found below root (the log dir, resolved)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise HTTPError(403 if isinstance(exc, PermissionError) else 404, f"cannot open {path.name}: "
                                                                              f"{exc.strerror}") from None
        try:
            # What was opened, not what the path named a moment before: a directory swapped for
            # a symlink since realpath() is caught here.
            if not Path(os.readlink(f"/proc/self/fd/{fd}")).is_relative_to(root):
                raise HTTPError(403, f"{path.name} leads outside {self.root}: not served")
            os.set_blocking(fd, True)
            head = os.pread(fd, SNIFF_BYTES, 0)
            size = os.fstat(fd).st_size
        except BaseException:
            os.close(fd)
            raise
        return Response(200, FileChunks(fd, size), content_type(path.name, head),
                        headers=[("Content-Length", str(size))])


async def disabled(req: Request) -> Response:
    raise HTTPError(405, DISABLED)
