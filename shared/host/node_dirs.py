"""The node's own directories and state are private to root: the root dir 0711 (others may pass
through it, not list or read it), the pods dir and each pod's dir 0750 (the kubelet's), the logs
dir 0700, the state store and pykubelet's logs 0600 (they hold whole manifests, env values
included). Containers reach what they need through bind mounts, which do not depend on the modes
of the directories above them; but the root of a pod in a user namespace of its own is an
unprivileged ID that must pass through the root dir to its container's rootfs, which pykubelet's
containerd keeps below it (<root>/containerd/state, 0711 as containerd keeps /run/containerd).

Private files are private from the moment they exist: every pykubelet process runs with umask
077 (private_umask), so a file is never readable by others between its creation and a chmod.
What containers must read or write (a pod's /etc/hosts, its termination-message file, volume
contents) is given its mode explicitly where it is made."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

ROOT_DIR_MODE = 0o711
TRAVERSE_DIR_MODE = 0o711  # a directory others may pass through: the root dir, containerd's own
PRIVATE_TREE_MODE = 0o700  # the logs and run dirs
PRIVATE_DIR_MODE = 0o750
PRIVATE_FILE_MODE = 0o600
PRIVATE_UMASK = 0o077


def private_umask() -> None:
    """At the start of every pykubelet process, before it opens anything."""
    os.umask(PRIVATE_UMASK)


def _make_dirs(path: Path, mode: int) -> Path:
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:  # made by another service meanwhile
            continue
        os.chmod(d, mode)  # exactly mode, whatever the umask narrowed
    return path


def private_dir(path: Path) -> Path:
    """Make path and whichever of its parents are missing, each 0750 (whatever the umask);
    directories already there keep their modes."""
    return _make_dirs(path, PRIVATE_DIR_MODE)


def container_dir(path: Path, mode: int = 0o755) -> Path:
    """A directory a container reads through a bind mount (volume contents, a hostPath made for
    the pod): path and whichever of its parents are missing, each with the mode the kubelet's
    (made under umask 022) would have; directories already there keep their modes."""
    return _make_dirs(path, mode)


def correct_mode(path: Path, mode: int, what: str) -> bool:
    """Give an existing file or directory (never a symlink's target) exactly `mode`, saying so
    in the log when it had another (an older pykubelet's, or one made by hand); True then."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == mode:
        return False
    os.chmod(path, mode, follow_symlinks=False)
    log.warning("%s %s had mode %04o%s; corrected to %04o", what, path, stat.S_IMODE(st.st_mode),
                " (readable by other users)" if st.st_mode & 0o044 else "", mode)
    return True


def root_dir(path: Path) -> Path:
    """The node's root dir, 0711: made so, or corrected when it exists with another mode (a
    symlink is followed: the directory it names is the root dir)."""
    path = path.resolve()
    if not path.exists():
        private_dir(path.parent)
        try:
            os.mkdir(path, ROOT_DIR_MODE)
        except FileExistsError:
            pass
    correct_mode(path, ROOT_DIR_MODE, "the root dir")
    return path


def traversable_dir(path: Path, what: str) -> Path:
    """A directory of the node's that others may pass through but not list (0711), made so or
    corrected: the way down to a user-namespaced container's rootfs."""
    if not path.exists():
        private_dir(path)
    correct_mode(path, TRAVERSE_DIR_MODE, what)
    return path


def open_private_log(path: Path) -> int:
    """A log file (a process's output) opened for appending: 0600 from creation, as it may hold
    anything a service logs."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)


def private_files(*paths: Path, what: str = "the file") -> None:
    """0600 for those of these files that exist, with a log line for each one corrected."""
    for p in paths:
        correct_mode(p, PRIVATE_FILE_MODE, what)


def private_tree(directory: Path, what: str) -> None:
    """A directory of private files (the service logs): the directory 0700, each file 0600."""
    correct_mode(directory, PRIVATE_TREE_MODE, what)
    for entry in directory.iterdir():
        if entry.is_file() and not entry.is_symlink():
            correct_mode(entry, PRIVATE_FILE_MODE, f"a file of {what}")
