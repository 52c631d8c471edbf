"""PUT /debug/flags/v (enableDebugFlagsHandler) over a real store file: the kubelet's answers and
Go's words for a body it refuses, the verbosity recorded for every service and the bus woken,
a service following it (and not a row set over another configuration), node-api's start
clearing it, and the route answering "disabled" when the field is false."""

from __future__ import annotations

import logging

import pytest

from services.node_api.debug_flags import DebugFlags, VerbosityError, parse_verbosity
from services.node_api.http import HTTPError, Request
from services.node_api.kubelet_api import KubeletAPI
from shared.bus.messages import LogVerbosityChanged
from shared.process import log_verbosity
from shared.runtime.cri.fake import FakeRuntime
from shared.store import Store


class RecordingBus:
    """What DebugFlags and log_verbosity.follow use of the bus: publish, and subscribe whose
    handlers publish() calls as the server would deliver."""

    def __init__(self) -> None:
        self.published: list[object] = []
        self.handlers: list = []

    async def publish(self, event: object) -> None:
        self.published.append(event)
        for handler in self.handlers:
            await handler(event)

    async def subscribe(self, _event_type: type, handler) -> None:
        self.handlers.append(handler)


@pytest.fixture
def node_api_store(settings):
    s = Store(settings.store_path, writer="node-api")
    s.create_schema()
    yield s
    s.close()


@pytest.fixture
def probe_store(settings, node_api_store):
    s = Store(settings.store_path, writer="probe")
    yield s
    s.close()


def put(body: bytes, method: str = "PUT") -> Request:
    return Request(method, "/debug/flags/v", {}, {}, [], None, body=body)


@pytest.fixture(autouse=True)
def _restore_root_level():
    level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(level)


@pytest.mark.parametrize(("body", "message"), [
    (b"4\n", 'strconv.ParseUint: parsing "4\\n": invalid syntax'),
    (b"", 'strconv.ParseUint: parsing "": invalid syntax'),
    (b"-1", 'strconv.ParseUint: parsing "-1": invalid syntax'),
    (b"+4", 'strconv.ParseUint: parsing "+4": invalid syntax'),
    (b"\xd9\xa3", 'strconv.ParseUint: parsing "\u0663": invalid syntax'),  # ARABIC-INDIC DIGIT THREE
    (b"\xff4\x00", 'strconv.ParseUint: parsing "\\xff4\\x00": invalid syntax'),  # not UTF-8, a NUL
    (b'4"; rm -rf /', 'strconv.ParseUint: parsing "4\\"; rm -rf /": invalid syntax'),
    (b"4294967296", 'strconv.ParseUint: parsing "4294967296": value out of range'),
    (b"2147483648", 'failed set klog.logging.verbosity 2147483648: strconv.ParseInt: parsing "2147483648": '
                    'value out of range'),
])
def test_a_body_go_cannot_parse_is_refused_with_gos_words(body, message):
    with pytest.raises(VerbosityError) as exc:
        parse_verbosity(body)
    assert str(exc.value) == message


def test_a_verbosity_is_taken_as_sent():
    assert [parse_verbosity(b) for b in (b"0", b"4", b"10", b"2147483647")] == [0, 4, 10, 2147483647]


async def test_put_records_the_verbosity_for_every_service_and_wakes_them(node_api_store, probe_store):
    bus = RecordingBus()
    flags = DebugFlags(node_api_store, bus, configured=2)  # type: ignore[arg-type]
    resp = await flags.verbosity(put(b"5"))
    assert (resp.status, resp.body, resp.content_type) == (200, b"successfully set klog.logging.verbosity to 5\n",
                                                          "text/plain")
    assert [type(e) for e in bus.published] == [LogVerbosityChanged]
    assert logging.getLogger().level == logging.DEBUG
    # Another service reads it, while its configuration says what it said when it was set.
    assert log_verbosity.effective_verbosity(probe_store, 2) == 5
    assert log_verbosity.effective_verbosity(probe_store, 3) == 3, "a row set over another configuration"

    bad = await flags.verbosity(put(b"five"))
    assert (bad.status, bad.body) == (400, b'strconv.ParseUint: parsing "five": invalid syntax\n')
    assert log_verbosity.effective_verbosity(probe_store, 2) == 5, "a refused body changes nothing"
    for method in ("GET", "POST", "DELETE"):
        other = await flags.verbosity(put(b"", method))
        assert (other.status, other.body) == (406, b"unsupported http method\n")


async def test_a_service_follows_the_node_verbosity_and_node_api_start_clears_it(node_api_store, probe_store, caplog):
    bus = RecordingBus()
    root = logging.getLogger()
    await log_verbosity.follow(probe_store, bus, configured=0)  # type: ignore[arg-type]
    assert root.level == logging.INFO
    flags = DebugFlags(node_api_store, bus, configured=0)  # type: ignore[arg-type]
    with caplog.at_level(logging.NOTSET):
        await flags.verbosity(put(b"4"))
        assert root.level == logging.DEBUG
        assert ("shared.process.log_verbosity", logging.DEBUG, "log verbosity 4 (was 0)") in caplog.record_tuples
        # node-api starts again: the row is gone and the service is back at its configuration.
        await flags.start()
    assert log_verbosity.effective_verbosity(probe_store, 0) == 0
    assert root.level == logging.INFO
    assert ("shared.process.log_verbosity", logging.INFO,
            "log verbosity 0 (was 4), the configuration's") in caplog.record_tuples


async def _no_metrics() -> str:
    return ""


def test_the_route_answers_disabled_when_the_field_is_false(settings, node_api_store):
    flags = DebugFlags(node_api_store, RecordingBus(), 0)  # type: ignore[arg-type]
    api = KubeletAPI(settings, node_api_store, FakeRuntime(), None, _no_metrics,  # type: ignore[arg-type]
                     debug_flags=flags)
    route, _ = api.routes().match("PUT", "/debug/flags/v")
    assert route.handler == flags.verbosity and route.max_body == 64
    assert api.routes().match("GET", "/debug/flags/v")[0].handler == flags.verbosity, "406 comes from the handler"
    with pytest.raises(HTTPError) as exc:
        api.routes(read_only=True).match("PUT", "/debug/flags/v")
    assert exc.value.status == 404, "never on the read-only port"

    settings.kubelet.enable_debug_flags_handler = False
    route, _ = api.routes().match("PUT", "/debug/flags/v")
    with pytest.raises(HTTPError) as exc:
        import asyncio
        asyncio.run(route.handler(put(b"4")))
    assert (exc.value.status, exc.value.message) == (405, "flags endpoint is disabled.")


def test_the_profiling_endpoint_answers_disabled_when_the_field_is_false(settings, node_api_store):
    """enableProfilingHandler false: the kubelet's 405 at /debug/pprof/ and below; true (the
    default): pykubelet has no Go profiles to serve there."""
    api = KubeletAPI(settings, node_api_store, FakeRuntime(), None, _no_metrics)  # type: ignore[arg-type]
    for path in ("/debug/pprof/", "/debug/pprof/profile"):
        with pytest.raises(HTTPError) as exc:
            api.routes().match("GET", path)
        assert exc.value.status == 404
    settings.kubelet.enable_profiling_handler = False
    import asyncio
    for path in ("/debug/pprof/", "/debug/pprof/profile", "/debug/pprof/goroutine"):
        route, _ = api.routes().match("GET", path)
        with pytest.raises(HTTPError) as exc:
            asyncio.run(route.handler(put(b"", "GET")))
        assert (exc.value.status, exc.value.message) == (405, "profiling endpoint is disabled."), path
