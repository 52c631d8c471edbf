"""Go-style durations ("1m0s", "20s", "500ms") as the kubelet's config file writes them."""

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Return seconds for a Go duration string; raise ValueError naming what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"expected a duration string like '20s' or '1m0s', got {text!r}")
    s = text.strip()
    if s in ("0", ""):
        if s == "":
            raise ValueError("empty duration")
        return 0.0
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}: use a number and unit, e.g. '20s', '1m0s', '500ms'")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Format like Go's time.Duration.String() (below a second in ms, µs or ns, as Go does)."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        nanos = round(seconds * 1e9)
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size or unit == "ns":
                whole, part = divmod(nanos, size)
                fraction = f"{part:0{len(str(size)) - 1}d}".rstrip("0") if size > 1 else ""
                return f"{whole}{'.' + fraction if fraction else ''}{unit}"
    whole = int(seconds)
    frac = seconds - whole
    h, rem = divmod(whole, 3600)
    m, s = divmod(rem, 60)
    sec = f"{s + frac:g}s"
    if h:
        return f"{h}h{m}m{sec}"
    if m:
        return f"{m}m{sec}"
    return sec


def to_seconds(v: object) -> float:
    """A config value in seconds: a number as is, or a Go duration string; never negative."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        seconds = float(v)
    else:
        seconds = parse_duration(v)  # type: ignore[arg-type]
    if seconds < 0:
        raise ValueError("must not be negative")
    return seconds
