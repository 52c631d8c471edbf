"""/logs/ (services/node_api/system_logs.py) over a stand-in /var/log: what Go's http.FileServer
answers, and the paths an attacker would try."""

from __future__ import annotations

import os

import pytest

from services.node_api.http import HTTPError, Request
from services.node_api.kubelet_api import KubeletAPI
from services.node_api.system_logs import SystemLogs, content_type
from shared.runtime.cri.fake import FakeRuntime
from tests.unit.var_log import body, stand_in_var_log


def get(path: str, method: str = "GET") -> Request:
    return Request(method, path, {}, {}, [], None)


@pytest.fixture
def var_log(tmp_path):
    return stand_in_var_log(tmp_path)


async def test_a_directory_is_listed_as_go_lists_it(var_log):
    resp = await SystemLogs(var_log).serve(get("/logs/"))
    assert resp.status == 200 and resp.content_type == "text/html; charset=utf-8"
    assert (await body(resp)).decode() == (
        '<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n'
        '<a href="a%20b%26%3Cc%3E.log">a b&amp;&lt;c&gt;.log</a>\n<a href="apt/">apt/</a>\n'
        '<a href="containers/">containers/</a>\n<a href="escape">escape</a>\n<a href="escape-dir/">escape-dir/</a>\n'
        '<a href="pipe">pipe</a>\n<a href="syslog">syslog</a>\n</pre>\n')


async def test_files_are_sent_whole_with_their_length_and_type(var_log):
    resp = await SystemLogs(var_log).serve(get("/logs/syslog"))
    assert (resp.status, resp.content_type) == (200, "text/plain; charset=utf-8")
    assert ("Content-Length", "18") in resp.headers
    assert await body(resp) == b"line one\nline two\n"
    assert await body(await SystemLogs(var_log).serve(get("/logs/apt/history.log"))) == b"Start-Date: 2026-12-06\n"
    assert await body(await SystemLogs(var_log).serve(get("/logs/a%20b%26%3Cc%3E.log"))) == b"odd name\n"
    assert await body(await SystemLogs(var_log).serve(get("/logs/containers/app.log"))) == b"line one\nline two\n"


async def test_a_file_that_grows_while_sent_is_sent_at_the_length_announced(var_log):
    resp = await SystemLogs(var_log).serve(get("/logs/syslog"))
    with open(var_log / "syslog", "a") as f:
        f.write("line three\n")
    assert await body(resp) == b"line one\nline two\n"


async def test_a_head_request_leaves_no_file_open(var_log):
    before = len(os.listdir("/proc/self/fd"))
    resp = await SystemLogs(var_log).serve(get("/logs/syslog", "HEAD"))
    await resp.body.aclose()
    assert len(os.listdir("/proc/self/fd")) == before


async def test_directories_and_files_are_redirected_to_their_right_spelling(var_log):
    resp = await SystemLogs(var_log).serve(get("/logs/apt"))
    assert resp.status == 301 and ("Location", "apt/") in resp.headers
    resp = await SystemLogs(var_log).serve(get("/logs/syslog/"))
    assert resp.status == 301 and ("Location", "../syslog") in resp.headers


@pytest.mark.parametrize("path,status,needle", [
    ("/logs/missing", 404, "404 page not found"),
    ("/logs/syslog/more", 404, "404 page not found"),
    ("/logs/escape", 403, "leads outside"),
    ("/logs/escape-dir/secret", 403, "leads outside"),
    ("/logs/escape-dir/", 403, "leads outside"),
    ("/logs/pipe", 403, "is not a regular file"),
    ("/logs/%00", 400, "NUL byte"),
    ("/logs/%ff", 400, "not valid UTF-8"),
])
async def test_what_is_not_served(var_log, path, status, needle):
    with pytest.raises(HTTPError) as exc:
        await SystemLogs(var_log).serve(get(path))
    assert exc.value.status == status and needle in exc.value.message


@pytest.mark.parametrize("path", ["/logs/../secret", "/logs/apt/../../secret", "/logs/%2e%2e/secret",
                                  "/logs/..%2fsecret", "/logs//../secret"])
async def test_dot_dot_never_climbs_out(var_log, path):
    with pytest.raises(HTTPError) as exc:
        await SystemLogs(var_log).serve(get(path))
    assert exc.value.status == 404, "cleaned to a path below the log dir, where there is no such file"


async def test_an_index_html_answers_for_its_directory(var_log):
    (var_log / "apt" / "index.html").write_text("<p>apt</p>")
    resp = await SystemLogs(var_log).serve(get("/logs/apt/"))
    assert resp.content_type == "text/html; charset=utf-8" and await body(resp) == b"<p>apt</p>"


def test_content_types():
    assert content_type("kern.log", b"plain text\n") == "text/plain; charset=utf-8"
    assert content_type("wtmp", b"\x07\x00\x00\x00binary") == "application/octet-stream"
    assert content_type("syslog.2.gz", b"\x1f\x8b") == "application/gzip"
    assert content_type("cut", "é".encode() * 255 + b"\xc3") == "text/plain; charset=utf-8"


async def test_the_routes_follow_the_settings(settings, store):
    async def no_metrics() -> str:
        return ""

    def routes(read_only: bool = False):
        api = KubeletAPI(settings, store, FakeRuntime(), None, no_metrics)  # type: ignore[arg-type]
        return api.routes(read_only=read_only)

    route, params = routes().match("GET", "/logs/apt/history.log")
    assert params == {"logpath": "apt/history.log"}
    assert routes().match("GET", "/logs/")[1] == {"logpath": ""}
    with pytest.raises(HTTPError) as exc:
        routes().match("POST", "/logs/syslog")
    assert exc.value.status == 405, "GET only"
    with pytest.raises(HTTPError) as exc:
        routes().match("GET", "/logs")
    assert exc.value.status == 404, "as the kubelet's StripPrefix(/logs/)"
    with pytest.raises(HTTPError) as exc:
        routes(read_only=True).match("GET", "/logs/")
    assert exc.value.status == 404, "never on the read-only port"

    settings.kubelet.enable_system_log_handler = False
    for path in ("/logs", "/logs/syslog"):
        route, _ = routes().match("GET", path)
        with pytest.raises(HTTPError) as exc:
            await route.handler(get(path))
        assert (exc.value.status, exc.value.message) == (405, "logs endpoint is disabled."), "the kubelet's answer"
    settings.kubelet.enable_system_log_handler, settings.kubelet.enable_debugging_handlers = True, False
    route, _ = routes().match("GET", "/logs/")
    with pytest.raises(HTTPError) as exc:
        await route.handler(get("/logs/"))
    assert (exc.value.status, exc.value.message) == (405, "Debug endpoints are disabled."), "the kubelet's answer"
