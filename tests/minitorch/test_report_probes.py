"""What ``make report`` times with (minitorch/report_probes.py): rounds that run every
configuration once in a rotating order, and the share of a core a run got."""
import time

from minitorch.report_probes import CpuShare, round_robin_seconds


def test_round_robin_runs_each_once_a_round_in_an_order_that_rotates():
    calls = []
    seconds = round_robin_seconds({key: (lambda key=key: calls.append(key)) for key in "abc"}, rounds=4)
    assert calls == list("abc" "bca" "cab" "abc")
    assert {key: len(times) for key, times in seconds.items()} == {"a": 4, "b": 4, "c": 4}
    assert all(t >= 0 for times in seconds.values() for t in times)


def spin(cpu_seconds):
    deadline = time.process_time() + cpu_seconds
    while time.process_time() < deadline:
        pass


def test_the_cpu_share_of_a_sleep_is_near_zero_and_of_work_is_more():
    sleeping, working = CpuShare(), CpuShare()
    assert sleeping.share is None  # nothing timed yet
    assert sleeping.timed(lambda: time.sleep(0.05))() is None
    working.timed(lambda: spin(0.05))()
    assert sleeping.share is not None and sleeping.share < 0.2  # a sleep uses no CPU, whatever the load
    assert working.share is not None and working.share > sleeping.share
