"""What every pykubelet process sets up before it imports anything heavy: the memory it costs.

Applied first thing by `pykubelet` (services/cli/main.py), so the supervisor and every service
run with it, forked by `pykubelet up`, exec'd or started by a systemd unit.

- Optional imports nobody here uses are refused. nats-py imports aiohttp, when it is installed,
  for a websocket transport pykubelet never uses (the bus is nats://): 84 modules, ~8 MiB in
  every process (shared, in the services `pykubelet up` forks). httpx imports its command-line
  tool, which pulls in click, rich and pygments where they are installed. A process that imported
  one of them already (a test or bench process importing pykubelet code) keeps it.
- glibc gives each thread that allocates a malloc arena of its own (up to 8 per core), and keeps
  what it took there. gRPC's threads, anyio's worker threads (FastAPI's sync endpoints) and the
  default executor's each grow one: 2-3 MiB private a process. Two arenas serve these few,
  mostly idle threads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import resource
import sys

from shared.process import grpc_env

log = logging.getLogger(__name__)

UNUSED_OPTIONAL_IMPORTS = ("aiohttp", "httpx._main")
M_ARENA_MAX = -8  # glibc's mallopt parameter number
MALLOC_ARENAS = 2


def refuse_unused_imports() -> None:
    for name in UNUSED_OPTIONAL_IMPORTS:
        # None in sys.modules makes `import name` raise ImportError, which these optional
        # imports are written to handle.
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def limit_malloc_arenas() -> bool:
    """Cap glibc's malloc arenas (no-op where the C library is not glibc)."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, MALLOC_ARENAS))


def raise_open_files_limit() -> tuple[int, int]:
    """The soft RLIMIT_NOFILE raised to the hard one, as Go programs (the kubelet among them) do
    at start: the default soft limit (1024 under systemd) is below what a server of many
    connections needs, and the hard limit is what the unit (LimitNOFILE) or the host allows.
    Returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # e.g. a hard limit above the kernel's nr_open
            log.warning("open files limit stays %d (raising it to %d failed: %s)", soft, hard, exc)
            return soft, soft
    return soft, hard


def apply() -> None:
    grpc_env.apply()
    refuse_unused_imports()
    if not limit_malloc_arenas():
        log.debug("malloc arenas not limited (not glibc)")
