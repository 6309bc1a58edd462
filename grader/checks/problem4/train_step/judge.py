"""PARENT side of 4.4: each device ran its row of the schedule the step had to follow (the
student's own; with the fallback's grader pieces, the grader's), the measured peaks are the
simulator's, the report is the executor's, the gradients grew by the sequential run's, bad
calls raise and a failing stage's error reaches the caller in time."""
from __future__ import annotations

import math

import torch

from grader.checks.compare import close, difference
from grader.checks.judging import Fail, expect_cases
from grader.checks.problem4 import judge_schedules as judging
from grader.checks.problem4.expected_orders import reference_interleaved
from grader.checks.problem4.train_step import stages as table
from grader.checks.threads import single_threaded

PROBLEM_OF = {"one_f_one_b": "4.1", "interleaved_one_f_one_b": "4.2"}


def _call_text(function: str, arguments: tuple) -> str:
    return f"{function}({', '.join(map(str, arguments))})"


def _schedule(step, case: table.TrainCase, microbatches: int, pieces: str, what: str) -> tuple[list, str]:
    """The rows the step had to follow and whose they are; :class:`Fail` when the student's
    own schedule (own pieces) cannot be followed: 4.1/4.2 charge that, the fallback then
    judges the step with the grader's builders."""
    function, arguments = table.schedule_call(case.devices, case.chunks, microbatches)
    call = _call_text(function, arguments)
    if pieces == "grader":
        reference = reference_interleaved(case.devices, microbatches, case.chunks)
        return [[list(action) for action in row] for row in reference], "the grader's schedule"
    reading = step["schedule"]
    if reading is None or "raised" in dict.keys(reading):
        raised = "no schedule" if reading is None else f"raised {str(reading['raised'])[:300]}"
        raise Fail(f"{what}: your {call} {raised}, so the step cannot follow it (Problem {PROBLEM_OF[function]} "
                   "charges that; 4.4 is then judged with the grader's schedule functions in place of yours)")
    rows = judging.schedule_rows(reading, f"your {call}", case.devices, judge_types=False)
    try:
        judging.simulate(rows, f"your {call}", microbatches, case.chunks)
    except Fail as invalid:
        raise Fail(f"{what}: {invalid} (Problem {PROBLEM_OF[function]} charges that; 4.4 is then judged with the "
                   "grader's schedule functions in place of yours)") from None
    return rows, "your schedule"


def _sequential(seed: int, case: table.TrainCase) -> tuple[float, list]:
    """The batch through all stages without a pipeline: the loss and every parameter's gradient."""
    stages, inputs, targets = table.build(seed, case.devices, case.chunks, case.microbatches, case.rows)
    h = inputs
    for stage in stages:
        h = stage(h)
    loss = table.mse(h, targets)
    loss.backward()
    return loss.item(), [p.grad for stage in stages for p in stage.parameters()]


def _judge_report(report, rows: list, case: table.TrainCase, loss: float, predicted: list, what: str) -> None:
    if report["provided"] is not True:
        raise Fail(f"{what}: train_step returned a {str(report['type'])[-60:]}; the contract returns the executor's "
                   "StepReport")
    if report["loss"] is None or not math.isclose(report["loss"], loss, rel_tol=1e-9, abs_tol=1e-12):
        raise Fail(f"{what}: the step reports loss {report['loss']} ({str(report['loss_type'])[:40]}); the mean loss of "
                   f"the batch is {loss:.12g}")
    from minitorch import schedules

    executed = [[schedules.format_action(schedules.Action(*action), case.devices, case.chunks) for action in row]
                for row in rows]
    if report["executed"] != executed or report["peak_live"] is None or len(report["peak_live"]) != len(predicted) \
            or any(abs(a - b) > 1e-9 for a, b in zip(report["peak_live"], predicted)):
        raise Fail(f"{what}: the returned report's executed / peak_live are not what the executor reports for this "
                   f"step: return run_schedule's StepReport")


def _judge_run(entry, case: table.TrainCase, seed: int, pieces: str) -> None:
    what = case.describe()
    planned: list[list[str]] = [[] for _ in range(case.devices)]
    predicted = [0.0] * case.devices
    steps = []
    for microbatches, step in zip(case.sizes(), list(entry["steps"]) + [None] * 2):
        if step is None:
            raise Fail(f"{what}: the grader's record holds fewer steps than it ran")
        rows, whose = _schedule(step, case, microbatches, pieces, what)
        if step["error"] is not None:
            raise Fail(f"{what}: train_step raised {str(step['error'])[:400]} (following {whose})")
        timeline = judging.simulate(rows, f"{what}: {whose}", microbatches, case.chunks)
        for device, row in enumerate(rows):
            planned[device] += [f"{kind}{stage}" for stage, kind, _ in row]
        predicted = [max(a, b) for a, b in zip(predicted, timeline.peak_in_flight)]
        steps.append((step["report"], rows, timeline.peak_in_flight))
    _judge_order(entry, planned, whose, what)
    measured = list(entry["peaks"])
    if len(measured) != len(predicted) or any(abs(a - b) > 1e-9 for a, b in zip(measured, predicted)):
        raise Fail(f"{what}: peak activations held per device, measured {measured}; the simulator predicts "
                   f"{predicted} for {whose}")
    loss, grads = _sequential(seed, case)
    for report, rows, peaks in steps:
        _judge_report(report, rows, case, loss, peaks, what)
    _judge_gradients(entry, case, seed, grads, what)


def _judge_order(entry, planned: list, whose: str, what: str) -> None:
    if len(entry["events"]) != len(planned):
        raise Fail(f"{what}: the grader's record has {len(entry['events'])} devices, expected {len(planned)}")
    for device, (plan, ran) in enumerate(zip(planned, entry["events"])):
        done = [f"{kind}{stage}" for stage, kind in ran]
        if plan != done:
            step = next((i for i, (a, b) in enumerate(zip(plan, done)) if a != b), min(len(plan), len(done)))
            raise Fail(
                f"{what}: device {device} ran (kind, stage) {' '.join(done[:step + 3])} ...; {whose} says "
                f"{' '.join(plan[:step + 3])} ... (they part at step {step}); the step must follow the schedule "
                "your schedule functions return, with stage s on device s % K"
            )


def _judge_gradients(entry, case: table.TrainCase, seed: int, grads: list, what: str) -> None:
    if case.preset:
        stages, _, _ = table.build(seed, case.devices, case.chunks, case.microbatches, case.rows)
        table.preset(stages)
        start = [p.grad for stage in stages for p in stage.parameters()]
    else:
        start = [torch.zeros_like(grad) for grad in grads]
    expected = [first + len(case.sizes()) * grad for first, grad in zip(start, grads)]
    if len(entry["grads"]) != len(expected):
        raise Fail(f"{what}: expected {len(expected)} parameter gradients, got {len(entry['grads'])}")
    grown = "the gradients there before plus " if case.preset else ""
    times = "twice " if case.then is not None else ""
    for index, (mine, wanted) in enumerate(zip(entry["grads"], expected)):
        stage, name = divmod(index, 2)
        label = f"the gradient of stage {stage}'s {'bias' if name else 'weight'}"
        if mine is None:
            raise Fail(f"{what}: {label} is None after the step")
        if not close(mine, wanted, rtol=1e-9, atol=1e-12):
            raise Fail(f"{what}: {label} {difference(mine, wanted)} {grown}{times}the sequential run's (the mean loss "
                       "over the whole batch, no pipeline): .grad grows by each step's gradient, the caller zeroes it")


@single_threaded
def judge_step(seed: int, params: dict, observation) -> None:
    """Every training case, then the bad calls (each raises), then the failing stage (its
    error reaches the caller, well within the workers' timeout)."""
    pieces = params.get("pieces", "own")
    if observation["pieces"] != pieces:
        raise Fail(f"train_step: the step came back as run with {str(observation['pieces'])[:20]!r} pieces where the "
                   f"grader asked for {pieces!r}: what came back from your code's process cannot be judged")
    indices = list(range(len(table.CASES)))
    for index, entry in zip(indices, expect_cases(observation["cases"], indices, "train_step")):
        _judge_run(entry, table.CASES[index], seed, pieces)
    labels = [label for label, *_ in table.BAD]
    for label, entry in zip(labels, expect_cases(observation["bad"], labels, "train_step")):
        if entry["raised"] is None:
            raise Fail(f"train_step with {label}: it returned; the contract says it raises (the ValueError of your "
                       "schedule functions or of the executor is right)")
    failing = observation["failing"]
    devices, chunks, microbatches, stage, on_call = table.FAILING
    what = f"train_step on {devices} devices, M = {microbatches}, stage {stage} raising in its forward of microbatch {on_call}"
    if failing["raised"] != "the stage's":
        got = "it returned" if failing["raised"] is None else f"it raised {str(failing['raised'])[:300]}"
        raise Fail(f"{what}: the stage's exception must reach the caller; {got}")
    if not isinstance(failing["seconds"], float) or failing["seconds"] > table.TIMEOUT:
        raise Fail(f"{what}: the error reached the caller after {failing['seconds']} s, beyond the workers' timeout "
                   f"({table.TIMEOUT:g} s)")
