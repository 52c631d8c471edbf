"""The services' log lines in the kubelet's JSON (logging.format json) and its verbosity."""

from __future__ import annotations

import json
import logging

from shared.process.log_format import JSONFormatter, setup_logging


def record(level: int, msg: str, exc: BaseException | None = None) -> logging.LogRecord:
    return logging.LogRecord("services.pod_sync.syncer", level, "/x/syncer.py", 42, msg, (),
                             (type(exc), exc, exc.__traceback__) if exc else None)


def test_info_debug_and_errors_in_the_kubelets_keys():
    f = JSONFormatter("pod-sync")
    info = json.loads(f.format(record(logging.INFO, "pod web: sandbox started")))
    assert info["msg"] == "pod web: sandbox started" and info["v"] == 0 and info["caller"] == "syncer.py:42"
    assert info["service"] == "pod-sync" and "level" not in info
    assert json.loads(f.format(record(logging.DEBUG, "detail")))["v"] == 4
    try:
        raise ValueError("boom")
    except ValueError as exc:
        err = json.loads(f.format(record(logging.ERROR, "sync failed", exc)))
    assert err["level"] == "error" and "ValueError: boom" in err["err"] and "v" not in err


def test_verbosity_four_logs_debug(capsys):
    setup_logging("probe", "json", verbosity=2)
    logging.getLogger("t").debug("hidden")
    setup_logging("probe", "json", verbosity=4)
    logging.getLogger("t").debug("shown")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [r["msg"] for r in lines] == ["shown"]
    setup_logging("probe")  # back to text for the other tests
