"""How services write their log: text lines (the default) or, with the KubeletConfiguration's
`logging.format: json`, one JSON object per line with the kubelet's keys (ts, caller, msg, v, and
err for an exception), for log pipelines that parse the kubelet's JSON."""

from __future__ import annotations

import json
import logging
import sys

# klog's verbosity of a Python level: what pykubelet logs at INFO is the kubelet's V(0)-V(3)
# detail, DEBUG is V(4) and more.
_V = {logging.DEBUG: 4, logging.INFO: 0}


class JSONFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {"ts": round(record.created, 6), "caller": f"{record.module}.py:{record.lineno}",
                                  "msg": record.getMessage()}
        if record.levelno <= logging.INFO:
            out["v"] = _V.get(record.levelno, 0)
        else:
            out["level"] = record.levelname.lower()
        out.update(service=self.service, logger=record.name)
        if record.exc_info:
            out["err"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class EarlyRecords(logging.Handler):
    """What is logged before the configuration that says how to log is read (a deprecated flag's
    warning): kept, and written by setup_logging in the format the configuration names."""

    LIMIT = 1000  # a service logs a few lines while it reads its configuration

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < self.LIMIT:
            self.records.append(record)


def hold_early_logs() -> EarlyRecords:
    """Keep what is logged from now until setup_logging."""
    early = EarlyRecords()
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(early)
    root.setLevel(logging.INFO)
    return early


def setup_logging(service: str, fmt: str = "text", verbosity: int = 0, early: EarlyRecords | None = None) -> None:
    """Send the service's log to stderr in this format; verbosity 4 or more logs DEBUG too.
    early: what was logged before, written first in this format."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JSONFormatter(service))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {service} %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    set_verbosity(verbosity)
    for noisy in ("uvicorn.access", "nats", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for record in early.records if early else ():
        handler.handle(record)



def set_verbosity(verbosity: int) -> None:
    """The kubelet's -v for this process: 4 or more logs DEBUG too."""
    logging.getLogger().setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)
