"""CPU sets as the kernel and the kubelet write them ("0-3,6")."""

from __future__ import annotations


class CPUSetError(ValueError):
    pass


def parse_cpuset(text: str) -> frozenset[int]:
    """"0-2,5" -> {0, 1, 2, 5}; "" -> the empty set."""
    cpus: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        first, dash, last = part.partition("-")
        try:
            lo, hi = int(first, 10), int(last, 10) if dash else int(first, 10)
        except ValueError:
            raise CPUSetError(f"{text!r} is not a CPU list like 0-3,6 ({part!r})") from None
        if lo < 0 or hi < lo:
            raise CPUSetError(f"{text!r} is not a CPU list like 0-3,6 ({part!r} is not a range)")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def format_cpuset(cpus: frozenset[int] | set[int]) -> str:
    """{0, 1, 2, 5} -> "0-2,5", the kernel's and the kubelet's form."""
    out: list[str] = []
    run: list[int] = []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [cpu]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)
