"""Times as the Kubernetes API writes them: RFC 3339 in UTC to the second ("2026-12-05T12:00:00Z")."""

from __future__ import annotations

from datetime import datetime, timezone


def rfc3339(when: datetime | float | None = None) -> str:
    """`when` (a datetime, naive ones being UTC, or epoch seconds; None: now) as the API spells it."""
    if when is None:
        when = datetime.now(timezone.utc)
    elif not isinstance(when, datetime):
        when = datetime.fromtimestamp(when, timezone.utc)
    elif when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_time(ts: float | None) -> str | None:
    """A metav1.Time from epoch seconds: the zero time (0 or None) is null."""
    return rfc3339(ts) if ts else None
