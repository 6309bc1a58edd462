"""CHILD side of 4.4: the student's ``train_step`` run on the grader's recording stages.

With ``params["pieces"] == "own"`` (first) the step follows the student's own schedule
functions, whose schedules are recorded to judge it against; with ``"grader"`` (the rubric's
fallback, only after the student's own pieces failed) the grader's builders are bound in their
place, and the parent judges the step against the grader's schedules."""
from __future__ import annotations

from torch import nn

from grader.checks.problem4 import reading
from grader.checks.problem4.pieces import grader_builders, grader_one_f_one_b
from grader.checks.problem4.train_step import stages as table
from grader.checks.problem4.train_step.interleaved_piece import grader_interleaved
from grader.checks.recording import provided, trusted
from grader.checks.threads import single_threaded

FORKSERVER_PRELOAD = ("torch.fx.experimental.symbolic_shapes",)
CONTAINERS = {"list": list, "tuple": tuple, "ModuleList": nn.ModuleList}


def _student():
    from minitorch import pipeline

    return pipeline


def _report(report) -> dict:
    """The facts of what a step returned: its kind, and the StepReport's fields as plain data."""
    provided_class = type(report) is provided("minitorch.executor").StepReport
    facts = {"type": reading.type_name(report), "provided": provided_class, "loss": None, "loss_type": "",
             "executed": None, "peak_live": None}
    if not provided_class:
        return facts
    loss = report.loss
    facts.update(loss=float(loss) if isinstance(loss, (int, float)) else None, loss_type=reading.type_name(loss))
    if isinstance(report.executed, list) and all(isinstance(row, list) for row in report.executed):
        facts["executed"] = [[str(item)[:12] for item in row] for row in report.executed]
    if isinstance(report.peak_live, list):
        facts["peak_live"] = [float(value) for value in report.peak_live if isinstance(value, (int, float))]
    return facts


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {reading.message_of(error)}"


def _run_case(student, seed: int, case: table.TrainCase, pieces: str) -> dict:
    stages, inputs, targets = table.build(seed, case.devices, case.chunks, case.microbatches, case.rows)
    if case.preset:
        table.preset(stages)
    log = table.StepLog(case.devices, case.chunks)
    for stage in stages:
        stage.log = log
    passed = CONTAINERS[case.container](stages)
    steps = []
    with provided("minitorch.runtime").StageWorkers(["cpu"] * case.devices, timeout=table.TIMEOUT) as workers:
        for microbatches in case.sizes():
            function, arguments = table.schedule_call(case.devices, case.chunks, microbatches)
            step: dict = {"schedule": None, "report": None, "error": None}
            steps.append(step)
            if pieces != "grader":
                try:
                    step["schedule"] = reading.read_schedule(getattr(student, function)(*arguments))
                except Exception as error:  # noqa: BLE001 - no schedule to follow: the parent says why
                    step["schedule"] = {"raised": _error(error)[:400]}
                    break
            try:
                step["report"] = _report(student.train_step(workers, passed, inputs, targets, table.mse, microbatches))
            except NotImplementedError:
                raise
            except Exception as error:  # noqa: BLE001 - the parent words it, with the schedule's state
                step["error"] = _error(error)[:400]
                break
    grads = [None if p.grad is None else p.grad.detach().clone() for stage in stages for p in stage.parameters()]
    return {"steps": steps, "events": log.events, "peaks": log.peaks, "grads": grads}


def _bad_call(student, label: str, devices: int, count: int, microbatches: int) -> dict:
    stages, inputs, targets = table.build(0, devices, 1, microbatches)
    stages = (stages * 2)[:count]
    with provided("minitorch.runtime").StageWorkers(["cpu"] * devices, timeout=table.TIMEOUT) as workers:
        return {"case": label, **reading.outcome(
            lambda: student.train_step(workers, stages, inputs, targets, table.mse, microbatches))}


def _failing_stage(student) -> dict:
    devices, chunks, microbatches, failing, on_call = table.FAILING
    stages, inputs, targets = table.build(0, devices, chunks, microbatches)
    stages[failing].fail_on_call = on_call + 1
    start = trusted.perf_counter()
    with provided("minitorch.runtime").StageWorkers(["cpu"] * devices, timeout=table.TIMEOUT) as workers:
        try:
            student.train_step(workers, stages, inputs, targets, table.mse, microbatches)
        except table.StageFailure:
            return {"raised": "the stage's", "seconds": trusted.perf_counter() - start}
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - a fact for the parent
            return {"raised": _error(error)[:400], "seconds": trusted.perf_counter() - start}
    return {"raised": None, "seconds": trusted.perf_counter() - start}


@single_threaded
def observe_step(seed: int, params: dict) -> dict:
    """Every training case (the schedules to follow, with the student's own pieces), the bad
    calls, and a step whose stage raises."""
    student, pieces = _student(), params.get("pieces", "own")
    with grader_builders(student, {"one_f_one_b": grader_one_f_one_b, "interleaved_one_f_one_b": grader_interleaved},
                         pieces):
        cases = [{"case": index, **_run_case(student, seed, case, pieces)} for index, case in enumerate(table.CASES)]
        if any(isinstance(step["schedule"], dict) and "raised" in step["schedule"]
               for case in cases for step in case["steps"]):
            return {"pieces": pieces, "cases": cases, "bad": [], "failing": {}}  # no schedule of the student's to use
        bad = [_bad_call(student, *entry) for entry in table.BAD]
        failing = _failing_stage(student)
    return {"pieces": pieces, "cases": cases, "bad": bad, "failing": failing}
