"""2.2-concurrency, child side: a forward through grader stages that each sleep per microbatch,
timed with the grader's own clock, and when each stage call ran (from the grader's copy of
``minitorch.runtime``). Judged in ``judge.py``."""
from __future__ import annotations

from grader.checks.problem2.pieces import student_pipeline
from grader.checks.problem2.pipe_concurrency.cases import concurrency_params, time_limit
from grader.checks.problem2.stages import build_stages, make_batch
from grader.checks.recording import trusted


def observe_concurrency(seed: int, params: dict):
    """Times sleeping stages through the ``Pipe`` and records when each stage ran (start/end intervals per microbatch)."""
    pipeline, runtime = student_pipeline(params)
    count, microbatches, sleep, attempts = concurrency_params(params)
    stages = build_stages(seed, 0, count)
    for stage in stages:
        stage.sleep, stage.split_size = sleep, 2
    pipe = pipeline.Pipe(stages, devices=["cpu"] * count, split_size=2)
    tries = []
    try:
        for attempt in range(attempts):
            events: list = []
            with runtime.observe(events.append):
                started = trusted.perf_counter()
                pipe(make_batch(seed, attempt, 2 * microbatches))
                elapsed = trusted.perf_counter() - started
            starts = {(e.workers, e.stage, e.call): e.time for e in events if e.kind == "start"}
            intervals = [(e.stage, starts[key] - started, e.time - started)
                         for e in events if e.kind == "finish" and (key := (e.workers, e.stage, e.call)) in starts]
            tries.append({"elapsed": elapsed, "intervals": intervals})
            if elapsed <= time_limit(count, microbatches, sleep):
                break  # fast enough: measuring again would change nothing
    finally:
        pipe.close()
    return tries
