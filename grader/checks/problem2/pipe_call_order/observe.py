"""2.2-call-order, child side: the submit / receive calls the student's ``Pipe`` makes on its
``StageWorkers`` (reported by the grader's copy of ``minitorch.runtime``) and the microbatches
each grader stage ran. Judged in ``judge.py``."""
from __future__ import annotations

from grader.checks.problem2.pieces import student_pipeline
from grader.checks.problem2.pipe_call_order.cases import CALL_ORDER_CASES
from grader.checks.problem2.stages import build_stages, make_batch


def observe_call_order(seed: int, params: dict):
    """Records the submit/receive events the student's ``Pipe`` issues on ``StageWorkers`` for every CALL_ORDER_CASE."""
    pipeline, runtime = student_pipeline(params)
    cases = []
    for index, (count, batches, split_size) in enumerate(CALL_ORDER_CASES):
        log: list = []
        stages = build_stages(seed, index, count, log)
        for stage in stages:
            stage.split_size = split_size
        pipe = pipeline.Pipe(stages, devices=["cpu"] * count, split_size=split_size)
        runs = []
        try:
            for call, rows in enumerate(batches):
                events: list = []
                del log[:]
                with runtime.observe(events.append):
                    pipe(make_batch(seed, 100 * index + call, rows))
                runs.append({
                    "events": [(e.kind, e.stage) for e in events if e.kind in ("submit", "receive")],
                    "ran": [(r["stage"], r["first"], r["rows"]) for r in log],
                })
        finally:
            pipe.close()
        cases.append({"case": index, "runs": runs})
    return cases
