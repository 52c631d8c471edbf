"""The layering the code holds to, checked on every import (lazy ones and TYPE_CHECKING ones too):
shared/ never imports services/, and a service imports only itself and shared/. The one
exception is the command line, which starts and tears down a node through the supervisor.
Inside shared/, each package stands on a floor and imports only packages on floors below it
(shared/__init__.py says what each holds)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# (importer, imported): the command line's `pykubelet up`/`down` and `admin` drive the supervisor.
ALLOWED = {("cli", "supervisor")}
# shared/'s floors: values and event-loop helpers at the bottom, the service frame at the top.
FLOORS = {"model": 0, "tasks": 0, "config": 1, "host": 2, "tracing": 2,
          "api": 3, "bus": 3, "csi": 3, "runtime": 3, "store": 3, "process": 4}


def imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, absolute, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def violations(root: Path) -> list[str]:
    out = []
    for path in sorted((root / "shared").rglob("*.py")):
        out += [f"{path.relative_to(root)}:{line} imports {name}: shared/ never imports services/"
                for line, name in imports(path) if name == "services" or name.startswith("services.")]
    out += floor_violations(root)
    for path in sorted((root / "services").rglob("*.py")):
        parts = path.relative_to(root / "services").parts
        if len(parts) < 2:
            continue
        own = parts[0]
        for line, name in imports(path):
            pieces = name.split(".")
            if pieces[0] != "services" or len(pieces) < 2 or pieces[1] in (own, "__init__"):
                continue
            if (own, pieces[1]) not in ALLOWED:
                out.append(f"{path.relative_to(root)}:{line} imports {name}: services never import each other "
                           "(share it through shared/, or talk over the bus and the store)")
    return out


def floor_violations(root: Path) -> list[str]:
    out = []
    for path in sorted((root / "shared").rglob("*.py")):
        parts = path.relative_to(root / "shared").parts
        if len(parts) < 2:
            continue
        own = parts[0]
        if own not in FLOORS:
            out.append(f"{path.relative_to(root)}: shared/{own}/ has no floor (add it to FLOORS and shared/__init__.py)")
            continue
        for line, name in imports(path):
            pieces = name.split(".")
            if pieces[0] != "shared" or len(pieces) < 2 or pieces[1] == own:
                continue
            theirs = FLOORS.get(pieces[1])
            if theirs is None or theirs >= FLOORS[own]:
                out.append(f"{path.relative_to(root)}:{line} imports {name}: shared/{own}/ (floor {FLOORS[own]}) "
                           f"imports only packages on lower floors")
    return out


def test_shared_never_imports_services_and_services_never_import_each_other():
    assert violations(REPO) == []


def test_a_crossing_import_is_named_with_its_line(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "x.py").write_text("from services.probe import worker\n")
    (tmp_path / "services" / "probe").mkdir(parents=True)
    (tmp_path / "services" / "probe" / "a.py").write_text(
        "from services.probe import b\nfrom shared import y\n\ndef f():\n    import services.pod_sync.syncer\n")
    assert violations(tmp_path) == [
        "shared/x.py:1 imports services.probe: shared/ never imports services/",
        "services/probe/a.py:5 imports services.pod_sync.syncer: services never import each other "
        "(share it through shared/, or talk over the bus and the store)"]


def test_a_shared_package_importing_one_on_its_own_floor_or_above_is_named(tmp_path):
    for pkg in ("model", "config", "store", "bus"):
        (tmp_path / "shared" / pkg).mkdir(parents=True)
    (tmp_path / "shared" / "model" / "a.py").write_text("from shared.config import settings\n")
    (tmp_path / "shared" / "store" / "b.py").write_text("from shared.config.settings import Settings\n"
                                                       "from shared.bus.client import Bus\n")
    (tmp_path / "shared" / "bus" / "c.py").write_text("from shared.model import podspec\n")
    (tmp_path / "shared" / "loose").mkdir()
    (tmp_path / "shared" / "loose" / "d.py").write_text("")
    assert floor_violations(tmp_path) == [
        "shared/loose/d.py: shared/loose/ has no floor (add it to FLOORS and shared/__init__.py)",
        "shared/model/a.py:1 imports shared.config: shared/model/ (floor 0) imports only packages on lower floors",
        "shared/store/b.py:2 imports shared.bus.client: shared/store/ (floor 3) imports only packages on lower floors"]
