"""The Problem 4 grader checks, in process: the answer key passes, wrong variants fail.

Each wrong variant replaces one function of the student module (monkeypatch) and must
fail the criterion it targets with a message that says what went wrong.
"""

import math
import re

import pytest
import torch
from grading_helpers import observe_and_judge

from grader.checks import Fail, observed
from grader.checks import problem4 as checks
from grader.child import plain_copy
from grader.layout import DEFAULT_RUBRIC
from grader.tomlcompat import tomllib
from minitorch.schedules import Action

SEED = 1234
CRITERIA = {  # check name -> observe function used
    "one_f_one_b": "one_f_one_b",
    "one_f_one_b_peak": "one_f_one_b_peak",
    "interleaved": "interleaved",
    "interleaved_arguments": "interleaved_arguments",
    "one_f_one_b_arguments": "one_f_one_b_arguments",
    "recompute_arguments": "recompute_arguments",
    "recompute_grads": "recompute_grads",
    "recompute_memory": "recompute_memory",
    "recompute_count": "recompute_count",
    "recompute_caller": "recompute_caller",
    "train_step": "train_step",
}


def answer(name):
    """A function of the answer key's student module (the module the checks import)."""
    from minitorch import pipeline

    return getattr(pipeline, name)


def run_check(name, seed=SEED):
    """The check along the grader's path (observe, plain data, save/load, judge)."""
    observe_and_judge(checks, name, seed)


def fails(name, match):
    with pytest.raises(Fail, match=match):
        run_check(name)


@pytest.fixture
def student(monkeypatch):
    from minitorch import pipeline

    return lambda attribute, value: monkeypatch.setattr(pipeline, attribute, value)


@pytest.mark.parametrize("name", list(CRITERIA))
@pytest.mark.parametrize("seed", [0, SEED])
def test_answer_key_passes(name, seed):
    run_check(name, seed)


def test_rubric_entries_name_existing_checks_and_total_18():
    rubric = tomllib.loads(DEFAULT_RUBRIC.read_text())
    problem4 = [c for c in rubric["criterion"] if c["problem"].startswith("4.")]
    assert sum(c["points"] for c in problem4) == 18
    for criterion in problem4:
        module, name = criterion["check"].split(":")
        assert module == "problem4"
        assert callable(getattr(checks, f"observe_{name}")) and callable(getattr(checks, f"judge_{name}"))


@pytest.mark.parametrize("name", list(CRITERIA))
def test_stub_raises_not_implemented(name, student):
    def stub(*args, **kwargs):
        raise NotImplementedError("Problem 4.x")

    for attribute in ("one_f_one_b", "interleaved_one_f_one_b", "checkpoint_sequential", "train_step"):
        student(attribute, stub)
    with pytest.raises(NotImplementedError):
        run_check(name)


# ---------------------------------------------------------------- 4.1


def one_f_one_b_with_warmup(warmup_of):
    def schedule(num_stages, num_microbatches):
        rows = []
        for d in range(num_stages):
            warmup = max(0, min(warmup_of(num_stages, d), num_microbatches))
            row = [Action(d, "F", m) for m in range(warmup)]
            for m in range(num_microbatches - warmup):
                row += [Action(d, "F", warmup + m), Action(d, "B", m)]
            rows.append(row + [Action(d, "B", m) for m in range(num_microbatches - warmup, num_microbatches)])
        return rows

    return schedule


def test_warmup_one_too_many_fails_peak(student):
    student("one_f_one_b", one_f_one_b_with_warmup(lambda k, d: k - d))
    fails("one_f_one_b_peak", r"device 0 holds up to \d+ microbatches.*min\(K - d, M\)")
    run_check("one_f_one_b")  # as fast as GPipe: only the memory is wrong


def test_warmup_too_short_fails_makespan(student):
    student("one_f_one_b", one_f_one_b_with_warmup(lambda k, d: k - d - 2))
    fails("one_f_one_b", r"one step takes .* GPipe's takes \(M \+ K - 1\)\(F \+ B\)")


def test_gpipe_order_fails_peak(student):
    def gpipe(num_stages, num_microbatches):
        return [[Action(d, "F", m) for m in range(num_microbatches)] + [Action(d, "B", m) for m in range(num_microbatches)]
                for d in range(num_stages)]

    student("one_f_one_b", gpipe)
    fails("one_f_one_b_peak", "holds up to")


def test_missing_backward_fails_as_invalid(student):
    one_f_one_b = answer("one_f_one_b")

    student("one_f_one_b", lambda k, m: [row[:-1] if d == 0 else row for d, row in enumerate(one_f_one_b(k, m))])
    fails("one_f_one_b", r"is not a valid schedule: device 0: missing B")


# ---------------------------------------------------------------- 4.2


def test_interleaved_ignoring_chunks_fails(student):
    one_f_one_b = answer("one_f_one_b")

    student("interleaved_one_f_one_b", lambda k, m, v: one_f_one_b(k, m))
    fails("interleaved", r"not a valid schedule: device 0: missing 1F0")


def test_interleaved_all_forwards_first_fails_peak(student):
    interleaved_one_f_one_b = answer("interleaved_one_f_one_b")

    def forwards_first(k, m, v):
        rows = interleaved_one_f_one_b(k, m, v)
        return [[a for a in row if a.kind == "F"] + [a for a in row if a.kind == "B"] for row in rows]

    student("interleaved_one_f_one_b", forwards_first)
    fails("interleaved", r"holds up to .* Megatron-LM's order holds at most")


def test_interleaved_backward_chunks_not_reversed_fails(student):
    interleaved_one_f_one_b = answer("interleaved_one_f_one_b")

    def same_chunk_order(k, m, v):
        rows = interleaved_one_f_one_b(k, m, v)
        # swap each backward's chunk c -> v - 1 - c: backwards now run in forward chunk order
        return [[Action((v - 1 - a.stage // k) * k + a.stage % k, "B", a.microbatch) if a.kind == "B" else a
                 for a in row] for row in rows]

    student("interleaved_one_f_one_b", same_chunk_order)
    fails("interleaved", "not a valid schedule: deadlock|one step takes")


def test_interleaved_warmup_that_only_ties_with_instant_transfers_fails(student):
    """K - d - 1 + (v - 1)K warm-up forwards: as fast as Megatron's order and lighter on memory
    with instant transfers, slower as soon as a transfer takes time."""
    from grader.checks.problem4 import reference_interleaved

    def short_warmup(k, m, v):
        rows = reference_interleaved(k, m, v)
        result = []
        for d, row in enumerate(rows):
            forwards = [Action(*a) for a in row if a[1] == "F"]
            backwards = [Action(*a) for a in row if a[1] == "B"]
            warmup = min((k - d - 1) + (v - 1) * k if v > 1 else k - d - 1, len(forwards))
            order = forwards[:warmup]
            for i in range(len(forwards) - warmup):
                order += [forwards[warmup + i], backwards[i]]
            result.append(order + backwards[len(forwards) - warmup:])
        return result

    student("interleaved_one_f_one_b", short_warmup)
    fails("interleaved", r"with a transfer delay of 0.5 units .* Megatron-LM's order takes .* With instant transfers the two tie")


@pytest.mark.parametrize("kind, label", [(bool, r"\(True, 4\): K is a bool, expected ValueError at the call; it returned"),
                                         (str, r"\('4', 8\): K is a string, expected ValueError at the call; it returned")])
def test_bools_or_strings_accepted_fail_arguments(student, kind, label):
    one_f_one_b = answer("one_f_one_b")

    def lenient(k, m):
        return one_f_one_b(int(k), int(m)) if isinstance(k, kind) or isinstance(m, kind) else one_f_one_b(k, m)

    student("one_f_one_b", lenient)
    fails("one_f_one_b_arguments", label)


def test_v1_without_the_multiple_rule_fails_arguments(student):
    interleaved_one_f_one_b, one_f_one_b = answer("interleaved_one_f_one_b"), answer("one_f_one_b")

    student("interleaved_one_f_one_b", lambda k, m, v: one_f_one_b(k, m) if v == 1 else interleaved_one_f_one_b(k, m, v))
    fails("interleaved_arguments", r"\(4, 6, 1\): M = 6 is not a multiple of K = 4 \(the rule holds for v = 1 too\)")
    run_check("interleaved")  # valid cases: still full marks on understanding


def test_a_forged_observation_that_leaves_out_cases_fails():
    from grader.checks import Malformed, observed

    observation = checks.observe_one_f_one_b(SEED, {})
    observation["schedules"] = observation["schedules"][:1]
    with pytest.raises(Malformed, match="asked for 20 cases and got 1"):
        checks.judge_one_f_one_b(SEED, {}, observed(observation))


def test_bad_m_not_raising_fails(student):
    from minitorch import schedules

    def lenient(k, m, v):
        return schedules.gpipe(k, max(m, 1))

    student("interleaved_one_f_one_b", lenient)
    fails("interleaved_arguments", r"interleaved_one_f_one_b\(4, 6, 2\): M = 6 is not a multiple of K = 4, expected ValueError")


def test_bad_m_raising_for_everything_fails(student):
    def always(k, m, v):
        raise ValueError("no")

    student("interleaved_one_f_one_b", always)
    fails("interleaved_arguments", r"interleaved_one_f_one_b\(4, 8, 2\) is valid but raised ValueError")


# ---------------------------------------------------------------- 4.3


def make_checkpoint(replay_rng=True, restore_rng=True, recompute_times=1, forward_times=1, modules_only=False,
                    segment_count=None, frozen_aware=True):
    """A hand-written checkpoint with one deliberate defect switched on."""

    class Segment(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, x, *params):
            ctx.run, ctx.state = run, torch.get_rng_state()
            ctx.save_for_backward(x, *params)
            for _ in range(forward_times - 1):
                run(x)
            return run(x)

        @staticmethod
        def backward(ctx, grad):
            x, *params = ctx.saved_tensors
            x = x.detach().requires_grad_()
            before = torch.get_rng_state()
            if replay_rng:
                torch.set_rng_state(ctx.state)
            with torch.enable_grad():
                for _ in range(recompute_times):
                    out = ctx.run(x)
            if restore_rng:
                torch.set_rng_state(before)
            wanted = [t for t in (x, *params) if t.requires_grad or not frozen_aware]
            grads = iter(torch.autograd.grad(out, wanted, grad))
            return (None, *(next(grads) if t.requires_grad or not frozen_aware else None for t in (x, *params)))

    def checkpoint_sequential(layers, x, segments=None):
        run_layers, segment_bounds = answer("run_layers"), answer("segment_bounds")

        layers = list(layers)
        segments = segments or (segment_count or round)(len(layers) ** 0.5)
        for start, stop in segment_bounds(len(layers), segments):
            part = layers[start:stop]
            params = [p for layer in part if modules_only or isinstance(layer, torch.nn.Module) for p in layer.parameters()]
            x = Segment.apply(lambda h, part=part: run_layers(part, h), x, *params)
        return x

    return checkpoint_sequential


def test_answer_like_variant_passes(student):
    student("checkpoint_sequential", make_checkpoint())
    for name in ("recompute_grads", "recompute_memory", "recompute_count"):
        run_check(name)


def test_layers_taken_for_modules_fail_bit_identity(student):
    student("checkpoint_sequential", make_checkpoint(modules_only=True))
    with pytest.raises(AttributeError, match="parameters"):  # the student's own exception, with their frames
        run_check("recompute_grads")


def test_ceil_instead_of_round_for_the_default_fails_count(student):
    student("checkpoint_sequential", make_checkpoint(segment_count=lambda r: math.ceil(r)))
    fails("recompute_count", r"10 layers.*expected \[4, 3, 3\].*round\(sqrt\(10\)\) = 3")


def test_gradients_asked_of_frozen_parameters_fail_bit_identity(student):
    student("checkpoint_sequential", make_checkpoint(frozen_aware=False))
    with pytest.raises(RuntimeError, match="does not require grad"):  # the student's own exception
        run_check("recompute_grads")


def test_int_instead_of_round_for_the_default_fails_count(student):
    student("checkpoint_sequential", make_checkpoint(segment_count=int))
    fails("recompute_count", r"backward recomputed segments of \[4, 3\] layers .* expected \[3, 2, 2\].*round\(sqrt\(7\)\) = 3")


@pytest.mark.parametrize("function, args", [("one_f_one_b", (2.0, 4)), ("interleaved_one_f_one_b", (4, 8, 0))])
def test_sizes_not_checked_fail_arguments(student, function, args):
    """Checks M % K and sizes < 1 of K and M, but not v, and not whether the sizes are ints."""
    from minitorch import schedules

    def partly_checked(k, m, v=1):
        if k < 1 or m < 1 or m % k and function != "one_f_one_b":
            raise ValueError("bad sizes")
        return schedules.gpipe(int(k), int(m))

    student(function, partly_checked)
    name = "one_f_one_b_arguments" if function == "one_f_one_b" else "interleaved_arguments"
    fails(name, re.escape(f"{function}{args}") + ": .* expected ValueError at the call; it returned")


def test_checkpoint_arguments_not_checked_fail(student):
    run_layers = answer("run_layers")
    student("checkpoint_sequential", lambda layers, x, segments=None: run_layers(layers, x))
    fails("recompute_arguments", r"checkpoint_sequential\(\[\], x\): no layers, expected ValueError")


def test_no_rng_replay_fails_bit_identity(student):
    student("checkpoint_sequential", make_checkpoint(replay_rng=False))
    fails("recompute_grads", r"dropout p=0.25 \(case 0, seed 1234\): grad of .* not bit-identical .* drawn again in backward")


def test_rng_left_changed_after_backward_fails(student):
    student("checkpoint_sequential", make_checkpoint(restore_rng=False))
    fails("recompute_grads", "RNG state after backward is not bit-identical")


def test_storing_everything_fails_memory(student):
    run_layers = answer("run_layers")

    student("checkpoint_sequential", lambda layers, x, segments=None: run_layers(layers, x))
    fails("recompute_memory", r"after the forward, \d+ activation tensors are still stored")


def test_hidden_copies_of_activations_fail_memory(student):
    hidden = []

    def hoarding(layers, x, segments=None):
        out = make_checkpoint()(layers, x, segments)
        with torch.no_grad():
            hidden.append([h.clone() for h in _all_outputs(layers, x)])
        return out

    def _all_outputs(layers, x):
        outputs = []
        for layer in layers:
            x = layer(x)
            outputs.append(x)
        return outputs

    student("checkpoint_sequential", hoarding)
    fails("recompute_memory", "still stored")


def test_recomputing_twice_fails_count(student):
    student("checkpoint_sequential", make_checkpoint(recompute_times=2))
    fails("recompute_count", r"layer 0 ran 2 times during the backward, expected once")


def test_running_forward_twice_fails_count(student):
    student("checkpoint_sequential", make_checkpoint(forward_times=2))
    fails("recompute_count", r"ran 2 times during the forward")


def test_torch_utils_checkpoint_is_refused(student):
    from torch.utils.checkpoint import checkpoint_sequential as torch_version

    student("checkpoint_sequential", lambda layers, x, segments=None: torch_version(
        torch.nn.Sequential(*layers), segments or 2, x, use_reentrant=False))
    fails("recompute_grads", "hand-written recomputation|must build the result itself")


def test_parameters_cached_on_the_first_call_fail_bit_identity(student):
    """State kept across calls: each segment's parameter list from the first call reused."""
    run_layers, segment_bounds, checkpoint = answer("run_layers"), answer("segment_bounds"), answer("CheckpointSegment")
    cache = {}

    def cached(layers, x, segments=None):
        layers = list(layers)
        for index, (start, stop) in enumerate(segment_bounds(len(layers), segments or round(len(layers) ** 0.5))):
            part = layers[start:stop]
            params = cache.setdefault(index, [p for layer in part if isinstance(layer, torch.nn.Module)
                                              for p in layer.parameters()])
            x = checkpoint.apply(lambda h, part=part: run_layers(part, h), x, *params)
        return x

    student("checkpoint_sequential", cached)
    fails("recompute_grads", r"12 layers, segments=3, .*: grad of parameter 0: expected a gradient, got none")


def test_requires_grad_switched_on_the_callers_input_fails_caller_unchanged(student):
    checkpoint_sequential = answer("checkpoint_sequential")

    def switching(layers, x, segments=None):
        x.requires_grad_()
        return checkpoint_sequential(layers, x, segments)

    student("checkpoint_sequential", switching)
    fails("recompute_caller", r"does not require grad: afterwards x.requires_grad is True")


def test_saved_input_mutated_in_backward_fails_caller_unchanged(student):
    run_layers, segment_bounds = answer("run_layers"), answer("segment_bounds")

    class Segment(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, x, *params):
            ctx.run, ctx.state = run, torch.get_rng_state()
            ctx.save_for_backward(x, *params)
            return run(x)

        @staticmethod
        def backward(ctx, grad):
            x, *params = ctx.saved_tensors
            before = torch.get_rng_state()
            torch.set_rng_state(ctx.state)
            with torch.enable_grad():
                inner = x.detach().requires_grad_()
                out = ctx.run(inner)
            torch.set_rng_state(before)
            grads = torch.autograd.grad(out, [inner, *params], grad)
            x.data.mul_(0)  # "free" the saved input once used: the caller's tensor for segment 0
            return (None, *grads)

    def mutating(layers, x, segments=None):
        layers = list(layers)
        for start, stop in segment_bounds(len(layers), segments or round(len(layers) ** 0.5)):
            part = layers[start:stop]
            params = [p for layer in part if isinstance(layer, torch.nn.Module) for p in layer.parameters()]
            x = Segment.apply(lambda h, part=part: run_layers(part, h), x, *params)
        return x

    student("checkpoint_sequential", mutating)
    fails("recompute_caller", r"the caller's x changed|second backward")


# ---------------------------------------------------------------- 4.4


def test_train_step_always_interleaved_raises_for_v1_with_m_not_a_multiple(student):
    run_schedule, interleaved = answer("run_schedule"), answer("interleaved_one_f_one_b")

    def always_interleaved(workers, stages, inputs, targets, loss_fn, num_microbatches):
        schedule = interleaved(workers.num_stages, num_microbatches, len(stages) // workers.num_stages)
        return run_schedule(workers, stages, schedule, inputs, targets, loss_fn)

    student("train_step", always_interleaved)
    with pytest.raises(ValueError, match="multiple"):
        run_check("train_step")


def test_train_step_with_its_own_gpipe_order_fails(student):
    from minitorch import schedules

    run_schedule, train_step = answer("run_schedule"), answer("train_step")

    def gpipe_step(workers, stages, inputs, targets, loss_fn, num_microbatches):
        if len(stages) != workers.num_stages:
            return train_step(workers, stages, inputs, targets, loss_fn, num_microbatches)
        return run_schedule(workers, stages, schedules.gpipe(workers.num_stages, num_microbatches), inputs, targets, loss_fn)

    student("train_step", gpipe_step)
    fails("train_step", r"device 0 ran \(kind, stage\) F0 F0 .*your schedule says")


def test_train_step_passes_with_another_valid_schedule_of_the_student(student):
    """4.4 judges the step against the student's own schedule: a GPipe-order 1F1B (wrong for
    4.1-peak) still trains correctly, and the measured peak is that order's."""
    from minitorch import schedules

    student("one_f_one_b", lambda k, m: schedules.gpipe(k, m))
    run_check("train_step")


def test_train_step_that_deadlocks_fails_within_its_time(student):
    run_schedule, one_f_one_b = answer("run_schedule"), answer("one_f_one_b")

    def deadlocking(workers, stages, inputs, targets, loss_fn, num_microbatches):
        schedule = one_f_one_b(workers.num_stages, num_microbatches)
        schedule[-1] = [schedule[-1][1], schedule[-1][0], *schedule[-1][2:]]  # last device: B0 before F0
        return run_schedule(workers, stages, schedule, inputs, targets, loss_fn)

    student("train_step", deadlocking)
    with pytest.raises(ValueError, match="deadlock"):
        run_check("train_step")


def test_train_step_that_forgets_a_microbatch_fails_gradients(student):
    run_schedule, one_f_one_b, interleaved = answer("run_schedule"), answer("one_f_one_b"), answer("interleaved_one_f_one_b")

    def last_rows_dropped(workers, stages, inputs, targets, loss_fn, num_microbatches):
        k, v = workers.num_stages, len(stages) // workers.num_stages
        schedule = one_f_one_b(k, num_microbatches) if v == 1 else interleaved(k, num_microbatches, v)
        return run_schedule(workers, stages, schedule, inputs[:-1], targets[:-1], loss_fn)

    student("train_step", last_rows_dropped)
    fails("train_step", r"loss|gradient of stage")


# 4.4 judges train_step alone: with an invalid schedule of the student's (4.1/4.2 charge it), the
# step runs with the grader's schedule builders bound in the student's module instead.


def b_before_f_on_last_device(schedule_function):
    """``schedule_function`` with the last device's first B moved to the front of its row: a B
    before its F (the executor and the simulator both refuse it)."""
    def invalid(*arguments):
        schedule = schedule_function(*arguments)
        row = schedule[-1]
        first_b = next(i for i, action in enumerate(row) if action.kind == "B")
        schedule[-1] = [row[first_b], *row[:first_b], *row[first_b + 1:]]
        return schedule

    return invalid


def summed_loss_step(workers, stages, inputs, targets, loss_fn, num_microbatches):
    """A wrong train_step: the sum of the microbatches' losses, not their mean (gradients M times
    too large); it looks its schedule functions up in the module, as the contract has it."""
    from minitorch import pipeline

    num_devices, num_chunks = workers.num_stages, len(stages) // workers.num_stages
    if num_chunks == 1:
        schedule = pipeline.one_f_one_b(num_devices, num_microbatches)
    else:
        schedule = pipeline.interleaved_one_f_one_b(num_devices, num_microbatches, num_chunks)
    return pipeline.run_schedule(workers, stages, schedule, inputs, targets,
                                 lambda output, target: loss_fn(output, target) * num_microbatches)


def test_invalid_one_f_one_b_costs_4_1_not_the_train_step(student):
    from minitorch import pipeline

    invalid = b_before_f_on_last_device(answer("one_f_one_b"))
    student("one_f_one_b", invalid)
    fails("one_f_one_b", r"is not a valid schedule")
    run_check("train_step")
    assert pipeline.one_f_one_b is invalid  # the grader's builder was bound for the step only


@pytest.mark.parametrize("function", ["one_f_one_b", "interleaved_one_f_one_b"])
def test_schedule_function_that_raises_costs_not_the_train_step(student, function):
    def unfinished(*arguments):
        raise NotImplementedError("Problem 4.x: not yet")

    student(function, unfinished)
    run_check("train_step")


def test_invalid_one_f_one_b_costs_not_4_2_where_v_1_delegates_to_it(student):
    """The answer key's interleaved builder returns its one_f_one_b for v = 1: 4.2 is judged with
    the grader's one_f_one_b there, arguments included, and the student's is put back."""
    from minitorch import pipeline

    invalid = b_before_f_on_last_device(answer("one_f_one_b"))
    student("one_f_one_b", invalid)
    fails("one_f_one_b", r"is not a valid schedule")
    run_check("interleaved")
    run_check("interleaved_arguments")
    assert pipeline.one_f_one_b is invalid


def test_invalid_interleaved_costs_4_2_not_the_train_step(student):
    student("interleaved_one_f_one_b", b_before_f_on_last_device(answer("interleaved_one_f_one_b")))
    fails("interleaved", r"is not a valid schedule")
    run_check("train_step")


def test_wrong_train_step_fails_with_the_students_valid_schedule(student):
    student("train_step", summed_loss_step)
    with pytest.raises(Fail, match=r"loss|gradient of stage") as failure:
        run_check("train_step")
    assert "grader's" not in str(failure.value)


def test_wrong_train_step_fails_with_the_graders_schedule_when_the_students_is_invalid(student):
    student("one_f_one_b", b_before_f_on_last_device(answer("one_f_one_b")))
    student("train_step", summed_loss_step)
    fails("train_step", r"judged with the grader's one_f_one_b bound in place of yours because yours is not valid "
                        r"\(Problem 4\.1 charges that: one_f_one_b\(\d+, \d+\) is not a valid schedule.*(loss|gradient of stage)")


def test_train_step_that_raises_with_the_graders_schedule_says_why_it_was_used(student):
    def broken(workers, stages, inputs, targets, loss_fn, num_microbatches):
        raise RuntimeError("stage mix-up")

    student("interleaved_one_f_one_b", lambda k, m, v: [])
    student("train_step", broken)
    with pytest.raises(RuntimeError, match="stage mix-up"):  # v = 1 first: the student's 1F1B is valid
        run_check("train_step")
    from minitorch import pipeline

    returns_none = lambda k, m: None  # noqa: E731
    student("one_f_one_b", returns_none)
    fails("train_step", r"grader's one_f_one_b bound in place of yours .*must return a list.*train_step raised "
                        r"RuntimeError: stage mix-up")
    assert pipeline.one_f_one_b is returns_none  # put back although the step raised


def test_train_step_with_its_own_order_follows_the_graders_schedule_when_the_students_is_invalid(student):
    """A step that builds its own order ignores the bound builders: it is compared with the
    grader's schedule, the one the step had to follow in that run."""
    from minitorch import schedules

    run_schedule, one_f_one_b, interleaved = answer("run_schedule"), answer("one_f_one_b"), answer("interleaved_one_f_one_b")

    def own_order(order):
        def step(workers, stages, inputs, targets, loss_fn, num_microbatches):
            k, v = workers.num_stages, len(stages) // workers.num_stages
            schedule = order(k, num_microbatches) if v == 1 else interleaved(k, num_microbatches, v)
            return run_schedule(workers, stages, schedule, inputs, targets, loss_fn)

        return step

    student("one_f_one_b", b_before_f_on_last_device(one_f_one_b))
    student("train_step", own_order(one_f_one_b))  # the lecture's 1F1B, the grader's too
    run_check("train_step")
    student("train_step", own_order(schedules.gpipe))
    fails("train_step", r"device 0 ran \(kind, stage\) F0 F0 .*the grader's schedule says F0 F0 B0")


def test_forged_run_of_the_graders_schedule_is_refused(student):
    observation = plain_copy(checks.observe_train_step(SEED, {}))
    observation["cases"][0]["ran_with"] = "grader's"
    with pytest.raises(Fail, match=r"asked for 'yours'"):
        checks.judge_train_step(SEED, {}, observed(observation))
