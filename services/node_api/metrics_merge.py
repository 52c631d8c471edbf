"""The kubelet's /metrics for a node of seven processes: every service's admin /metrics in one.

Each service exports its own prometheus_client registry on its loopback admin app. The kubelet
API serves one exposition (text format 0.0.4) made of them:

- a family only one source exports passes through unchanged;
- counters, histograms and summaries exported by several sources are summed sample by sample
  (each process counts its own events, so the node's count is the sum); their prometheus_client
  `_created` gauges keep the earliest time; a summary's quantiles cannot be summed and are left
  out, and histogram buckets are summed only where every source has the same boundary;
- gauges (and untyped families) exported by several sources get a `service` label: a gauge is
  a per-process reading (in flight, last seen, connected) that may not add up, so each keeps
  its own value and a user sums or maxes it in the query if that makes sense;
- process_* and python_* describe one service process and are left out of the services' texts;
  the caller's own exposition (`own`) is included whole, so they describe the node-api process,
  and `pykubelet_service_up{service}` says which services were scraped.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from shared.process.http_body import read_at_most

log = logging.getLogger(__name__)

# The format rendered here. prometheus_client 0.26's CONTENT_TYPE_LATEST says version=1.0.0,
# which allows UTF-8 names; this output keeps to 0.0.4 names, as the kubelet's does.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UP_FAMILY = "pykubelet_service_up"
SERVICE_LABEL = "service"
# What the kubelet 1.20 registers for /metrics/probes: the prober counter and its process start time.
PROBES_FAMILIES = frozenset({"prober_probe_total", "process_start_time_seconds"})
PER_PROCESS_PREFIXES = ("process_", "python_")
MAX_BODY_BYTES = 16 * 1024 * 1024

_ACCEPT = "text/plain; version=0.0.4"
_SUMMED = frozenset({"counter", "histogram", "summary"})
_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")

Labels = tuple[tuple[str, str], ...]  # sorted by label name


class ScrapeError(Exception):
    """One service's /metrics could not be read."""


class _Sample(NamedTuple):
    name: str
    labels: Labels
    value: float
    timestamp: float | None = None


@dataclass
class _Family:
    name: str  # as the parser names it: a counter without its _total
    type: str
    help: str
    samples: list[_Sample] = field(default_factory=list)
    # prometheus_client writes a counter's, histogram's or summary's creation time as a
    # separate gauge family <name>_created.
    created_of_summed: bool = False

    @property
    def exposed(self) -> str:
        return self.name + "_total" if self.type == "counter" else self.name

    def kind(self) -> tuple[str, bool]:
        return self.type, self.created_of_summed


# -- scraping -----------------------------------------------------------------------------------


async def scrape_all(targets: Mapping[str, str], client: httpx.AsyncClient,
                     timeout: float) -> dict[str, str | Exception]:
    """Each service's /metrics text by service name, or the ScrapeError that kept it away.

    All targets are asked at once and each is bounded by `timeout` in total (connect, wait and
    body), so one hung service costs the caller at most `timeout`.
    """
    async def one(url: str) -> str | Exception:
        try:
            async with asyncio.timeout(timeout):
                return await _fetch(client, url, timeout)
        except TimeoutError:
            return ScrapeError(f"GET {url}: no answer within {timeout:g}s")
        except ScrapeError as exc:
            return exc
        except Exception as exc:  # connection refused, reset, bad encoding: reported, not fatal
            err = ScrapeError(f"GET {url}: {type(exc).__name__}: {exc}")
            err.__cause__ = exc
            return err

    results = await asyncio.gather(*(one(url) for url in targets.values()))
    return dict(zip(targets, results, strict=True))


async def _fetch(client: httpx.AsyncClient, url: str, timeout: float) -> str:
    async with client.stream("GET", url, headers={"Accept": _ACCEPT},
                             timeout=httpx.Timeout(timeout)) as resp:
        if resp.status_code != 200:
            raise ScrapeError(f"GET {url}: HTTP {resp.status_code}")
        body = await read_at_most(resp, MAX_BODY_BYTES)
        if body is None:
            raise ScrapeError(f"GET {url}: body larger than {MAX_BODY_BYTES} bytes")
    return body.decode("utf-8")


# -- merging ------------------------------------------------------------------------------------


def merge_expositions(texts: Mapping[str, str | BaseException], own: str | None = None, *,
                      own_service: str = "node-api") -> str:
    """One text exposition of the node from each service's /metrics text.

    `texts` maps service name to its /metrics text; a value that is not text (the exception
    scrape_all returned) or text that does not parse counts as a failed scrape. `own` is this
    process's exposition (generate_latest()), included whole as service `own_service`.
    """
    if own is not None and own_service in texts:
        raise ValueError(f"{own_service!r} is both a scraped service and the caller")
    up: dict[str, int] = {}
    sources: list[tuple[str, dict[str, _Family]]] = []
    inputs: list[tuple[str, str | BaseException, bool]] = []
    if own is not None:
        inputs.append((own_service, own, True))
    inputs += [(service, text, False) for service, text in texts.items()]
    for service, text, is_own in inputs:
        if not isinstance(text, str):
            up[service] = 0
            continue
        try:
            families = _parse(text)
        except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad text
            log.warning("metrics of %s are not a valid text exposition and are left out: %s",
                        service, exc)
            up[service] = 0
            continue
        up[service] = 1
        families.pop(UP_FAMILY, None)
        if not is_own:
            families = {n: f for n, f in families.items() if not n.startswith(PER_PROCESS_PREFIXES)}
        sources.append((service, families))

    by_name: dict[str, list[tuple[str, _Family]]] = {}
    for service, families in sources:
        for name, fam in families.items():
            by_name.setdefault(name, []).append((service, fam))

    merged = [_merge_family(name, parts) for name, parts in by_name.items()]
    merged.append(_Family(UP_FAMILY, "gauge",
                          "Whether the node-api could read this pykubelet service's metrics "
                          "(1) or not (0).",
                          [_Sample(UP_FAMILY, ((SERVICE_LABEL, s),), float(v))
                           for s, v in sorted(up.items())]))
    return _render(sorted(merged, key=_order))


def filter_families(text: str, names: set[str] | frozenset[str]) -> str:
    """The families of `text` that `names` names, with their prometheus_client _created gauges.

    A counter may be named as exposed (prober_probe_total) or without _total.
    """
    families = _parse(text)
    chosen = {n for n, f in families.items() if n in names or f.exposed in names}
    chosen |= {n for n, f in families.items()
               if f.created_of_summed and n.removesuffix("_created") in chosen}
    return _render(sorted((families[n] for n in chosen), key=_order))


def _order(f: _Family) -> tuple[str, bool]:
    # By name, each _created gauge right after its family, as prometheus_client writes them.
    base = f.name.removesuffix("_created") if f.created_of_summed else f.name
    return base, f.created_of_summed


def _parse(text: str) -> dict[str, _Family]:
    """The families of one exposition by parser name; ValueError when it is not valid 0.0.4."""
    families: dict[str, _Family] = {}
    for m in text_string_to_metric_families(text):
        typ = m.type if m.type in _TYPES else "untyped"
        fam = families.setdefault(m.name, _Family(m.name, typ, m.documentation))
        # The parser yields each sample of an untyped family without TYPE as its own family.
        if fam.type != typ:
            raise ValueError(f"{m.name} appears both as {fam.type} and as {typ}")
        if not _METRIC_NAME.match(fam.exposed):
            raise ValueError(f"invalid metric name {fam.exposed!r}")
        for s in m.samples:
            for label in s.labels:
                if not _LABEL_NAME.match(label):
                    raise ValueError(f"invalid label name {label!r} in {s.name}")
            if typ == "histogram" and s.name == m.name + "_bucket":
                float(s.labels.get("le", "missing le"))  # ValueError names the bad bound
            # The text format's timestamps are plain numbers (a Timestamp only comes from OpenMetrics).
            stamp = float(s.timestamp) if s.timestamp is not None else None
            fam.samples.append(_Sample(s.name, tuple(sorted(s.labels.items())), s.value, stamp))
    bases = {n for n, f in families.items() if f.type in _SUMMED}
    for n, f in families.items():
        f.created_of_summed = (f.type == "gauge" and n.endswith("_created")
                               and n.removesuffix("_created") in bases)
    return families


def _merge_family(name: str, parts: list[tuple[str, _Family]]) -> _Family:
    first = parts[0][1]
    same = [(s, f) for s, f in parts if f.kind() == first.kind()]
    if len(same) < len(parts):
        log.warning("%s has different types in %s; only the %s one(s) are kept", first.exposed,
                    ", ".join(f"{s} ({f.type})" for s, f in parts), first.type)
    out = _Family(name, first.type, first.help, created_of_summed=first.created_of_summed)
    if len(same) == 1:
        out.samples = list(first.samples)
    elif first.created_of_summed:
        out.samples = _earliest([f for _, f in same])
    elif first.type in _SUMMED:
        out.samples = _summed([f for _, f in same])
    else:
        out.samples = [s._replace(labels=_with_service(s.labels, service))
                       for service, f in same for s in f.samples]
    return out


def _earliest(fams: list[_Family]) -> list[_Sample]:
    first: dict[tuple[str, Labels], float] = {}
    for f in fams:
        for s in f.samples:
            key = (s.name, s.labels)
            first[key] = min(first.get(key, s.value), s.value)
    return [_Sample(n, labels, v) for (n, labels), v in first.items()]


def _summed(fams: list[_Family]) -> list[_Sample]:
    typ, bucket = fams[0].type, fams[0].name + "_bucket"
    common, le_text = _common_buckets(fams) if typ == "histogram" else ({}, {})
    totals: dict[tuple[str, Labels], float] = {}
    dropped = 0
    for f in fams:
        for s in f.samples:
            labels = s.labels
            if typ == "summary" and any(k == "quantile" for k, _ in labels):
                dropped += 1
                continue
            if typ == "histogram" and s.name == bucket:
                rest, le = _split_le(labels)
                if le not in common[rest]:
                    dropped += 1
                    continue
                labels = tuple(sorted(rest + (("le", le_text[rest, le]),)))
            key = (s.name, labels)
            totals[key] = totals.get(key, 0) + s.value
    if dropped:
        log.warning("%s: %d samples cannot be summed across services (summary quantiles, or "
                    "histogram buckets not every service has) and are left out",
                    fams[0].exposed, dropped)
    return [_Sample(n, labels, v) for (n, labels), v in totals.items()]


def _common_buckets(fams: list[_Family]) -> tuple[dict[Labels, set[float]],
                                                  dict[tuple[Labels, float], str]]:
    """Per series, the bucket bounds every source of that series has, and how each is written."""
    common: dict[Labels, set[float]] = {}
    le_text: dict[tuple[Labels, float], str] = {}
    for f in fams:
        mine: dict[Labels, set[float]] = {}
        for s in f.samples:
            if s.name == f.name + "_bucket":
                rest, le = _split_le(s.labels)
                mine.setdefault(rest, set()).add(le)
                le_text.setdefault((rest, le), dict(s.labels)["le"])
        for rest, bounds in mine.items():
            common[rest] = common[rest] & bounds if rest in common else bounds
    return common, le_text


def _split_le(labels: Labels) -> tuple[Labels, float]:
    # Compared as numbers: Go writes le="1", prometheus_client le="1.0".
    return tuple(kv for kv in labels if kv[0] != "le"), float(dict(labels)["le"])


def _with_service(labels: Labels, service: str) -> Labels:
    d = dict(labels)
    if SERVICE_LABEL in d:  # the source's own label stays visible, as Prometheus does it
        d["exported_" + SERVICE_LABEL] = d.pop(SERVICE_LABEL)
    d[SERVICE_LABEL] = service
    return tuple(sorted(d.items()))


# -- rendering ----------------------------------------------------------------------------------


def _render(families: Iterable[_Family]) -> str:
    out: list[str] = []
    names: set[str] = set()
    samples: set[tuple[str, Labels]] = set()
    for f in families:
        # A counter foo_total parses back as family foo: both names are taken by it.
        taken = {f.exposed, f.name}
        if taken & names:
            log.warning("%s clashes with a family of the same name and is left out", f.exposed)
            continue
        names |= taken
        if f.help:
            out.append(f"# HELP {f.exposed} {_escape_help(f.help)}\n")
        out.append(f"# TYPE {f.exposed} {f.type}\n")
        for s in f.samples:
            key = (s.name, s.labels)
            if key in samples:
                log.warning("duplicate sample %s%s left out", s.name, dict(s.labels))
                continue
            samples.add(key)
            out.append(_sample_line(s))
    return "".join(out)


def _sample_line(s: _Sample) -> str:
    labels = ""
    if s.labels:
        labels = "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels) + "}"
    ts = "" if s.timestamp is None else f" {round(s.timestamp * 1000)}"
    value: str = floatToGoString(s.value)  # type: ignore[no-untyped-call]  # prometheus_client's, unannotated
    return f"{s.name}{labels} {value}{ts}\n"


def _escape_label(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n")
