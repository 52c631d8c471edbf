"""The kubelet API's debugging switches. /debug/flags/v (enableDebugFlagsHandler, with enableDebuggingHandlers): a PUT
whose body is a verbosity sets every service's log verbosity at run time, as the kubelet's sets
its klog -v (component-base's GlogSetter, answered by apiserver's StringFlagPutHandler). The
value is the node's (shared/process/log_verbosity.py): node-api records it and wakes the other
services; a node-api restart returns them all to the configuration's `logging.verbosity`.

Also the kubelet's answers where a switch is off: /debug/pprof/ with enableProfilingHandler false,
and every debugging path (exec, attach, port-forward, run, container logs, running pods,
profiling, node logs) with enableDebuggingHandlers false."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from services.node_api.http import HTTPError, Request, Response
from shared.bus.client import Bus
from shared.bus.messages import LogVerbosityChanged
from shared.model.go_text import go_quote
from shared.process import log_verbosity
from shared.process.log_format import set_verbosity
from shared.store import Store

log = logging.getLogger(__name__)

PATH = "/debug/flags/v"
MAX_BODY = 64  # a verbosity is a few digits; the kubelet reads any body whole
FLAGS_DISABLED = "flags endpoint is disabled."
PROFILING_DISABLED = "profiling endpoint is disabled."
DEBUGGING_DISABLED = "Debug endpoints are disabled."
# What the kubelet answers DEBUGGING_DISABLED at when enableDebuggingHandlers is false, each with
# everything below it (its InstallDebuggingDisabledHandlers).
DEBUGGING_PATHS = ("/run", "/exec", "/attach", "/portForward", "/containerLogs", "/runningpods", "/debug/pprof",
                   "/logs")
_UINT32_MAX = 2**32 - 1
_INT32_MAX = 2**31 - 1


class VerbosityError(ValueError):
    """A body the kubelet's setter refuses; the message is the kubelet's."""


def parse_verbosity(body: bytes) -> int:
    """The body as GlogSetter takes it: strconv.ParseUint(body, 10, 32), then klog's Level.Set
    (strconv.ParseInt(body, 10, 32)). The body is used as sent: "4\\n" is not a number to Go."""
    text = body.decode("utf-8", "surrogateescape")
    quoted = go_quote(text)
    if not text or not text.isascii() or not text.isdigit():
        raise VerbosityError(f"strconv.ParseUint: parsing {quoted}: invalid syntax")
    value = int(text)
    if value > _UINT32_MAX:
        raise VerbosityError(f"strconv.ParseUint: parsing {quoted}: value out of range")
    if value > _INT32_MAX:
        raise VerbosityError(f"failed set klog.logging.verbosity {text}: strconv.ParseInt: parsing {quoted}: "
                             "value out of range")
    return value


def _plain(status: int, text: str) -> Response:
    """apiserver's writePlainText: the text and a newline, as text/plain."""
    return Response(status, (text + "\n").encode(), "text/plain", [("X-Content-Type-Options", "nosniff")])


@dataclass
class DebugFlags:
    store: Store
    bus: Bus
    configured: int  # the configuration's logging.verbosity

    async def start(self) -> None:
        """A (re)started node-api is a restarted kubelet: the run-time verbosity is forgotten."""
        await self.store.run(log_verbosity.clear, self.store)
        await self.bus.publish(LogVerbosityChanged())
        set_verbosity(self.configured)

    async def verbosity(self, req: Request) -> Response:
        if req.method != "PUT":
            return _plain(406, "unsupported http method")
        try:
            value = parse_verbosity(req.body)
        except VerbosityError as exc:
            return _plain(400, str(exc))
        await self.store.run(log_verbosity.record, self.store, value, self.configured)
        set_verbosity(value)
        await self.bus.publish(LogVerbosityChanged())
        log.info("log verbosity set to %d through %s by %s", value, PATH, getattr(req.user, "name", "?"))
        return _plain(200, f"successfully set klog.logging.verbosity to {value}")


async def flags_disabled(req: Request) -> Response:
    raise HTTPError(405, FLAGS_DISABLED)


async def profiling_disabled(req: Request) -> Response:
    raise HTTPError(405, PROFILING_DISABLED)


async def debugging_disabled(req: Request) -> Response:
    raise HTTPError(405, DEBUGGING_DISABLED)
