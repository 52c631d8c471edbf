"""Times as the API spells them (shared/model/timestamps.py)."""

from datetime import datetime, timedelta, timezone

from shared.model.timestamps import api_time, rfc3339


def test_every_kind_of_time_is_utc_to_the_second():
    assert rfc3339(0.0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1_800_000_000.9) == "2027-01-15T08:00:00Z", "fractions are dropped, not rounded"
    assert rfc3339(datetime(2026, 12, 5, 12, 0, 1)) == "2026-12-05T12:00:01Z", "a naive datetime is UTC"
    assert rfc3339(datetime(2026, 12, 5, 13, 0, 1, tzinfo=timezone(timedelta(hours=1)))) == "2026-12-05T12:00:01Z"
    assert rfc3339().endswith("Z") and len(rfc3339()) == 20


def test_the_zero_time_is_null():
    assert api_time(0) is None and api_time(None) is None
    assert api_time(1.0) == "1970-01-01T00:00:01Z"
