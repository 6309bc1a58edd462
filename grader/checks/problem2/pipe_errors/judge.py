"""2.2-exceptions, 2.2-exception-unchanged and 2.2-base-exception, parent side: what reached the
caller against what the grader's stage raised, what ran before it did, and the next forward
against the stages run in sequence. Observed in ``observe.py``.

The understanding (2.2-exceptions: an error reaches the caller, a timeout is not retried, the
Pipe works again afterwards with the same workers) is apart from two conventions of 1 point: the
caller gets the stage's own object once its wave is taken back (where several stages fail, the
first in schedule order: which one is the contract's choice, any of them tells the caller that
the forward failed), and a ``BaseException`` that is
not an ``Exception`` is handled like one (frameworks that catch ``Exception`` only lose that point).
"""
from __future__ import annotations

import torch

from grader.checks.judging import Fail, expect_cases, expect_tensor
from grader.checks.problem2.expected import expected_calls, microbatch_sizes, sequential
from grader.checks.problem2.judge_pipe import ATOL, RTOL, compare_rows, describe
from grader.checks.problem2.pipe_errors.cases import GOOD_BATCH, KINDS, SEVERAL_CASES, TAGS, TIMEOUT_CASE
from grader.checks.problem2.stages import FAILURES, build_stages, make_batch

SAME_WORKERS = ("self.workers serves every call until close(): do not replace the StageWorkers after an error "
                "(a new one drops the Pipe's timeout, and the old threads are left behind)")


def _where(kind: str, index: int) -> str:
    count, rows, split_size, bad_stage, bad_microbatch = KINDS[kind][index]
    name = FAILURES["Exception" if kind == "exception" else "BaseException"].__qualname__
    what = "an Exception" if kind == "exception" else "a BaseException that is not an Exception, as KeyboardInterrupt"
    return f"{describe(count, rows, split_size)}, stage {bad_stage} raising {name} ({what}) on microbatch {bad_microbatch}"


def _cases(observation, kind: str) -> list:
    return expect_cases(observation["cases"], list(range(len(KINDS[kind]))), "Pipe forward with a failing stage")


def _again_problem(seed: int, tag: int, count: int, rows: int, split_size: int, again) -> str | None:
    """What is wrong with the next forward on a good batch (an error, other values, other workers), or None."""
    if again["error"] is not None:
        return f"the next forward on a good batch raised {again['error']}; the Pipe must still work after an error"
    with torch.no_grad():
        expected = sequential(build_stages(seed, tag, count), make_batch(seed, GOOD_BATCH + tag, rows))
    out = expect_tensor(again["output"], "the next forward")
    if tuple(out.shape) != tuple(expected.shape) or not torch.allclose(out, expected, rtol=RTOL, atol=ATOL):
        detail = compare_rows(expected, out, split_size) if out.shape == expected.shape else f"shape {list(out.shape)}"
        return f"the next forward on a good batch is wrong ({detail})"
    if not again["same_workers"]:
        return f"the next forward ran on other workers than the first: {SAME_WORKERS}"
    return None


def _judge_again(where: str, seed: int, tag: int, count: int, rows: int, split_size: int, again, leftovers: str) -> None:
    """The next forward on a good batch: no error, the stages' values, the same workers."""
    problem = _again_problem(seed, tag, count, rows, split_size, again)
    if problem and problem.startswith("the next forward on a good batch is wrong"):
        problem += f": either the forward itself is wrong (see 2.2-forward) or {leftovers}"
    elif problem and again["error"] is not None:
        problem += f"; perhaps {leftovers}"
    if problem:
        raise Fail(f"{where}: {problem}")


def _reached(where: str, seen, kind: str) -> bool:
    """Fail unless the stage's exception reached the caller (itself, or carried by another); False
    when the stage never raised (its microbatch went astray: 2.2-call-order says how)."""
    count, rows, split_size, bad_stage, bad_microbatch = KINDS[kind][seen["case"]]
    if not seen["stage_raised"]:
        return False
    caught = seen["caught"]
    if not caught["raised"]:
        raise Fail(f"{where}: the Pipe returned normally; the stage's exception must reach the caller (it was swallowed)")
    same_kind = caught["type"] == FAILURES["Exception" if kind == "exception" else "BaseException"].__qualname__
    if not (caught["carries"] or same_kind or f"stage {bad_stage} refuses microbatch {bad_microbatch}" in caught["message"]):
        raise Fail(f"{where}: the caller got {caught['type']}: {caught['message']!r}, which does not carry the stage's "
                   "exception; the stage's exception must reach the caller")
    return True


def _several_where(index: int) -> str:
    count, rows, split_size, failures = SEVERAL_CASES[index]
    raising = " and ".join(f"stage {stage} raising {FAILURES['Exception'].__qualname__} on microbatch {microbatch} "
                           f"(wave {stage + microbatch})" for stage, microbatch in failures)
    return f"{describe(count, rows, split_size)}, {raising}"


def _first_failure(failures) -> int:
    """The index in ``failures`` of the first in schedule order: the earliest wave, in it the lowest stage."""
    return min(range(len(failures)), key=lambda n: (sum(failures[n]), failures[n][0]))


def _several(observation) -> list:
    return expect_cases(observation["several"], list(range(len(SEVERAL_CASES))), "Pipe forward with several failing stages")


def _judge_several_reached(seed: int, observation) -> None:
    """Where several stages fail, one of their exceptions reaches the caller and the Pipe works again."""
    for index, seen in enumerate(_several(observation)):
        count, rows, split_size, failures = SEVERAL_CASES[index]
        if not any(seen["raised"]):
            continue  # no failing stage got its microbatch: the single-failure cases and 2.2-call-order say how
        where, caught = _several_where(index), seen["caught"]
        if not caught["raised"]:
            raise Fail(f"{where}: the Pipe returned normally; a stage's exception must reach the caller (it was swallowed)")
        _judge_again(where, seed, TAGS["several"] + index, count, rows, split_size, seen["again"],
                     "results of the failed call were left in the workers (receive the rest of the wave, whatever "
                     "else raises in it, before raising)")


def judge_exceptions(seed: int, params: dict, observation) -> None:
    """An Exception reaches the caller, a timeout is not retried, and the Pipe works again, on the same workers."""
    for index, seen in enumerate(_cases(observation, "exception")):
        count, rows, split_size, bad_stage, bad_microbatch = KINDS["exception"][index]
        where = _where("exception", index)
        if not _reached(where, seen, "exception"):
            first = bad_microbatch * split_size
            given = ", ".join(f"rows {start}-{start + size - 1}" for start, size in seen["given"]) or "nothing"
            raise Fail(f"{where}: stage {bad_stage} was never given microbatch {bad_microbatch} (rows {first}-"
                       f"{first + split_size - 1}), so it never raised; it was given {given}. The microbatches reach the "
                       "wrong stages (a lambda that reads i and j when it runs instead of binding them? see 2.2-call-order)")
        _judge_again(where, seed, TAGS["exception"] + index, count, rows, split_size, seen["again"],
                     "results of the failed call were left in the workers (receive the rest of the wave before raising)")
    _judge_several_reached(seed, observation)
    _judge_timeout(seed, observation["timeout"])
    if observation["alive"]:
        raise Fail(f"threads still alive after close(): {', '.join(observation['alive'][:5])}")


def _judge_timeout(seed: int, seen) -> None:
    case = TIMEOUT_CASE
    where = (f"{describe(case['stages'], case['rows'], case['split'])}, Pipe(..., timeout={case['timeout']:g}) whose stage "
             f"{case['stage']} does not finish microbatch {case['microbatch']} in time")
    caught = seen["caught"]
    if not seen["calls"]:
        return  # no stage ran on the workers, whose timeout this is: 2.2-call-order says so
    if not seen["held"]:
        raise Fail(f"{where}: stage {case['stage']} was never given microbatch {case['microbatch']}; see 2.2-call-order")
    submits = [stage for kind, stage in seen["calls"] if kind == "submit"]
    scheduled = [call for wave in expected_calls(len(microbatch_sizes(case["rows"], case["split"])), case["stages"])
                 for call in wave].count(f"submit({case['stage']})")
    if submits.count(case["stage"]) > scheduled:  # the held pair is in the last wave: any more is a retry
        raise Fail(f"{where}: after the TimeoutError the Pipe submitted to stage {case['stage']} again (calls: "
                   f"{' '.join(f'{kind}({stage})' for kind, stage in seen['calls'][:16])}): a timed-out call is not "
                   "retried; the TimeoutError that StageWorkers.receive raised must reach the caller")
    if not caught["raised"]:
        raise Fail(f"{where}: the forward returned normally; the TimeoutError that StageWorkers.receive raised must "
                   "reach the caller (not swallowed, not retried: the timeout is the caller's bound on a stage)")
    if not caught["timeout"]:
        raise Fail(f"{where}: the caller got {caught['type']}: {caught['message']!r}; expected the TimeoutError that "
                   "StageWorkers.receive raised (not retried: a second receive has nothing pending)")
    _judge_again(where, seed, TAGS["timeout"], case["stages"], case["rows"], case["split"], seen["again"],
                 "what the timed-out call left behind was read by the next forward")


def judge_exception_unchanged(seed: int, params: dict, observation) -> None:
    """The stage's own exception object, raised once its wave is taken back: no later wave runs."""
    entries = _cases(observation, "exception")
    if not any(seen["stage_raised"] for seen in entries):
        raise Fail("no grader stage ever raised (it never got the microbatch it fails on); see 2.2-exceptions")
    for index, seen in enumerate(entries):
        count, rows, split_size, bad_stage, bad_microbatch = KINDS["exception"][index]
        where = _where("exception", index)
        if not _reached(where, seen, "exception"):
            continue  # the microbatches went astray: 2.2-exceptions and 2.2-call-order say how
        caught = seen["caught"]
        if not caught["same_object"]:
            raise Fail(f"{where}: the caller got {caught['type']}: {caught['message']!r}, not the object the stage raised; "
                       f"re-raise the stage's own exception (raise error), unchanged, not wrapped and not a new "
                       f"{FAILURES['Exception'].__qualname__}, so its type, traceback and attributes reach the caller")
        failing_wave = bad_stage + bad_microbatch
        microbatches = len(microbatch_sizes(rows, split_size))
        allowed = [sum(1 for i in range(microbatches) if i + j <= failing_wave) for j in range(count)]
        if sum(seen["calls"]) > sum(allowed):  # counted over all stages: microbatches sent astray are 2.2-call-order's
            raise Fail(f"{where}: the stages ran {list(seen['calls'])} microbatches (stage 0, 1, ...) before the error "
                       f"reached the caller; expected {allowed}: the forward stops once the wave the error was raised "
                       "in is taken back, no later wave runs")
    _judge_first_of_several(observation)
    caught = observation["timeout"]["caught"]
    if caught["raised"] and caught["timeout"] and not caught["is_timeout"]:  # one that never arrived is 2.2-exceptions'
        raise Fail(f"Pipe(..., timeout={TIMEOUT_CASE['timeout']:g}) whose stage {TIMEOUT_CASE['stage']} does not finish in "
                   f"time: the caller got {caught['type']}: {caught['message']!r}, not the TimeoutError that "
                   "StageWorkers.receive raised; let that exception reach the caller unchanged")


def _as_scheduled(case, seen) -> bool:
    """Whether the failing forward gave every stage the schedule's microbatches and received the
    schedule's pairs in its order, as far as it went: else "first" is not the schedule's."""
    count, rows, split_size, _ = case
    sizes = microbatch_sizes(rows, split_size)
    microbatches = [(sum(sizes[:i]), size) for i, size in enumerate(sizes)]
    receives = [int(call[len("receive("):-1]) for wave in expected_calls(len(sizes), count) for call in wave
                if call.startswith("receive(")]
    received = list(seen["received"])
    return (received == receives[:len(received)]
            and all([tuple(pair) for pair in given] == microbatches[:len(given)] for given in seen["given_all"]))


def _judge_first_of_several(observation) -> None:
    """Where several stages fail, the caller gets the first exception in schedule order (the earliest
    wave, in it the lowest stage: the order the wave lists its pairs), and no later wave runs."""
    for index, seen in enumerate(_several(observation)):
        count, rows, split_size, failures = SEVERAL_CASES[index]
        first = _first_failure(failures)
        caught, where = seen["caught"], _several_where(index)
        if not seen["raised"][first] or not caught["raised"] or not _as_scheduled(SEVERAL_CASES[index], seen):
            continue  # nothing reached the caller (2.2-exceptions'), or the calls left the schedule (2.2-call-order's)
        if caught["which"] != first:
            stage, microbatch = failures[first]
            got = (f"the exception stage {failures[caught['which']][0]} raised on microbatch {failures[caught['which']][1]}"
                   if caught["which"] is not None
                   else f"{caught['type']}: {caught['message']!r}, not the object stage {stage} raised")
            raise Fail(f"{where}: the caller got {got}; expected the first exception in schedule order, the one stage "
                       f"{stage} raised on microbatch {microbatch} (the earliest wave, in it the first pair received): "
                       "keep the first error of the wave (do not overwrite it, and receive every other pair of the wave "
                       "inside the same try) and raise that one, unchanged")
        wave = sum(failures[first])
        microbatches = len(microbatch_sizes(rows, split_size))
        allowed = [sum(1 for i in range(microbatches) if i + j <= wave) for j in range(count)]
        if sum(seen["calls"]) > sum(allowed):
            raise Fail(f"{where}: the stages ran {list(seen['calls'])} microbatches (stage 0, 1, ...) before the error "
                       f"reached the caller; expected {allowed}: the forward stops once the wave of the first error is "
                       "taken back, no later wave runs")


def judge_base_exception(seed: int, params: dict, observation) -> None:
    """A BaseException that is not an Exception reaches the caller and the Pipe works again, where
    an Exception raised in its place does (what an Exception does wrong is 2.2-exceptions')."""
    entries = _cases(observation, "base_exception")
    if not any(seen["stage_raised"] for seen in entries):
        raise Fail("no grader stage ever raised (it never got the microbatch it fails on); see 2.2-exceptions")
    for index, seen in enumerate(entries):
        count, rows, split_size, _, _ = KINDS["base_exception"][index]
        where, twin, tag = _where("base_exception", index), seen["as_exception"], TAGS["base_exception"] + index
        if not seen["stage_raised"] or not twin["stage_raised"] or not twin["caught"]["raised"]:
            continue  # microbatches astray, or an Exception swallowed too: 2.2-call-order's and 2.2-exceptions'
        if not _reached(where, seen, "base_exception"):
            continue
        problem = _again_problem(seed, tag, count, rows, split_size, seen["again"])
        if problem and _again_problem(seed, tag, count, rows, split_size, twin["again"]) is None:
            raise Fail(f"{where}: {problem}, where an Exception raised in its place leaves the Pipe working: handle "
                       "every BaseException as you handle an Exception (catch BaseException, not only Exception, "
                       "take back the rest of the wave), then raise the first one")
