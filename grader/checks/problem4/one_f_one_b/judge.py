"""PARENT side of 4.1: ``one_f_one_b`` judged on the simulator, against GPipe's step and the
lecture's 1F1B order, on its kinds and freshness, and on its ValueError."""
from __future__ import annotations

from grader.checks.judging import Fail, expect_cases
from grader.checks.problem4 import judge_schedules as judging
from grader.checks.problem4.expected_orders import reference_one_f_one_b
from grader.checks.problem4.one_f_one_b import cases

WRONG = {  # what is wrong with each bad call of cases.BAD
    "(0, 4)": "K = 0", "(4, 0)": "M = 0", "(-1, 3)": "K < 0", "(3, -2)": "M < 0", "(2.0, 4)": "K is a float",
    "(4, 3.0)": "M is a float", "(True, 4)": "K is a bool", "(4, True)": "M is a bool", "(1, False)": "M is a bool",
    "('4', 8)": "K is a string", "(4, None)": "M is None",
    "(numpy.int64(4), 8)": "K is a numpy integer (the contract takes Python ints only)",
    "(4, numpy.int32(8))": "M is a numpy integer (the contract takes Python ints only)",
}


def _call(case) -> str:
    return f"one_f_one_b({case[0]}, {case[1]})"


def _read(seed: int, observation, judge_types: bool = True) -> list:
    """``(K, M, rows)`` of every case (with ``judge_types``: after checking each is a list of
    ``Action`` lists)."""
    asked = cases.cases(seed)
    entries = expect_cases(observation["schedules"], asked, "one_f_one_b")
    return [(k, m, judging.schedule_rows(entry, _call((k, m)), k, judge_types)) for (k, m), entry in zip(asked, entries)]


def judge_makespan(seed: int, params: dict, observation) -> None:
    """Every schedule a new list of Action lists, valid; its step as long as GPipe's for
    B = 2F and B = F; with transfer delays no slower than the lecture's 1F1B order."""
    for num_stages, num_microbatches, rows in _read(seed, observation):
        call = _call((num_stages, num_microbatches))
        for t_b in (judging.T_B, judging.T_F):
            timeline = judging.simulate(rows, call, num_microbatches, 1, t_b)
            expected = (num_microbatches + num_stages - 1) * (judging.T_F + t_b)
            if not judging.same_makespan(timeline, expected):
                raise Fail(
                    f"{call}: one step takes {timeline.makespan:g} units with F = 1, B = {t_b:g} and instant "
                    f"transfers; GPipe's takes (M + K - 1)(F + B) = {expected:g} and 1F1B must not be slower"
                    f"{judging.picture(timeline)}"
                )
        judging.no_slower_with_transfers(rows, reference_one_f_one_b(num_stages, num_microbatches), call,
                                         num_microbatches, 1, "the lecture's 1F1B order")
    judging.judge_fresh(observation["fresh"], cases.FRESH, "one_f_one_b", lambda case: case[0])


def judge_peak(seed: int, params: dict, observation) -> None:
    """Device d holds at most (and, being 1F1B, exactly) min(K - d, M) microbatches."""
    for num_stages, num_microbatches, rows in _read(seed, observation, judge_types=False):
        call = _call((num_stages, num_microbatches))
        timeline = judging.simulate(rows, call, num_microbatches, 1)
        expected = [min(num_stages - d, num_microbatches) for d in range(num_stages)]
        if timeline.peak_in_flight != expected:
            device = next(d for d, (a, b) in enumerate(zip(timeline.peak_in_flight, expected)) if a != b)
            raise Fail(
                f"{call}: device {device} holds up to {timeline.peak_in_flight[device]:g} microbatches' activations "
                f"at once; 1F1B holds min(K - d, M) = {expected[device]}. Peaks per device: got "
                f"{timeline.peak_in_flight}, expected {expected}{judging.picture(timeline)}"
            )


def judge_arguments(seed: int, params: dict, observation) -> None:
    """ValueError at the call for sizes < 1 and for sizes that are not Python ints (bools,
    floats, strings, None, numpy integers); valid calls return."""
    judging.judge_arguments("one_f_one_b", cases.BAD, WRONG, cases.VALID, observation)
