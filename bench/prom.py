"""Reading figures out of /metrics text: counters and histogram deltas between two scrapes."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: Samples, name: str, **match: str) -> float:
    return sum(v for (n, labels), v in samples.items()
               if n == name and all(dict(labels).get(k) == val for k, val in match.items()))


def histogram_delta(before: Samples, after: Samples, name: str, **match: str) -> dict[float, float]:
    """Cumulative bucket counts (le -> count) observed between two scrapes, summed over series."""
    buckets: dict[float, float] = {}
    for (n, labels), v in after.items():
        d = dict(labels)
        if n != f"{name}_bucket" or not all(d.get(k) == val for k, val in match.items()):
            continue
        le = float(d["le"])
        buckets[le] = buckets.get(le, 0.0) + v - before.get((n, labels), 0.0)
    return buckets


def quantile(buckets: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding the q-quantile (what a histogram can tell)."""
    count = buckets.get(float("inf"), 0.0)
    if count <= 0:
        return float("nan")
    for le in sorted(buckets):
        if buckets[le] >= q * count:
            return le
    return float("inf")
