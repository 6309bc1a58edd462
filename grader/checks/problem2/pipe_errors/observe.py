"""2.2-exceptions, 2.2-exception-unchanged and 2.2-base-exception, child side: one grader stage
raises on one microbatch (or several stages, each on one, or one takes longer than the Pipe's
timeout); recorded are what reached the caller (and whose exception it is), what ran before it
did, the next forward on a good batch, the workers that served it, and the threads left after
``close()``. Judged in ``judge.py``."""
from __future__ import annotations

import threading
from typing import Any

from grader.checks.problem2.pieces import student_pipeline
from grader.checks.problem2.pipe_errors.cases import GOOD_BATCH, KINDS, SEVERAL_CASES, TAGS, TIMEOUT_CASE
from grader.checks.problem2.recorded import error_message, error_text
from grader.checks.problem2.stages import build_stages, make_batch
from grader.checks.recording import student_tensor, trusted

THREAD_WAIT = 2.0  # seconds the stage threads get to end after close()
_threads = threading.enumerate  # as it was before any student code


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and what it carries (its cause or context, and theirs), at most 20 deep."""
    found: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and len(found) < 20 and link not in found:
        found.append(link)
        link = link.__cause__ or link.__context__
    return found


def _caught(pipe, x, owners: list[list]) -> dict:
    """What ``pipe(x)`` let reach the caller: nothing, or an exception (its type, message, whether
    it is one of the exceptions in ``owners``, which owner's (``which``: an index, or None), whether
    it carries one, whether it is or carries a TimeoutError)."""
    try:
        pipe(x)
    except NotImplementedError:
        raise
    except BaseException as error:  # noqa: BLE001 - what reached the caller is graded
        chain = _chain(error)
        which = [index for index, own in enumerate(owners) if any(error is mine for mine in own)]
        return {"raised": True, "type": type(error).__qualname__, "message": error_message(error, 500),
                "same_object": bool(which), "which": which[0] if which else None,
                "carries": any(e is mine for e in chain for own in owners for mine in own),
                "timeout": any(isinstance(e, TimeoutError) for e in chain), "is_timeout": isinstance(error, TimeoutError)}
    return {"raised": False}


def _next_forward(runtime, pipe, seed: int, tag: int, rows: int) -> dict:
    """A forward on a good batch: its output (or error) and the workers that served it."""
    events: list = []
    try:
        with runtime.observe(events.append):
            out = student_tensor(pipe(make_batch(seed, tag, rows)), "the next forward")
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001
        return {"output": None, "error": error_text(error), "workers": []}
    return {"output": out.detach().clone(), "error": None, "workers": sorted({e.workers for e in events})}


def _failing_pipe(seed: int, pipeline, runtime, tag: int, case: tuple, failures, fail_with: str) -> dict:
    """The stages of ``case`` (stages, rows, split_size), each ``(stage, microbatch)`` of ``failures``
    raising ``FAILURES[fail_with]``: what reached the caller, what the stages ran (the rows each was
    given, the stages received in order), and the next forward on a good batch."""
    count, rows, split_size = case
    stages = build_stages(seed, tag, count)
    for stage in stages:
        stage.split_size = split_size
    failing = [stages[stage] for stage, _ in failures]
    for stage, (_, microbatch) in zip(failing, failures):
        stage.fail_on, stage.fail_with = microbatch, fail_with
    pipe = pipeline.Pipe(stages, devices=["cpu"] * count, split_size=split_size)
    try:
        workers = pipe.workers
        events: list = []
        with runtime.observe(events.append):
            caught = _caught(pipe, make_batch(seed, tag, rows), [stage.raised for stage in failing])
        seen = {"caught": caught, "raised": [bool(stage.raised) for stage in failing],
                "calls": [len(stage.given) for stage in stages], "given": list(failing[0].given),
                "given_all": [list(stage.given) for stage in stages],
                "received": [event.stage for event in events if event.kind == "receive"]}
        for stage in failing:
            stage.fail_on = None
        again = _next_forward(runtime, pipe, seed, GOOD_BATCH + tag, rows)
        seen["again"] = {**again, "same_workers": pipe.workers is workers and again["workers"] in ([], [id(workers)])}
    finally:
        pipe.close()
    return seen


def _failing_case(seed: int, pipeline, runtime, kind: str, index: int, fail_with: str) -> dict:
    """Case ``index`` of ``kind``: one stage raising ``FAILURES[fail_with]`` on one microbatch."""
    count, rows, split_size, bad_stage, bad_microbatch = KINDS[kind][index]
    seen = _failing_pipe(seed, pipeline, runtime, TAGS[kind] + index, (count, rows, split_size),
                         [(bad_stage, bad_microbatch)], fail_with)
    return {"case": index, **seen, "stage_raised": seen["raised"][0]}


def _several_case(seed: int, pipeline, runtime, index: int) -> dict:
    """Case ``index`` of ``SEVERAL_CASES``: several stages raising an Exception, each on one microbatch."""
    count, rows, split_size, failures = SEVERAL_CASES[index]
    seen = _failing_pipe(seed, pipeline, runtime, TAGS["several"] + index, (count, rows, split_size), failures, "Exception")
    return {"case": index, **seen}


def _timeout_case(seed: int, pipeline, runtime) -> dict:
    """A stage held past the Pipe's timeout: what reached the caller and the calls the Pipe made
    before it did (a resubmitted call shows), then, the stage released, the next forward."""
    case, tag = TIMEOUT_CASE, TAGS["timeout"]
    stages = build_stages(seed, tag, case["stages"])
    for stage in stages:
        stage.split_size = case["split"]
    held, release = stages[case["stage"]], trusted.Event()
    held.hold, held.hold_on = release, case["microbatch"]
    pipe = pipeline.Pipe(stages, devices=["cpu"] * case["stages"], split_size=case["split"], timeout=case["timeout"])
    events: list = []
    try:
        workers = pipe.workers
        with runtime.observe(events.append):
            caught = _caught(pipe, make_batch(seed, tag, case["rows"]), [])
        release.set()  # the held call ends now; its late result is the workers' to drop
        again = _next_forward(runtime, pipe, seed, GOOD_BATCH + tag, case["rows"])
        again["same_workers"] = pipe.workers is workers and again["workers"] in ([], [id(workers)])
    finally:
        release.set()
        pipe.close()
    return {"caught": caught, "held": held.hold is None, "calls": [(e.kind, e.stage) for e in events if e.kind in ("submit", "receive")],
            "again": again}


def _alive(before: set) -> list[str]:
    deadline = trusted.monotonic() + THREAD_WAIT
    while True:
        alive = [t.name for t in _threads() if t not in before and t.is_alive()]
        if not alive or trusted.monotonic() > deadline:
            return alive
        trusted.sleep(0.02)


def _observe(seed: int, params: dict, kind: str, timeout: bool) -> dict:
    pipeline, runtime = student_pipeline(params)
    before = set(_threads())
    if kind == "exception":
        cases = [_failing_case(seed, pipeline, runtime, kind, index, "Exception") for index in range(len(KINDS[kind]))]
    else:  # each case also with an Exception in its place: what a BaseException changes shows
        cases = [{**_failing_case(seed, pipeline, runtime, kind, index, "BaseException"),
                  "as_exception": _failing_case(seed, pipeline, runtime, kind, index, "Exception")}
                 for index in range(len(KINDS[kind]))]
    observation: dict[str, Any] = {"cases": cases}
    if kind == "exception":
        observation["several"] = [_several_case(seed, pipeline, runtime, index) for index in range(len(SEVERAL_CASES))]
    if timeout:
        observation["timeout"] = _timeout_case(seed, pipeline, runtime)
    observation["alive"] = _alive(before)
    return observation


def observe_exceptions(seed: int, params: dict):
    """An Exception in one stage (several cases), Exceptions in several stages, and a stage slower
    than the timeout: what reached the caller, the next forward, and which threads were left after
    close()."""
    return _observe(seed, params, "exception", timeout=True)


def observe_exception_unchanged(seed: int, params: dict):
    """The same failing stages (and timeout) as 2.2-exceptions; judged on what reached the caller (the
    first error in schedule order, where several stages fail) and on what ran after the error."""
    return _observe(seed, params, "exception", timeout=True)


def observe_base_exception(seed: int, params: dict):
    """A BaseException that is not an Exception in one stage, and an Exception in its place: what
    reached the caller, and the next forward."""
    return _observe(seed, params, "base_exception", timeout=False)
