"""The Problem 4.4 grader check, in process: the answer key passes, wrong variants fail.

4.4 judges the step with the student's own schedule functions first ("own" pieces) and, only
where that fails, with the grader's schedule builders bound in their place ("grader" pieces,
the rubric's fallback): a mistake in 4.1 or 4.2 then costs those criteria, not 4.4.
"""
from __future__ import annotations

import dataclasses

import pytest
from grading_helpers import observe_and_judge

from grader.checks.judging import Fail, observed
from grader.checks.problem4.train_step import observe as train_observe
from grader.checks.problem4.train_step.judge import judge_step
from grader.child import plain_copy

SEED = 1234
CHECK = "problem4.train_step:step"


def answer(name):
    from minitorch import pipeline

    return getattr(pipeline, name)


def run_check(pieces="own", seed=SEED):
    observe_and_judge(CHECK, None, seed, {"pieces": pieces})


def fails(match, pieces="own"):
    with pytest.raises(Fail, match=match) as failure:
        run_check(pieces)
    return str(failure.value)


@pytest.fixture
def student(monkeypatch):
    from minitorch import pipeline

    return lambda attribute, value: monkeypatch.setattr(pipeline, attribute, value)


def schedule_for(num_devices, num_chunks, num_microbatches):
    from minitorch import pipeline

    if num_chunks == 1:
        return pipeline.one_f_one_b(num_devices, num_microbatches)
    return pipeline.interleaved_one_f_one_b(num_devices, num_microbatches, num_chunks)


def step_with(schedule_of=schedule_for, loss_scale=1, rows=None):
    """A train_step that looks its schedule up as the contract has it, with one defect."""
    def train_step(workers, stages, inputs, targets, loss_fn, num_microbatches):
        from minitorch import pipeline

        num_devices = workers.num_stages
        if not len(stages) or len(stages) % num_devices:
            raise ValueError("stages")
        schedule = schedule_of(num_devices, len(stages) // num_devices, num_microbatches)
        count = inputs.shape[0] if rows is None else rows
        return pipeline.run_schedule(workers, stages, schedule, inputs[:count], targets[:count],
                                     lambda output, target: loss_fn(output, target) * loss_scale)

    return train_step


@pytest.mark.parametrize("pieces", ["own", "grader"])
@pytest.mark.parametrize("seed", [0, SEED])
def test_answer_key_passes(pieces, seed):
    run_check(pieces, seed)


def test_an_equivalent_step_passes(student):
    student("train_step", step_with())
    run_check()


def test_stub_raises_not_implemented(student):
    def stub(*args, **kwargs):
        raise NotImplementedError("Problem 4.4")

    student("train_step", stub)
    for pieces in ("own", "grader"):
        with pytest.raises(NotImplementedError):
            run_check(pieces)


def test_always_interleaved_fails_for_v1_with_m_not_a_multiple(student):
    interleaved = answer("interleaved_one_f_one_b")
    student("train_step", step_with(lambda k, v, m: interleaved(k, m, v)))
    fails(r"3 devices x 1 chunks, M = 5.*: train_step raised ValueError: .*multiple")


def test_its_own_gpipe_order_fails(student):
    from minitorch import schedules

    student("train_step", step_with(lambda k, v, m: schedules.gpipe(k, m) if v == 1 else schedule_for(k, v, m)))
    fails(r"device 0 ran \(kind, stage\) F0 F0 .*your schedule says")


def test_another_valid_schedule_of_the_students_own_is_followed(student):
    """4.4 judges the step against the student's own schedule: a GPipe-order 1F1B (wrong for
    4.1-peak) still trains correctly, and the measured peak is that order's."""
    from minitorch import schedules

    student("one_f_one_b", lambda k, m: schedules.gpipe(k, m))
    run_check()


def test_a_deadlocking_schedule_fails(student):
    def deadlocking(k, v, m):
        schedule = schedule_for(k, v, m)
        schedule[-1] = [schedule[-1][1], schedule[-1][0], *schedule[-1][2:]]  # last device: B0 before F0
        return schedule

    student("train_step", step_with(deadlocking))
    fails(r"train_step raised ValueError: .*deadlock")


def test_a_forgotten_microbatch_fails_gradients(student):
    student("train_step", step_with(rows=-1))
    fails(r"loss|gradient of stage")


def b_before_f_on_last_device(schedule_function):
    """``schedule_function`` with the last device's first B moved to the front of its row."""
    def invalid(*arguments):
        schedule = schedule_function(*arguments)
        row = schedule[-1]
        first_b = next(i for i, action in enumerate(row) if action.kind == "B")
        schedule[-1] = [row[first_b], *row[:first_b], *row[first_b + 1:]]
        return schedule

    return invalid


def test_an_invalid_one_f_one_b_fails_own_pieces_and_passes_with_the_graders(student):
    from minitorch import pipeline

    invalid = b_before_f_on_last_device(answer("one_f_one_b"))
    student("one_f_one_b", invalid)
    fails(r"your one_f_one_b\(2, 4\) is not a valid schedule: .*\(Problem 4\.1 charges that; 4\.4 is then judged with "
          r"the grader's schedule functions in place of yours\)")
    run_check("grader")
    assert pipeline.one_f_one_b is invalid  # the grader's builder was bound for the step only


@pytest.mark.parametrize("function, problem", [("one_f_one_b", "4.1"), ("interleaved_one_f_one_b", "4.2")])
def test_a_schedule_function_that_raises_costs_its_own_criterion(student, function, problem):
    def unfinished(*arguments):
        raise NotImplementedError("Problem 4.x: not yet")

    student(function, unfinished)
    fails(rf"your {function}\(.*\) raised NotImplementedError: Problem 4.x: not yet, so the step cannot follow it "
          rf"\(Problem {problem} charges that")
    run_check("grader")


def test_a_wrong_step_fails_with_both_pieces(student):
    student("one_f_one_b", b_before_f_on_last_device(answer("one_f_one_b")))
    student("train_step", step_with(loss_scale=3))
    fails(r"your one_f_one_b\(2, 4\) is not a valid schedule")
    message = fails(r"loss|gradient of stage", pieces="grader")
    assert "your schedule" not in message


def test_its_own_order_is_compared_with_the_graders_schedule(student):
    """With the grader's pieces, a step that builds its own order ignores the bound builders: it
    is compared with the grader's schedule, the one the step had to follow in that run."""
    from minitorch import schedules

    one_f_one_b = answer("one_f_one_b")
    student("train_step", step_with(lambda k, v, m: one_f_one_b(k, m) if v == 1 else schedule_for(k, v, m)))
    run_check("grader")
    student("train_step", step_with(lambda k, v, m: schedules.gpipe(k, m) if v == 1 else schedule_for(k, v, m)))
    fails(r"device 0 ran \(kind, stage\) F0 F0 .*the grader's schedule says F0 F0 B0", pieces="grader")


def test_gradients_zeroed_first_fail(student):
    """The contract: .grad grows by the step's gradient (the caller zeroes it between steps)."""
    train_step = answer("train_step")

    def zeroing(workers, stages, *rest):
        for stage in stages:
            stage.zero_grad()
        return train_step(workers, stages, *rest)

    student("train_step", zeroing)
    fails(r"4 devices x 1 chunks, M = 2, gradients already there before the step: the gradient of stage 0's weight "
          r"differs by up to .* the gradients there before plus the sequential run's")


def test_a_schedule_cached_by_devices_and_chunks_fails_the_second_step(student):
    cache: dict = {}

    def caching(workers, stages, inputs, targets, loss_fn, num_microbatches):
        from minitorch import pipeline

        key = (workers.num_stages, len(stages))
        if key not in cache:
            cache[key] = schedule_for(workers.num_stages, len(stages) // workers.num_stages, num_microbatches)
        return pipeline.run_schedule(workers, stages, cache[key], inputs, targets, loss_fn)

    student("train_step", caching)
    fails(r"2 devices x 1 chunks, M = 3, then again on the same stages with M = 5: (device 0 ran|the step reports loss|"
          r"the returned report)")


def test_a_step_cached_on_its_arguments_fails_the_same_step_again(student):
    """State across calls: the report of an earlier call with equal arguments handed out again,
    the second step never run."""
    train_step, cache = answer("train_step"), {}

    def caching(*arguments):
        key = repr(arguments)
        if key not in cache:
            cache[key] = train_step(*arguments)
        return cache[key]

    student("train_step", caching)
    fails(r"1 devices x 2 chunks, M = 3, then again on the same stages with M = 3: device 0 ran")


def test_a_report_of_its_own_fails(student):
    @dataclasses.dataclass
    class Report:
        loss: float

    train_step = answer("train_step")
    student("train_step", lambda *args: Report(train_step(*args).loss))
    fails(r"train_step returned .*Report; the contract returns the executor's StepReport")


def test_a_step_that_swallows_errors_fails(student):
    train_step = answer("train_step")

    def swallowing(*args):
        try:
            return train_step(*args)
        except Exception:  # noqa: BLE001 - the mistake under test
            return None

    student("train_step", swallowing)
    fails(r"train_step with 3 stages on 2 devices: it returned; the contract says it raises")


def test_a_failing_stage_must_reach_the_caller(student):
    from minitorch.executor import StepReport

    train_step = answer("train_step")

    def hiding_stage_errors(workers, stages, inputs, targets, loss_fn, num_microbatches):
        if not len(stages) or len(stages) % workers.num_stages or num_microbatches < 1:
            raise ValueError("bad arguments")
        try:
            return train_step(workers, stages, inputs, targets, loss_fn, num_microbatches)
        except ValueError:
            raise
        except Exception:  # noqa: BLE001 - the mistake under test
            return StepReport(loss=float("nan"))

    student("train_step", hiding_stage_errors)
    fails(r"stage 1 raising in its forward of microbatch 1: the stage's exception must reach the caller; it returned")


def test_a_forged_pieces_field_is_refused():
    observation = plain_copy(train_observe.observe_step(SEED, {"pieces": "own"}))
    observation["pieces"] = "grader"
    with pytest.raises(Fail, match=r"asked for 'own'"):
        judge_step(SEED, {"pieces": "own"}, observed(observation))
