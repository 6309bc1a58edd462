"""PARENT side of 4.2: ``interleaved_one_f_one_b`` judged on the simulator, against the closed
form of its step and Megatron-LM's order, on its kinds and freshness, and on its ValueError."""
from __future__ import annotations

from grader.checks.judging import Fail, expect_cases
from grader.checks.problem4 import judge_schedules as judging
from grader.checks.problem4.expected_orders import megatron_orders
from grader.checks.problem4.interleaved import cases

NOT_A_MULTIPLE = "M = {m} is not a multiple of K = {k}"
WRONG = {  # what is wrong with each bad call of cases.BAD
    "(4, 6, 2)": NOT_A_MULTIPLE.format(m=6, k=4), "(3, 4, 2)": NOT_A_MULTIPLE.format(m=4, k=3),
    "(8, 12, 4)": NOT_A_MULTIPLE.format(m=12, k=8), "(4, 2, 2)": NOT_A_MULTIPLE.format(m=2, k=4),
    "(4, 6, 1)": NOT_A_MULTIPLE.format(m=6, k=4) + " (the rule holds for v = 1 too)",
    "(3, 5, 1)": NOT_A_MULTIPLE.format(m=5, k=3) + " (the rule holds for v = 1 too)",
    "(2, 3, 1)": NOT_A_MULTIPLE.format(m=3, k=2) + " (the rule holds for v = 1 too)",
    "(4, 8, 0)": "v = 0", "(0, 8, 2)": "K = 0", "(4, 0, 2)": "M = 0", "(2, 4, -1)": "v < 0",
    "(4, 8, 2.0)": "v is a float", "(4.0, 8, 2)": "K is a float", "(4, 8, True)": "v is a bool",
    "(True, 2, 2)": "K is a bool", "(1, True, 1)": "M is a bool", "(4, '8', 2)": "M is a string",
    "(4, 8, None)": "v is None",
    "(4, 8, numpy.int64(2))": "v is a numpy integer (the contract takes Python ints only)",
    "(numpy.int64(2), 4, 2)": "K is a numpy integer (the contract takes Python ints only)",
}


def judge_schedule(seed: int, params: dict, observation) -> None:
    """A new list of Action lists; valid; step = (M + (K-1)/v)(F + B); no slower than
    Megatron-LM's order with transfer delays and device d holding no more than that order
    holds (v = 1: plain 1F1B; at M == K Megatron-LM's all-forwards order is admitted too)."""
    asked = cases.cases(seed)
    for (num_stages, num_microbatches, num_chunks), entry in zip(asked, expect_cases(observation["schedules"], asked,
                                                                                     "interleaved_one_f_one_b")):
        call = f"interleaved_one_f_one_b({num_stages}, {num_microbatches}, {num_chunks})"
        rows = judging.schedule_rows(entry, call, num_stages)
        timeline = judging.simulate(rows, call, num_microbatches, num_chunks)
        expected = (num_microbatches + (num_stages - 1) / num_chunks) * (judging.T_F + judging.T_B)
        if not judging.same_makespan(timeline, expected):
            goal = ("with v = 1 it is plain 1F1B: (M + K - 1)(F + B)" if num_chunks == 1 else
                    "interleaving should give (M + (K-1)/v)(F + B), the 1F1B bubble divided by v")
            raise Fail(
                f"{call}: one step takes {timeline.makespan:g} units (F = 1, B = 2 per device, 1/v per chunk, "
                f"instant transfers); {goal} = {expected:g}{judging.picture(timeline)}"
            )
        _like_a_megatron_order(rows, timeline, call, num_stages, num_microbatches, num_chunks)
    judging.judge_fresh(observation["fresh"], cases.FRESH, "interleaved_one_f_one_b", lambda case: case[0])


def _like_a_megatron_order(rows, timeline, call: str, num_stages: int, num_microbatches: int, num_chunks: int) -> None:
    """No slower with transfer delays, and on no device holding more, than one of the orders
    the contract admits as Megatron-LM's (at M == K its all-forwards order too); else the
    first order's reason."""
    failures = []
    for whose, reference in megatron_orders(num_stages, num_microbatches, num_chunks):
        try:
            judging.no_slower_with_transfers(rows, reference, call, num_microbatches, num_chunks, whose)
            plain = [list(map(list, row)) for row in reference]
            limits = judging.simulate(plain, "the grader's reference", num_microbatches, num_chunks).peak_in_flight
            for device, (peak, limit) in enumerate(zip(timeline.peak_in_flight, limits)):
                if peak > limit + 1e-9:
                    raise Fail(
                        f"{call}: device {device} holds up to {peak:g} microbatches' activations at once (counting "
                        f"1/v per chunk); {whose} holds at most {limit:g} there{judging.picture(timeline)}"
                    )
            return
        except Fail as failure:
            failures.append(failure)
    raise failures[0]


def judge_arguments(seed: int, params: dict, observation) -> None:
    """ValueError at the call for every M that is not a multiple of K (v = 1 included), for
    sizes < 1 and for sizes that are not Python ints; valid calls return."""
    judging.judge_arguments("interleaved_one_f_one_b", cases.BAD, WRONG, cases.VALID, observation)
