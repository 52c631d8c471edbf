"""Reading ginkgo's JUnit reports and printing two agents' results side by side."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Result:
    agent: str
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # spec -> first line of its failure
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Set when the run did not finish (suite timeout, a component that would not start).
    incomplete: str = ""
    started: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def load(cls, path: Path) -> Result:
        return cls(**json.loads(path.read_text()))


_SOURCE_LINE = re.compile(r"^\S+\.go:\d+$")
_TIMESTAMP = re.compile(r"^[A-Z][a-z]{2} +\d+ [\d:.]+: ")


def _why(text: str) -> str:
    """The failure's first line of words: ginkgo puts the spec's source location first."""
    for line in text.splitlines():
        line = line.strip()
        if line and not _SOURCE_LINE.match(line):
            return _TIMESTAMP.sub("", line)[:300]
    return "failed"


def parse_junit(report_dir: Path, agent: str) -> Result:
    """Every junit_*.xml ginkgo's parallel nodes wrote; a spec is its testcase name."""
    res = Result(agent)
    files = sorted(report_dir.glob("junit_*.xml"))
    for f in files:
        for case in ET.parse(f).getroot().iter("testcase"):
            name = " ".join((case.get("name") or "").split())
            skipped = case.find("skipped")
            if skipped is not None:
                # Specs outside the focus are listed bare; a spec that skipped itself says why.
                if skipped.get("message") or (skipped.text or "").strip():
                    res.skipped.append(name)
                continue
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            if failure is not None:
                text = (failure.get("message") or failure.text or "").strip()
                res.failed[name] = _why(text)
            else:
                res.passed.append(name)
    res.passed.sort()
    res.skipped.sort()
    return res


SUITE_HOOKS = ("[BeforeSuite]", "[AfterSuite]", "[SynchronizedBeforeSuite]", "[SynchronizedAfterSuite]",
               "[ReportBeforeSuite]", "[ReportAfterSuite]")


def without_setup(names: list[str]) -> list[str]:
    """Ginkgo reports its suite hooks (and its report hooks, "[ReportAfterSuite] Log Check") as
    testcases too; they are not specs."""
    return [n for n in names if not n.startswith(SUITE_HOOKS)]


def side_by_side(results: list[Result]) -> str:
    cols = [r.agent for r in results]
    w = max(12, *(len(c) for c in cols)) + 2
    lines = ["", f"{'':<12}" + "".join(f"{c:>{w}}" for c in cols)]
    for label, get in (("passed", lambda r: len(without_setup(r.passed))), ("failed", lambda r: len(r.failed)),
                       ("skipped", lambda r: len(r.skipped)), ("minutes", lambda r: f"{r.seconds / 60:.1f}")):
        lines.append(f"{label:<12}" + "".join(f"{get(r)!s:>{w}}" for r in results))
    for r in results:
        if r.incomplete:
            lines.append(f"\n{r.agent}: INCOMPLETE: {r.incomplete}")
        if r.failed:
            lines.append(f"\n{r.agent}: {len(r.failed)} failed")
            lines += [f"  - {name}\n      {why}" for name, why in sorted(r.failed.items())]
    if len(results) == 2:
        a, b = results
        # A run the suite's time limit cut short ran only some specs: compare those both ran.
        ran = (set(a.passed) | set(a.failed)) & (set(b.passed) | set(b.failed))
        lines.append(f"\nran on both: {len(without_setup(sorted(ran)))}, passed on both: "
                     f"{len(without_setup(sorted(set(a.passed) & set(b.passed))))}")
        regressions = sorted(set(b.passed) & set(a.failed))
        lines.append(f"\npass on {b.agent}, fail on {a.agent}: {len(regressions)}")
        lines += [f"  - {n}" for n in regressions]
        gains = sorted(set(a.passed) & set(b.failed))
        if gains:
            lines.append(f"pass on {a.agent}, fail on {b.agent}: {len(gains)}")
            lines += [f"  - {n}" for n in gains]
    return "\n".join(lines)
