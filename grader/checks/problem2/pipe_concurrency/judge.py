"""2.2-concurrency, parent side: a forward takes about M + K - 1 stage steps, with stages of one
wave overlapping in time, and every grader stage slept its full time. Observed in ``observe.py``."""
from __future__ import annotations

from grader.checks.judging import Fail, Malformed
from grader.checks.problem2.pipe_concurrency.cases import concurrency_params, time_limit


def _overlaps(intervals) -> bool:
    return any(a[0] != b[0] and a[1] < b[2] and b[1] < a[2]
               for index, a in enumerate(intervals) for b in intervals[index + 1 :])


def judge_concurrency(seed: int, params: dict, observation) -> None:
    count, microbatches, sleep, attempts = concurrency_params(params)
    limit = time_limit(count, microbatches, sleep)
    if not isinstance(observation, list) or not 1 <= len(observation) <= attempts:
        raise Malformed(f"Pipe concurrency: {len(observation) if isinstance(observation, list) else 'no'} measurements "
                        f"came back; the grader makes 1 to {attempts}")
    for attempt in observation:
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
