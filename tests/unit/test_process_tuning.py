"""What every pykubelet process sets up first (shared/process/tuning.py), each case in a fresh
interpreter: the settings are process-wide and some can only take effect before imports."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.conftest import REPO


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_optional_imports_nobody_uses_are_refused_and_the_bus_client_still_loads():
    """aiohttp is installed here (the bench's Kubernetes client needs it)."""
    out = run("""
import importlib.util
assert importlib.util.find_spec("aiohttp") is not None
from shared.process import tuning as process_tuning
process_tuning.apply()
import nats, httpx, sys
from nats.aio import transport
print(transport.aiohttp is None, 'aiohttp' in sys.modules and sys.modules['aiohttp'] is not None,
      httpx.Client is not None)
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True"]


def test_a_module_already_imported_is_kept():
    """A process that loaded one of them before (a test or bench process importing pykubelet
    code after kubernetes_asyncio) keeps using it."""
    out = run("""
import sys, types
sys.modules['aiohttp'] = types.ModuleType('aiohttp')
from shared.process import tuning as process_tuning
process_tuning.apply()
print(sys.modules['aiohttp'] is not None)
""")
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


def test_malloc_arenas_are_limited_on_glibc():
    out = run("from shared.process import tuning; print(tuning.limit_malloc_arenas())")
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


def test_the_open_files_limit_is_raised_to_the_hard_one():
    out = run("""
import resource
from shared.process import tuning as process_tuning
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
print(process_tuning.raise_open_files_limit() == (256, hard), resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard)
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
