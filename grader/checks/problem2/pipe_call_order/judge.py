"""2.2-call-order, parent side: the calls on the workers against the grader's own schedule, wave
by wave, and the microbatches each stage ran against 0, 1, ... in order. Observed in ``observe.py``."""
from __future__ import annotations

from grader.checks.judging import Fail, Malformed, expect_cases
from grader.checks.problem2.expected import expected_calls, microbatch_sizes
from grader.checks.problem2.judge_pipe import describe, microbatch_mistake
from grader.checks.problem2.pipe_call_order.cases import CALL_ORDER_CASES


def _judge_run(where: str, count: int, rows: int, split_size: int, run) -> None:
    m = len(microbatch_sizes(rows, split_size))
    got = [f"{kind}({stage})" for kind, stage in run["events"]]
    if not got:
        raise Fail(f"{where}: no submit or receive was recorded; every stage must run through self.workers.submit / receive")
    # Count (and size) the microbatches first: with another count every wave would differ.
    mistake = microbatch_mistake([size for stage, _, size in run["ran"] if stage == 0], rows, split_size)
    if mistake:
        raise Fail(f"{where}: {mistake}")
    position = 0
    for wave, want in enumerate(expected_calls(m, count)):
        have = got[position : position + len(want)]
        if have != want:
            raise Fail(f"{where}: wave {wave}: expected {' '.join(want)}; got {' '.join(have) or 'nothing'}")
        position += len(want)
    if position < len(got):
        raise Fail(f"{where}: after the last wave: expected nothing; got {' '.join(got[position:position + 8])}")
    for j in range(count):
        ran = [first // split_size for stage, first, _ in run["ran"] if stage == j]
        if ran != list(range(m)):
            late = (f" Stage {j} ran {len(ran)} times for {m} submits: does the callable read i and j when it runs "
                    "(late binding) instead of binding them when it is made?" if len(ran) != m else "")
            raise Fail(f"{where}: stage {j} ran microbatches {ran}; expected {list(range(m))} in order (submit (i, j) "
                       f"with microbatch i's output of stage j - 1).{late}")


def judge_call_order(seed: int, params: dict, observation) -> None:
    entries = expect_cases(observation, list(range(len(CALL_ORDER_CASES))), "Pipe call order")
    for (count, batches, split_size), entry in zip(CALL_ORDER_CASES, entries):
        if len(entry["runs"]) != len(batches):
            raise Malformed(f"Pipe call order: {len(entry['runs'])} calls came back; the grader made {len(batches)}")
        for call, (rows, run) in enumerate(zip(batches, entry["runs"])):
            _judge_run(f"{describe(count, rows, split_size)}, call {call + 1}", count, rows, split_size, run)
