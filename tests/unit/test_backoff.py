from services.pod_sync.backoff import Backoff


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_first_failure_restarts_at_once_then_doubles_to_cap():
    clock = Clock()
    b = Backoff(10, 40, clock)
    assert b.remaining("k", clock.t) == 0
    delays = []
    for _ in range(5):
        b.next("k", clock.t)
        delays.append(b.current("k"))
    assert delays == [10, 20, 40, 40, 40]
    assert b.remaining("k", clock.t) == 40
    clock.t += 15
    assert b.remaining("k", clock.t - 15) == 25


def test_entry_expires_after_twice_the_cap():
    clock = Clock()
    b = Backoff(10, 40, clock)
    b.next("k", clock.t)
    b.next("k", clock.t)
    clock.t += 81
    b.next("k", clock.t)
    assert b.current("k") == 10


def test_forget_by_prefix():
    b = Backoff(10, 40)
    b.next("pod1/a", 1)
    b.next("pod2/a", 1)
    b.forget("pod1/")
    assert b.current("pod1/a") == 0 and b.current("pod2/a") == 10
