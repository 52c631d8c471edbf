"""Preloaded objects made immortal before the services are forked: in a fresh interpreter of its
own (marking the test process's objects would keep them forever)."""

from __future__ import annotations

import json
import subprocess
import sys

from services.supervisor import immortal
from tests.integration.conftest import REPO

SCRIPT = """
import gc, json, sys
import email.parser  # a module with functions, classes and constants of its own
from services.supervisor import immortal

def counts():
    f, c = email.parser.Parser.parsestr, email.parser.Parser.__init__.__code__.co_consts
    table = {"state": {}}
    return {"function": sys.getrefcount(f), "class": sys.getrefcount(email.parser.Parser),
            "module_dict": sys.getrefcount(email.parser.__dict__),
            "const": sys.getrefcount(email.parser.__doc__)}

gc.disable()
before = counts()
marks = immortal.immortalize_all()
gc.freeze()
held = [email.parser.Parser.parsestr, email.parser.Parser, email.parser.__dict__, email.parser.__doc__] * 3
after = counts()
del held
# Marked objects still work and can still change.
msg = email.parser.Parser().parsestr("Subject: hi\\n\\nbody")
email.parser.__dict__["added"] = 1
print(json.dumps({"supported": immortal.supported(), "marks": marks, "before": before, "after": after,
                  "subject": msg["Subject"], "added": email.parser.added}))
"""


def run() -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_what_the_supervisor_imported_is_immortal_where_the_interpreter_allows_it():
    seen = run()
    assert seen["supported"] == immortal.supported()
    assert seen["subject"] == "hi" and seen["added"] == 1, "marked objects keep working"
    if seen["supported"]:
        # CPython 3.12/3.13: nothing counts references to these any more (new references above
        # did not change the counts), so reading them in a forked service writes nothing.
        assert seen["marks"] > 10_000
        for name, count in seen["after"].items():
            assert count >= 0xFFFFFFFF, f"{name} not immortal: {count}"
    else:
        # Another interpreter: nothing is marked, references are counted as ever.
        assert seen["marks"] == 0
        assert seen["after"]["function"] > seen["before"]["function"]
