"""2.2-concurrency, parent side: a forward takes about M + K - 1 stage steps, with stages of one
wave overlapping in time, and every grader stage slept its full time. The times come from the
grader's clock inside the child; together they must fit in the run the grader timed from outside.
Observed in ``observe.py``."""
from __future__ import annotations

from grader.checks.judging import CLOCK_SLACK_SECONDS, Fail, Malformed, Outside, within_outside
from grader.checks.problem2.pipe_concurrency.cases import concurrency_params, time_limit


def _overlaps(intervals) -> bool:
    return any(a[0] != b[0] and a[1] < b[2] and b[1] < a[2]
               for index, a in enumerate(intervals) for b in intervals[index + 1 :])


def _within_the_forward(attempt) -> None:
    """Every stage call ran inside the forward that the grader timed with its own clock."""
    outside = [(start, end) for _, start, end in attempt["intervals"]
               if start < -CLOCK_SLACK_SECONDS or end > attempt["elapsed"] + CLOCK_SLACK_SECONDS]
    if outside:
        start, end = outside[0]
        raise Fail(f"a call of the grader's stages ran from {start:.2f} s to {end:.2f} s after the forward began, "
                   f"but the forward took {attempt['elapsed']:.2f} s on the grader's own clock: the times recorded "
                   "inside your process were changed, so what this criterion observed cannot be trusted; it scores "
                   "0 and the course staff will review it", {"tampered": ["the stage calls' times (outside the forward)"]})


def judge_concurrency(seed: int, params: dict, observation, outside: Outside | None = None) -> None:
    count, microbatches, sleep, attempts = concurrency_params(params)
    limit = time_limit(count, microbatches, sleep)
    if not isinstance(observation, list) or not 1 <= len(observation) <= attempts:
        raise Malformed(f"Pipe concurrency: {len(observation) if isinstance(observation, list) else 'no'} measurements "
                        f"came back; the grader makes 1 to {attempts}")
    within_outside(sum(float(attempt["elapsed"]) for attempt in observation), outside, "the forwards' times")
    for attempt in observation:
        _within_the_forward(attempt)
        # Every stage call must have slept its full time: a grader stage's sleep is not the student's to change.
        short = [end - start for _, start, end in attempt["intervals"] if end - start < 0.9 * sleep]
        if short:
            raise Fail(f"{len(short)} of the {len(attempt['intervals'])} calls of the grader's stages took less than the "
                       f"{sleep:g} s each stage sleeps (the shortest {min(short):.3f} s): the grader's stages must run as given")
        if attempt["elapsed"] <= limit and _overlaps(attempt["intervals"]):
            return
    best = min(observation, key=lambda a: a["elapsed"])
    setting = (f"{count} stages that each sleep {sleep:g} s per microbatch, {microbatches} microbatches: a pipeline takes "
               f"about M + K - 1 = {microbatches + count - 1} steps ({(microbatches + count - 1) * sleep:.2f} s), one stage "
               f"after another takes M * K = {microbatches * count} ({microbatches * count * sleep:.2f} s)")
    if not best["intervals"]:
        raise Fail(f"{setting}; no stage call ran on a worker thread: submit every stage step to self.workers")
    if not _overlaps(best["intervals"]):
        raise Fail(f"{setting}; the forward took {best['elapsed']:.2f} s and no two stages ever ran at the same time. "
                   "Submit the whole wave before receiving any of it")
    raise Fail(f"{setting}; the forward took {best['elapsed']:.2f} s at best, over the limit of {limit:.2f} s")
