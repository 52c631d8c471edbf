"""Import cost per service, both layouts, in cluster mode: what each interpreter pays before it
does any work.

- exec'd layout (every service its own interpreter, `--exec-services`; the systemd units when
  pykubelet-preload.service is not running): a fresh
  `python -X importtime` starts as `pykubelet SERVICE` does (services/cli/main.py and its
  process tuning, which refuses unused optional imports) and imports what the service imports
  when it runs: its `__main__`, the
  modules every service imports once running (the store's dialect, uvicorn's protocols, ...:
  forking.RUNTIME_MODULES) and its own cluster-mode modules (forking.CLUSTER_MODULES). Printed:
  modules, import time, RSS after the imports, and the top-level packages that took longest.
- forked layout (`pykubelet up`, and the systemd units forked from pykubelet-preload.service): the
  preload, once for all services (forking.preload),
  and, for each service forked from it, how many modules its code and the modules services import
  once running still add (none: a module the preload misses is a private copy in every service).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from services.supervisor.forking import CLUSTER_MODULES, RUNTIME_MODULES, SERVICE_MAIN

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 180
TOP = 4

# Runs in a fresh interpreter: import the modules, report what that cost.
IMPORT_ONE = """
import importlib, json, sys, time
started = time.perf_counter()
import services.cli.main  # as `pykubelet SERVICE` starts: its tuning first (refused imports, arenas)
services.cli.main.process_tuning.apply()
for m in json.loads(sys.argv[1]):
    importlib.import_module(m)
took = time.perf_counter() - started
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:"))
print(json.dumps({"modules": len(sys.modules), "seconds": took, "rss_kib": rss}))
"""

PRELOAD_THEN_FORK = """
import importlib, json, os, sys, time
started = time.perf_counter()
import services.cli.main  # as `pykubelet up` starts
services.cli.main.process_tuning.apply()
from services.supervisor import forking
forking.preload(cluster_mode=True)
took = time.perf_counter() - started
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:"))
added = {}
for service, modules in json.loads(sys.argv[1]).items():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        before = set(sys.modules)
        for m in modules:
            importlib.import_module(m)
        os.write(w, json.dumps(sorted(set(sys.modules) - before)).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        added[service] = json.loads(f.read() or "[]")
    os.waitpid(pid, 0)
print(json.dumps({"modules": len(sys.modules), "seconds": took, "rss_kib": rss, "added": added}))
"""


def service_modules(service: str) -> list[str]:
    """The code `service` runs in cluster mode."""
    package = SERVICE_MAIN[service].removesuffix(".__main__")
    own = [m for m in CLUSTER_MODULES if m.startswith(package + ".")]
    api = [m for m in CLUSTER_MODULES if m.startswith("shared.api.")] if own else []
    return [SERVICE_MAIN[service], *api, *own]


def heaviest(importtime: str, top: int = TOP) -> dict[str, float]:
    """Top-level packages by the self time of their modules (ms), from -X importtime's lines
    (`import time: self [us] | cumulative | imported package`)."""
    per: dict[str, float] = {}
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3:
            continue
        name = fields[2].strip().split(".")[0]
        per[name] = per.get(name, 0.0) + int(fields[0]) / 1000
    return dict(sorted(per.items(), key=lambda kv: -kv[1])[:top])


def _python(code: str, arg: str, importtime: bool) -> tuple[dict, str]:
    argv = [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", code, arg]
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT)
    if res.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout.splitlines()[-1]), res.stderr


def run(progress=print) -> dict:
    progress("import cost: each service in a fresh interpreter, then the forked layout's preload ...")
    systemd = {}
    for service in SERVICE_MAIN:
        modules = service_modules(service)
        # Time and memory from a plain run; -X importtime's own bookkeeping would add to both.
        figures, _ = _python(IMPORT_ONE, json.dumps(modules), importtime=False)
        _, trace = _python(IMPORT_ONE, json.dumps(modules), importtime=True)
        systemd[service] = {"modules": figures["modules"], "import_ms": round(figures["seconds"] * 1000),
                            "rss_mib": round(figures["rss_kib"] / 1024, 1), "heaviest_ms": heaviest(trace)}
    forked, _ = _python(PRELOAD_THEN_FORK, json.dumps({s: [*service_modules(s), *RUNTIME_MODULES]
                                                       for s in SERVICE_MAIN}),
                        importtime=False)
    return {"systemd_layout": systemd,
            "forked_layout": {"preload_modules": forked["modules"], "preload_ms": round(forked["seconds"] * 1000),
                              "preload_rss_mib": round(forked["rss_kib"] / 1024, 1),
                              "added_after_fork": forked["added"]}}


def table(out: dict) -> list[str]:
    s, f = out["systemd_layout"], out["forked_layout"]
    lines = ["", "Import cost per service, cluster mode (what an interpreter pays before any work)",
             f"  {'service':<16} {'exec layout: modules':>24} {'import':>8} {'RSS':>10}   heaviest packages (self ms)"]
    for service, r in s.items():
        heavy = ", ".join(f"{k} {v:.0f}" for k, v in r["heaviest_ms"].items())
        lines.append(f"  {service:<16} {r['modules']:>24} {r['import_ms']:>5} ms {r['rss_mib']:>6.1f} MiB   {heavy}")
    total = sum(r["rss_mib"] for r in s.values())
    added = {k: len(v) for k, v in f["added_after_fork"].items()}
    lines += [f"  {'all seven':<16} {'':>24} {sum(r['import_ms'] for r in s.values()):>5} ms {total:>6.1f} MiB"
              "   (RSS: each interpreter's own copy)",
              f"  forked layout: the preload, once for all seven: {f['preload_modules']} modules, {f['preload_ms']} ms, "
              f"RSS {f['preload_rss_mib']:.1f} MiB; modules a forked service still imports: "
              + (", ".join(f"{k} {v}" for k, v in added.items() if v) or "none")]
    return lines
