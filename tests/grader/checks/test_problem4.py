"""The Problem 4 grader checks, in process: the answer key passes, wrong variants fail.

Each wrong variant replaces one function of the student module (monkeypatch) and must
fail the criterion it targets with a message that says what went wrong.
"""

import re

import pytest
import torch
from grading_helpers import observe_and_judge

from grader.checks import Fail
from grader.checks import problem4 as checks
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


def test_rubric_entries_name_existing_checks_and_total_20():
    rubric = tomllib.loads(DEFAULT_RUBRIC.read_text())
    problem4 = [c for c in rubric["criterion"] if c["problem"].startswith("4.")]
    assert sum(c["points"] for c in problem4) == 20
    for criterion in problem4:
        module, name = criterion["check"].split(":")
        assert module == "problem4"
        assert callable(getattr(checks, f"observe_{name}")) and callable(getattr(checks, f"judge_{name}"))


@pytest.mark.parametrize("name", list(CRITERIA))
def test_stub_raises_not_implemented(name, student):
    def stub(*args, **kwargs):
        raise NotImplementedError("Problem 4.x")

    for attribute in ("one_f_one_b", "interleaved_one_f_one_b", "checkpoint_sequential"):
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
    fails("interleaved", r"holds up to .* the interleaved order of the docstring holds at most")


def test_interleaved_backward_chunks_not_reversed_fails(student):
    interleaved_one_f_one_b = answer("interleaved_one_f_one_b")

    def same_chunk_order(k, m, v):
        rows = interleaved_one_f_one_b(k, m, v)
        # swap each backward's chunk c -> v - 1 - c: backwards now run in forward chunk order
        return [[Action((v - 1 - a.stage // k) * k + a.stage % k, "B", a.microbatch) if a.kind == "B" else a
                 for a in row] for row in rows]

    student("interleaved_one_f_one_b", same_chunk_order)
    fails("interleaved", "not a valid schedule: deadlock|one step takes")


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
                    segment_count=None):
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
            grads = torch.autograd.grad(out, [x, *params], grad)
            return (None, *grads)

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
    fails(name, re.escape(f"{function}{args}") + ": .* expected ValueError; it returned")


def test_checkpoint_arguments_not_checked_fail(student):
    run_layers = answer("run_layers")
    student("checkpoint_sequential", lambda layers, x, segments=None: run_layers(layers, x))
    fails("recompute_arguments", r"checkpoint_sequential\(\[\], x, segments=None\): no layers, expected ValueError")


def test_no_rng_replay_fails_bit_identity(student):
    student("checkpoint_sequential", make_checkpoint(replay_rng=False))
    fails("recompute_grads", r"dropout p=0.25: grad of .* not bit-identical .* RNG state replayed")


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
