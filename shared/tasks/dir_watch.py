"""Waiting for a directory to change, with inotify on the event loop: no thread, no polling, no
wake-up while nothing changes (the static pod directory, the CSI plugin registry).

The watch is opened before the caller looks at the directory and kept while it works, so a
change made during a scan is not lost: it is the next change reported. A burst of changes (an
editor's save, a copy, a plugin replacing its socket) is reported once, when the directory has
been quiet for `settle` seconds (at most `debounce` after the first). Callers still rescan on a
timer: inotify drops events when its queue overflows, and those are then simply late.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from pathlib import Path
from types import TracebackType

from asyncinotify import Event, Inotify, Mask

log = logging.getLogger(__name__)

# Everything that can change which entries are there or what they hold.
WATCH_MASK = (Mask.CREATE | Mask.DELETE | Mask.MODIFY | Mask.CLOSE_WRITE | Mask.MOVED_FROM | Mask.MOVED_TO
              | Mask.ATTRIB | Mask.DELETE_SELF | Mask.MOVE_SELF)
_GONE = Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.IGNORED | Mask.UNMOUNT
# A directory tree is watched this deep at most (the kubelet's plugin registry is one level).
MAX_DEPTH = 4


class Change(enum.Enum):
    CHANGED = "changed"      # something in the directory changed: look again
    GONE = "gone"            # the watched directory itself was removed or moved: watch again
    TIMEOUT = "timeout"      # nothing changed before the deadline


class DirectoryWatch:
    """`async with DirectoryWatch(path) as w: ... await w.next_change(timeout)`."""

    def __init__(self, directory: Path, recursive: bool = False, settle: float = 0.05,
                 debounce: float = 0.2) -> None:
        self.directory = directory
        self.recursive = recursive
        self.settle = settle
        self.debounce = debounce
        self._inotify: Inotify | None = None

    async def __aenter__(self) -> DirectoryWatch:
        self._inotify = Inotify()
        try:
            self._add(self.directory, 0)
        except BaseException:
            self._inotify.close()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._inotify is not None:
            inotify, self._inotify = self._inotify, None
            # In a thread: closing an inotify descriptor waits for the kernel's fsnotify grace
            # period, which has taken over 100 ms on a busy host. No reader is registered for it
            # between next_change calls, so the loop never sees the descriptor go.
            await asyncio.to_thread(inotify.close)

    def _add(self, directory: Path, depth: int) -> None:
        assert self._inotify is not None
        self._inotify.add_watch(directory, WATCH_MASK)
        if not self.recursive or depth >= MAX_DEPTH:
            return
        try:
            subdirs = [p for p in directory.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return
        for sub in subdirs:
            try:
                self._add(sub, depth + 1)
            except OSError:  # gone meanwhile, or not ours to read: seen at the next rescan
                pass

    def _note(self, event: Event) -> bool:
        """Whether the event is the watched directory going away; watch new subdirectories."""
        if event.watch is not None and event.watch.path == self.directory and event.mask & _GONE:
            return True
        if self.recursive and event.mask & Mask.ISDIR and event.mask & (Mask.CREATE | Mask.MOVED_TO) \
                and event.path is not None:
            depth = len(event.path.relative_to(self.directory).parts)
            if depth <= MAX_DEPTH:
                try:
                    self._add(event.path, depth)
                except (OSError, ValueError):
                    pass
        return False

    async def next_change(self, timeout: float) -> Change:
        assert self._inotify is not None, "use DirectoryWatch in `async with`"
        loop = asyncio.get_running_loop()
        try:
            event = await asyncio.wait_for(self._inotify.get(), max(0.0, timeout))
        except asyncio.TimeoutError:
            return Change.TIMEOUT
        if self._note(event):
            return Change.GONE
        first = loop.time()
        while (quiet := min(self.settle, first + self.debounce - loop.time())) > 0:
            try:
                event = await asyncio.wait_for(self._inotify.get(), quiet)
            except asyncio.TimeoutError:
                break
            if self._note(event):
                return Change.GONE
        return Change.CHANGED
