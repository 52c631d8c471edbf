"""Node log query (enableSystemLogQuery, services/node_api/log_query.py) over a stand-in /var/log
and a stand-in journalctl: the kubelet 1.37's answers, word for word, and what an attacker would
put in a query."""

from __future__ import annotations

import gzip
import stat

import pytest

from services.node_api.http import HTTPError, Request
from services.node_api.log_query import NodeLogQuery, go_regexp_error, journalctl_args, parse
from services.node_api.system_logs import SystemLogs
from shared.config.settings import KubeletConfiguration
from tests.unit.var_log import body, stand_in_var_log

# A journalctl that knows one unit, fake.service, and prints the arguments it was run with.
FAKE_JOURNALCTL = """#!/bin/sh
if [ "$1" = "--field" ]; then echo "other.service"; echo "fake.service"; exit 0; fi
for a in "$@"; do echo "arg:$a"; done
"""


def get(path: str, query: dict[str, list[str]] | None = None, **headers: str) -> Request:
    return Request("GET", path, query or {}, {k.replace("_", "-"): v for k, v in headers.items()}, [], None)


@pytest.fixture
def var_log(tmp_path):
    root = stand_in_var_log(tmp_path)
    (root / "apt" / "apt.log").write_text("apt's own\n")
    (root / "cloud-init.log").write_text("cloud\n")
    return root


@pytest.fixture
def logs(var_log, tmp_path) -> SystemLogs:
    journalctl = tmp_path / "journalctl"
    journalctl.write_text(FAKE_JOURNALCTL)
    journalctl.chmod(journalctl.stat().st_mode | stat.S_IXUSR)
    return SystemLogs(var_log, NodeLogQuery(var_log, str(journalctl)))


async def refused(logs: SystemLogs, query: dict[str, list[str]], path: str = "/logs/") -> tuple[int, str]:
    with pytest.raises(HTTPError) as exc:
        await logs.serve(get(path, query))
    return exc.value.status, exc.value.message


async def test_a_service_the_journal_knows_is_read_with_the_kubelets_journalctl_command(logs):
    resp = await logs.serve(get("/logs/", {"query": ["fake"], "sinceTime": ["2026-01-02T03:04:05+01:00"],
                                           "untilTime": ["2026-01-02T13:00:00Z"], "tailLines": ["5"],
                                           "pattern": ["err(or)?"], "boot": ["-1"]}))
    assert (resp.status, resp.content_type) == (200, "text/plain;charset=UTF-8")
    assert (await body(resp)).decode().splitlines() == [
        "arg:--utc", "arg:--no-pager", "arg:--output=short-precise", "arg:--since=2026-1-2 3:4:5",
        "arg:--until=2026-1-2 13:0:0", "arg:--pager-end", "arg:--lines=5", "arg:--unit=fake",
        "arg:--grep=err(or)?", "arg:--boot", "arg:-1"]


async def test_a_journal_answer_is_gzipped_when_the_client_asks_exactly_for_gzip(logs):
    resp = await logs.serve(get("/logs/", {"query": ["fake"]}, accept_encoding="gzip"))
    assert ("Content-Encoding", "gzip") in resp.headers
    assert gzip.decompress(await body(resp)).decode().splitlines()[-1] == "arg:--unit=fake"
    resp = await logs.serve(get("/logs/", {"query": ["fake"]}, accept_encoding="gzip, deflate"))
    assert resp.headers == [] and (await body(resp)).startswith(b"arg:--utc"), "as Go compares the header"


async def test_a_service_without_a_journal_unit_is_read_from_var_log_by_the_kubelets_names(logs):
    read = [(await body(await logs.serve(get("/logs/", {"query": [name]})))).decode()
            for name in ("syslog", "cloud-init", "apt", "missing")]
    assert read == ["line one\nline two\n", "cloud\n", "apt's own\n", "\nlog not found for missing\n"]
    both = await body(await logs.serve(get("/logs/", {"query": ["syslog", "cloud-init"]})))
    assert both == b"line one\nline two\ncloud\n"
    with_options = await body(await logs.serve(get("/logs/", {"query": ["syslog"], "tailLines": ["1"]})))
    assert with_options == (b"\noptions present and query resolved to log files for [syslog]\n"
                            b"try without specifying options\n")


async def test_a_query_with_a_slash_names_a_file_below_var_log(logs):
    resp = await logs.serve(get("/logs/", {"query": ["apt/history.log"]}))
    assert (resp.status, await body(resp)) == (200, b"Start-Date: 2026-12-06\n")
    assert await refused(logs, {"query": ["apt/nothing.log"]}) == (
        406, 'query: Invalid value: ["apt/nothing.log"]: statat apt/nothing.log: no such file or directory')


async def test_a_request_without_query_parameters_is_a_file_request(logs):
    assert await body(await logs.serve(get("/logs/syslog"))) == b"line one\nline two\n"
    assert await body(await logs.serve(get("/logs/syslog", {"other": ["x"]}))) == b"line one\nline two\n"
    assert parse({}) is None and parse({"unknown": ["1"]}) is None


async def test_values_that_do_not_parse_are_refused_400_in_the_kubelets_words(logs):
    assert await refused(logs, {"tailLines": ["x"]}) == (
        400, 'tailLines: Invalid value: "x": strconv.Atoi: parsing "x": invalid syntax')
    assert await refused(logs, {"query": ["  "], "sinceTime": ["yesterday"], "boot": ["99999999999999999999"]}) == (
        400, '[query: Invalid value: ["  "]: may not be empty, sinceTime: Invalid value: "yesterday": invalid time '
             'format, boot: Invalid value: "99999999999999999999": strconv.Atoi: parsing "99999999999999999999": '
             'value out of range]')
    assert (await refused(logs, {"untilTime": ["2026-02-30T00:00:00Z"]}))[0] == 400, "no 30 February"


@pytest.mark.parametrize("query,message", [
    ({"query": ["a;b"]}, 'query: Invalid value: "a;b": input contains unsupported characters'),
    ({"query": ["x" * 257]}, f'query: Invalid value: "{"x" * 257}": length must be less than 256'),
    ({"query": list("abcde")}, "query: Too many: 5: must have at most 4 items"),
    ({"tailLines": ["3"]}, "query: Required value: cannot be empty with options"),
    ({"query": ["a/b", "svc"]}, 'query: Invalid value: "[a/b], [svc]": cannot specify a file and service'),
    ({"query": ["a/b", "c/d"]}, 'query: Invalid value: ["a/b","c/d"]: cannot specify more than one file'),
    ({"query": ["apt/history.log"], "pattern": ["x"]},
     'query: Invalid value: ["apt/history.log"]: cannot specify file with options'),
    ({"query": ["/etc/passwd"]}, 'query: Invalid value: ["/etc/passwd"]: statat /etc/passwd: path escapes from parent'),
    ({"query": ["apt/../../secret"]},
     'query: Invalid value: ["apt/../../secret"]: statat apt/../../secret: path escapes from parent'),
    ({"query": ["./escape"]}, 'query: Invalid value: ["./escape"]: statat ./escape: path escapes from parent'),
    ({"query": ["svc"], "boot": ["1"]}, "boot: Invalid value: 1: must be less than 1"),
    ({"query": ["svc"], "tailLines": ["100001"]},
     "tailLines: Invalid value: 100001: must be between 0 and 100000, inclusive"),
    ({"query": ["svc"], "sinceTime": ["2026-01-02T00:00:00Z"], "untilTime": ["2026-01-01T23:00:00.5-00:30"]},
     'untilTime: Invalid value: "2026-01-01T23:00:00.5-00:30": must be after `sinceTime`'),
    ({"query": ["svc"], "pattern": ["(a"]},
     'pattern: Invalid value: "(a": error parsing regexp: missing ), unterminated subpattern: `(a`'),
])
async def test_queries_the_kubelet_does_not_allow_are_refused_406_naming_the_problem(logs, query, message):
    assert await refused(logs, query) == (406, message)


async def test_a_query_on_a_path_below_logs_is_refused(logs):
    assert await refused(logs, {"query": ["syslog"]}, "/logs/apt/") == (406, "path not allowed in query mode")


async def test_what_a_hostile_query_reaches_is_only_one_journalctl_argument_or_a_file_below_var_log(logs):
    # A name that looks like an option is one --unit= argument; one that is not a unit name is refused.
    q = parse({"query": ["-b"], "pattern": ["--output=json"]})
    assert q is not None and journalctl_args(q, q.services)[-2:] == ["--unit=-b", "--grep=--output=json"]
    assert (await refused(logs, {"query": ["--output=json"]}))[0] == 406
    assert (await refused(logs, {"query": ["$(reboot)"]}))[0] == 406
    # A service name is looked up below /var/log only: a link out and a FIFO are not read.
    escape = await body(await logs.serve(get("/logs/", {"query": ["escape"]})))
    assert escape == b"\nerror getting log for escape: openat escape: path escapes from parent\n"
    pipe = await body(await logs.serve(get("/logs/", {"query": ["pipe"]})))
    assert pipe == b"\nerror getting log for pipe: openat pipe: not a regular file\n"


def test_go_refuses_the_perl_constructs_python_has():
    assert go_regexp_error(r"(\w+) \1") == r"error parsing regexp: invalid escape sequence: `\1`"
    assert go_regexp_error("a(?=b)") == "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"
    assert go_regexp_error("[(?=]x") is None, "inside a class it is characters"
    assert go_regexp_error(r"^kubelet\[\d+\]: E\d{4}") is None


def test_log_query_needs_the_log_handler(tmp_path):
    with pytest.raises(ValueError, match="enableSystemLogHandler is required for enableSystemLogQuery"):
        KubeletConfiguration.model_validate({"enableSystemLogQuery": True, "enableSystemLogHandler": False})
    assert KubeletConfiguration.model_validate({"enableSystemLogQuery": True}).enable_system_log_query


def test_without_a_journal_every_service_is_a_file(var_log, tmp_path):
    import asyncio

    logs = SystemLogs(var_log, NodeLogQuery(var_log, str(tmp_path / "no-journalctl")))
    resp = asyncio.run(logs.serve(get("/logs/", {"query": ["syslog"]})))
    assert asyncio.run(body(resp)) == b"line one\nline two\n"
