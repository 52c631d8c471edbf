"""OOM kills from the kernel's log: the records read, the counts /metrics/cadvisor shows, the
Node's SystemOOM event."""

from services.eviction.system_oom import system_oom_event
from services.node_api import oom_counts
from services.node_api.oom_counts import OomCounts
from shared.host.oom_kills import OomKill, parse_record

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


def test_counts_by_cgroup_are_bounded_and_absent_while_the_log_is_unread(monkeypatch):
    counts = OomCounts()
    assert counts.counts() is None, "not reading the kernel's log: no family rather than zeros"
    counts._reading = True
    for _ in range(2):
        counts.seen(parse_record(MEMCG))
    counts.seen(parse_record(GLOBAL))
    assert counts.counts() == {"/kubepods/burstable/podu1/c1": 2, "/": 1}
    monkeypatch.setattr(oom_counts, "MAX_CGROUPS", 2)
    counts.seen(OomKill("/kubepods/podu3/c3", "/kubepods/podu3/c3", "x", 1))
    assert set(counts.counts()) == {"/", "/kubepods/podu3/c3"}, "the oldest cgroup goes first"
