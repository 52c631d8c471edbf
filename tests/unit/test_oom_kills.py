"""OOM kills from the kernel's log: the records read, the counts /metrics/cadvisor shows, the
Node's SystemOOM event."""

import asyncio
import socket
import time

from services.eviction import oom_kills
from services.eviction.oom_kills import OomWatcher, count, system_oom_event
from shared.host.oom_kills import OomKill, parse_record
from shared.store import OomKill as OomKillRow
from shared.store import Store

MEMCG = (b"6,2001,5500000,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=abc,mems_allowed=0,"
         b"oom_memcg=/kubepods/burstable/podu1/c1,task_memcg=/kubepods/burstable/podu1/c1,task=hog,pid=4242,uid=0")
GLOBAL = (b"6,2002,5600000,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
          b"global_oom,task_memcg=/system.slice/cron.service,task=cron,pid=77,uid=0")


def test_a_containers_kill_names_its_cgroup_and_process():
    assert parse_record(MEMCG) == OomKill("/kubepods/burstable/podu1/c1", "/kubepods/burstable/podu1/c1", "hog", 4242)


def test_a_node_wide_kill_is_the_roots_as_cadvisor_counts_it():
    assert parse_record(GLOBAL) == OomKill("/", "/", "cron", 77)


def test_other_records_and_garbage_are_not_kills():
    for record in (b"6,1,2,-;pykube0: port 1 entered forwarding state", b"no separator", b"",
                   b"6,1,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/x", b"\xff\xfe;oom-kill:\x00",
                   b"6,3,4,-;Memory cgroup out of memory: Killed process 4242 (hog)"):
        assert parse_record(record) is None, record


def test_a_process_name_cannot_forge_the_cgroups_or_reach_an_event_unprintable():
    # A program names itself (15 bytes at most): commas, "=" and control characters included.
    forged = (b"6,5,6,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,"
              b"oom_memcg=/kubepods/podu2/c2,task_memcg=/kubepods/podu2/c2,task=a,task_memcg=/\x1b,pid=9,uid=0")
    kill = parse_record(forged)
    assert (kill.memcg, kill.victim_memcg, kill.pid) == ("/kubepods/podu2/c2", "/kubepods/podu2/c2", 9)
    assert kill.task == "a,task_memcg=/?"
    assert system_oom_event(kill) is None, "a container's kill is not the node's"


def test_system_oom_is_the_nodes_event_in_the_kubelets_words():
    event = system_oom_event(parse_record(GLOBAL))
    assert (event.kind, event.type, event.reason) == ("Node", "Warning", "SystemOOM")
    assert event.message == "System OOM encountered, victim process: cron, pid: 77"


def counts(store):
    with store.session() as s:
        return {row.cgroup: row.count for row in s.query(OomKillRow)}


def test_counts_by_cgroup_are_kept_in_the_store_and_bounded(settings, monkeypatch):
    store = Store(settings.store_path, writer="eviction")
    store.create_schema()
    for cgroup in ("/kubepods/burstable/podu1/c1", "/kubepods/burstable/podu1/c1", "/"):
        count(store, cgroup)
    assert counts(store) == {"/kubepods/burstable/podu1/c1": 2, "/": 1}
    monkeypatch.setattr(oom_kills, "MAX_CGROUPS", 2)
    count(store, "/kubepods/podu3/c3")
    assert set(counts(store)) == {"/", "/kubepods/podu3/c3"}, "the longest-quiet cgroup goes first"


class SeqpacketLog:
    """The kernel's log as the watcher reads it: one record per read, readable when one waits."""

    def __init__(self) -> None:
        self.ours, self.kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ours.setblocking(False)

    def fileno(self) -> int:
        return self.ours.fileno()

    def records(self) -> list[bytes]:
        found = []
        while True:
            try:
                found.append(self.ours.recv(8192))
            except BlockingIOError:
                return found

    def close(self) -> None:
        self.ours.close()
        self.kernel.close()


class Bus:
    def __init__(self):
        self.published = []

    async def publish(self, event):
        self.published.append(event)


async def test_the_watcher_counts_each_kill_and_says_a_node_wide_one(settings):
    store = Store(settings.store_path, writer="eviction")
    store.create_schema()
    log, bus = SeqpacketLog(), Bus()
    task = asyncio.create_task(OomWatcher(store, bus, log).run())
    for record in (MEMCG, b"6,9,9,-;an unrelated line", GLOBAL):
        log.kernel.send(record)
    deadline = time.monotonic() + 10  # generous: the store writes run on a thread of a loaded machine
    # The global kill is counted, then said: wait for both.
    while time.monotonic() < deadline and (counts(store) != {"/kubepods/burstable/podu1/c1": 1, "/": 1}
                                           or not bus.published):
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert counts(store) == {"/kubepods/burstable/podu1/c1": 1, "/": 1}
    assert [(e.reason, e.message) for e in bus.published] == [
        ("SystemOOM", "System OOM encountered, victim process: cron, pid: 77")]
