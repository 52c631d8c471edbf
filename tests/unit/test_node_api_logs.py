import asyncio
import os
from datetime import datetime, timedelta, timezone

import pytest

from services.node_api.logs import LogOptions, LogQueryError, parse_log_options, read_log

POLL = 0.005


def rec(content: str, stream: str = "stdout", tag: str = "F", ts: str = "2026-11-30T15:04:05.123456789Z") -> str:
    return f"{ts} {stream} {tag} {content}\n"


def write(path, *lines: str, mode: str = "w") -> None:
    with open(path, mode) as f:
        f.write("".join(lines))


async def not_running() -> bool:
    return False


async def read_all(path, opts=None, still_running=not_running) -> bytes:
    return b"".join([c async for c in read_log(path, opts or LogOptions(), still_running, poll_interval=POLL)])


class Follower:
    """Follows a log in a task while the test writes; the container "exits" on stop()."""

    def __init__(self, path, opts=None) -> None:
        opts = opts or LogOptions(follow=True)
        self.running = True
        self.out = bytearray()
        self.got = asyncio.Event()
        self.at_end = asyncio.Event()  # the follower has read to the end and waits for more
        self._stream = read_log(path, opts, self._still_running, poll_interval=POLL)
        self._task = asyncio.create_task(self._consume())

    async def _still_running(self) -> bool:
        self.at_end.set()
        return self.running

    async def _consume(self) -> None:
        async for chunk in self._stream:
            self.out += chunk
            self.got.set()

    async def wait_for(self, data: bytes) -> None:
        async with asyncio.timeout(2):
            while data not in self.out:
                self.got.clear()
                await self.got.wait()

    async def finished(self) -> bytes:
        await asyncio.wait_for(self._task, 2)
        return bytes(self.out)

    async def stop(self) -> bytes:
        self.running = False
        await asyncio.wait_for(self._task, 2)
        return bytes(self.out)


async def test_plain_and_both_streams_in_file_order(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("out 1"), rec("err 1", "stderr"), rec("out 2"), rec(""), rec("  spaced  ", "stderr"))
    assert await read_all(log) == b"out 1\nerr 1\nout 2\n\n  spaced  \n"


async def test_partial_records_are_joined(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("part one ", tag="P"), rec("and two", tag="P"), rec(" end"),
          rec("tagged ", tag="P:x"), rec("tail", tag="F:y"), rec("", tag="P"), rec("P-ish is full", tag="PX"))
    assert await read_all(log) == b"part one and two end\ntagged tail\nP-ish is full\n"


async def test_malformed_lines_are_skipped(tmp_path):
    log = tmp_path / "0.log"
    write(log, "not a cri line\n", rec("a"), "2026-11-30T15:04:05Z stdout F\n",  # no tag delimiter
          rec("bad stream", "stdlog"), rec("bad time", ts="yesterday"), rec("b"), "\n")
    assert await read_all(log) == b"a\nb\n"


async def test_unterminated_last_line_is_written_without_follow(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("a"), "2026-11-30T15:04:05Z stdout F no newline yet")
    assert await read_all(log) == b"a\nno newline yet"


async def test_timestamps_prefix_every_record_with_nine_digits(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("fixed", ts="2026-11-30T15:04:05.123456789Z"),
          rec("part ", tag="P", ts="2026-11-30T15:04:05.12345678Z"),
          rec("joined", ts="2026-11-30T15:04:06Z"),
          rec("offset", "stderr", ts="2026-11-30T17:04:05.5+02:00"),
          rec("utc offset", ts="2026-11-30T15:04:05.000000001+00:00"))
    assert await read_all(log, LogOptions(timestamps=True)) == (
        b"2026-11-30T15:04:05.123456789Z fixed\n"
        b"2026-11-30T15:04:05.123456780Z part 2026-11-30T15:04:06.000000000Z joined\n"
        b"2026-11-30T17:04:05.500000000+02:00 offset\n"
        b"2026-11-30T15:04:05.000000001Z utc offset\n")


async def test_tail_lines(tmp_path):
    log = tmp_path / "0.log"
    write(log, *(rec(f"line {i}") for i in range(5)))
    assert await read_all(log, LogOptions(tail_lines=2)) == b"line 3\nline 4\n"
    assert await read_all(log, LogOptions(tail_lines=0)) == b""
    assert await read_all(log, LogOptions(tail_lines=99)) == b"".join(b"line %d\n" % i for i in range(5))


async def test_tail_counts_file_lines_not_joined_lines(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("a"), rec("b1 ", tag="P"), rec("b2"))
    assert await read_all(log, LogOptions(tail_lines=1)) == b"b2\n"
    assert await read_all(log, LogOptions(tail_lines=2)) == b"b1 b2\n"


async def test_tail_with_unterminated_last_line_matches_the_kubelet(tmp_path):
    # The kubelet seeks past the last N newlines, then writes N records: the unfinished line is
    # not counted when seeking, so it is the one left out.
    log = tmp_path / "0.log"
    write(log, rec("a"), rec("b"), "2026-11-30T15:04:05Z stdout F c")
    assert await read_all(log, LogOptions(tail_lines=1)) == b"b\n"
    assert await read_all(log, LogOptions(tail_lines=5)) == b"a\nb\nc"


async def test_since_time_skips_older_records(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("old", ts="2026-11-30T15:04:04.999999999Z"),
          rec("at cut-off", ts="2026-11-30T15:04:05Z"),
          rec("new", ts="2026-11-30T15:04:05.000000001Z"),
          rec("old, other zone", ts="2026-11-30T16:04:04+01:00"),
          rec("new, other zone", ts="2026-11-30T16:04:06.5+01:00"))
    cut = datetime(2026, 11, 30, 15, 4, 5, tzinfo=timezone.utc)
    assert await read_all(log, LogOptions(since_time=cut)) == b"at cut-off\nnew\nnew, other zone\n"


async def test_since_seconds_is_relative_to_now(tmp_path):
    log = tmp_path / "0.log"
    now = datetime.now(timezone.utc)

    def stamp(dt):
        return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    write(log, rec("an hour ago", ts=stamp(now - timedelta(hours=1))),
          rec("a second ago", ts=stamp(now - timedelta(seconds=1))))
    assert await read_all(log, LogOptions(since_seconds=60)) == b"a second ago\n"
    assert await read_all(log, LogOptions(since_seconds=7200)) == b"an hour ago\na second ago\n"


async def test_limit_bytes_cuts_the_output(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("hello"), rec("world"))
    assert await read_all(log, LogOptions(limit_bytes=8)) == b"hello\nwo"
    assert await read_all(log, LogOptions(limit_bytes=6)) == b"hello\n"
    assert await read_all(log, LogOptions(limit_bytes=1000)) == b"hello\nworld\n"
    assert await read_all(log, LogOptions(limit_bytes=33, timestamps=True)) == \
        b"2026-11-30T15:04:05.123456789Z he"


async def test_follow_reads_appended_lines_until_the_container_stops(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("first"))
    f = Follower(log)
    await f.wait_for(b"first\n")
    write(log, rec("second"), "2026-11-30T15:04:05Z stdout F unfin", mode="a")
    await f.wait_for(b"second\n")
    assert f.out == b"first\nsecond\n"  # an unfinished line waits for its end
    write(log, "ished\n", mode="a")
    await f.wait_for(b"unfinished\n")
    write(log, rec("written just before exit"), "2026-11-30T15:04:05Z stdout F never finished", mode="a")
    assert await f.stop() == b"first\nsecond\nunfinished\nwritten just before exit\n"


async def test_follow_with_tail_zero_shows_only_new_lines(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("old"))
    f = Follower(log, LogOptions(follow=True, tail_lines=0))
    await asyncio.wait_for(f.at_end.wait(), 2)
    write(log, rec("new"), mode="a")
    await f.wait_for(b"new\n")
    assert await f.stop() == b"new\n"


async def test_follow_with_tail_keeps_following(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("a"), rec("b"), rec("c"))
    f = Follower(log, LogOptions(follow=True, tail_lines=1))
    await f.wait_for(b"c\n")
    write(log, rec("d"), mode="a")
    await f.wait_for(b"d\n")
    assert await f.stop() == b"c\nd\n"


async def test_follow_stops_at_limit_bytes(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("abc"))
    f = Follower(log, LogOptions(follow=True, limit_bytes=6))
    write(log, rec("defgh"), mode="a")
    assert await f.finished() == b"abc\nde"  # ends by itself, the container still running


async def test_follow_across_rotation(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("before 1"), rec("before 2"))
    f = Follower(log)
    await f.wait_for(b"before 2\n")
    # pod-sync's rotation: rename, then the runtime reopens and creates a new file at the path.
    rotated = tmp_path / "0.log.20261130-150405"
    os.rename(log, rotated)
    write(rotated, rec("late write to the old file"), mode="a")
    await asyncio.sleep(POLL * 4)  # the follower sees the path missing meanwhile
    write(log, rec("after 1"))
    await f.wait_for(b"after 1\n")
    write(log, rec("after 2"), mode="a")
    await f.wait_for(b"after 2\n")
    assert await f.stop() == b"before 1\nbefore 2\nlate write to the old file\nafter 1\nafter 2\n"


async def test_follow_drains_old_file_when_rotation_lands_between_polls(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("a"))
    f = Follower(log)
    await f.wait_for(b"a\n")
    rotated = tmp_path / "0.log.1"
    os.rename(log, rotated)
    write(rotated, rec("b"), mode="a")
    write(log, rec("c"))
    await f.wait_for(b"c\n")
    assert await f.stop() == b"a\nb\nc\n"


async def test_missing_file_raises_before_any_output(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_log(tmp_path / "nope.log", LogOptions(), not_running)


async def test_closing_an_unread_stream_closes_the_file(tmp_path):
    log = tmp_path / "0.log"
    write(log, rec("a"))
    stream = read_log(log, LogOptions(), not_running)
    fd = stream._file.fileno()
    await stream.aclose()
    with pytest.raises(OSError):
        os.fstat(fd)


async def test_large_file_is_streamed_in_chunks(tmp_path):
    log = tmp_path / "0.log"
    n = 40_000
    with open(log, "w") as f:
        for i in range(n):
            if i % 1000 == 999:
                f.write(rec(f"partial {i} ", "stderr", "P"))
            f.write(rec(f"line {i} " + "x" * 80, "stderr" if i % 3 else "stdout"))
    assert log.stat().st_size > 4 * 2**20
    expected = b"".join((b"partial %d " % i if i % 1000 == 999 else b"") + b"line %d " % i + b"x" * 80 + b"\n"
                        for i in range(n))
    chunks = [c async for c in read_log(log, LogOptions(), not_running)]
    assert len(chunks) > 1
    assert b"".join(chunks) == expected
    tail = await read_all(log, LogOptions(tail_lines=3))  # the last partial record is a line of its own
    assert tail == b"line 39998 " + b"x" * 80 + b"\npartial 39999 line 39999 " + b"x" * 80 + b"\n"
    assert await read_all(log, LogOptions(limit_bytes=300_000)) == expected[:300_000]


def test_parse_log_options():
    q = {"follow": ["true"], "previous": ["1"], "timestamps": [""], "tailLines": ["10"],
         "limitBytes": ["500"], "sinceTime": ["2026-11-30T15:04:05.5+01:00"]}
    assert parse_log_options(q) == LogOptions(
        follow=True, previous=True, timestamps=True, tail_lines=10, limit_bytes=500,
        since_time=datetime(2026, 11, 30, 14, 4, 5, 500000, tzinfo=timezone.utc))
    assert parse_log_options({}) == LogOptions()
    assert parse_log_options({"sinceSeconds": ["+30"]}) == LogOptions(since_seconds=30)
    assert parse_log_options({"sinceTime": [""]}) == LogOptions()


def test_boolean_parameters_are_false_only_for_0_and_false():
    # The apiserver's query conversion, which the kubelet uses: anything else is true.
    for value, expected in [("0", False), ("false", False), ("FALSE", False), ("1", True),
                            ("true", True), ("", True), ("yes", True)]:
        for name, field in [("follow", "follow"), ("previous", "previous"), ("timestamps", "timestamps")]:
            assert getattr(parse_log_options({name: [value]}), field) is expected


def test_legacy_tail_parameter():
    assert parse_log_options({"tail": ["5"]}).tail_lines == 5
    assert parse_log_options({"tail": ["all"], "tailLines": ["5"]}).tail_lines is None
    assert parse_log_options({"tail": [""], "tailLines": ["5"]}).tail_lines == 5


@pytest.mark.parametrize(("query", "param", "status"), [
    ({"tailLines": ["-3"]}, "tailLines", 422),
    ({"tailLines": ["x"]}, "tailLines", 400),
    ({"tailLines": [""]}, "tailLines", 400),
    ({"tailLines": ["1_000"]}, "tailLines", 400),
    ({"tail": ["-1"]}, "tailLines", 422),
    ({"limitBytes": ["0"]}, "limitBytes", 422),
    ({"limitBytes": ["-5"]}, "limitBytes", 422),
    ({"limitBytes": ["1.5"]}, "limitBytes", 400),
    ({"limitBytes": ["9223372036854775808"]}, "limitBytes", 400),
    ({"sinceSeconds": ["0"]}, "sinceSeconds", 422),
    ({"sinceSeconds": ["ten"]}, "sinceSeconds", 400),
    ({"sinceTime": ["yesterday"]}, "sinceTime", 400),
    ({"sinceTime": ["2026-13-01T00:00:00Z"]}, "sinceTime", 400),
    ({"sinceTime": ["2026-11-30 15:04:05Z"]}, "sinceTime", 400),
    ({"sinceTime": ["2026-11-30T15:04:05"]}, "sinceTime", 400),
    ({"sinceSeconds": ["10"], "sinceTime": ["2026-11-30T15:04:05Z"]}, "sinceTime", 422),
])
def test_bad_query_values_name_the_parameter(query, param, status):
    with pytest.raises(LogQueryError) as err:
        parse_log_options(query)
    assert err.value.param == param
    assert err.value.status_code == status
    assert str(err.value).startswith(f"{param}: ")
