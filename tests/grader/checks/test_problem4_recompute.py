"""The Problem 4.3 grader checks, in process: the answer key passes, wrong variants fail.

Each wrong variant replaces ``checkpoint_sequential`` of the student module (monkeypatch) with a
hand-written recomputation that has one defect, and must fail the criterion it targets with a
message that says what went wrong.
"""
from __future__ import annotations

import math

import pytest
import torch
from grading_helpers import observe_and_judge

from grader.checks.judging import Fail, observed
from grader.checks.problem4.recompute import observe as recompute_observe
from grader.checks.problem4.recompute.judge import judge_bit_identical
from grader.child import plain_copy

SEED = 1234
CHECKS = {  # criterion -> check
    "4.3-bit-identical": "problem4.recompute:bit_identical",
    "4.3-stored-activations": "problem4.recompute:stored_activations",
    "4.3-recompute-count": "problem4.recompute:count", "4.3-arguments": "problem4.recompute:arguments",
    "4.3-caller-unchanged": "problem4.recompute:caller",
}
UNDERSTANDING = ["4.3-bit-identical", "4.3-stored-activations", "4.3-recompute-count"]


def answer(name):
    from minitorch import pipeline

    return getattr(pipeline, name)


def run_check(criterion, seed=SEED):
    observe_and_judge(CHECKS[criterion], None, seed)


def fails(criterion, match):
    with pytest.raises(Fail, match=match):
        run_check(criterion)


def passes_all_but(lost):
    """Every criterion but ``lost`` passes (4.3-arguments aside: the variants check no arguments)."""
    for criterion in CHECKS:
        if criterion not in (lost, "4.3-arguments"):
            run_check(criterion)


@pytest.fixture
def student(monkeypatch):
    from minitorch import pipeline

    return lambda value: monkeypatch.setattr(pipeline, "checkpoint_sequential", value)


@pytest.mark.parametrize("criterion", list(CHECKS))
@pytest.mark.parametrize("seed", [0, SEED])
def test_answer_key_passes(criterion, seed):
    run_check(criterion, seed)


@pytest.mark.parametrize("criterion", list(CHECKS))
def test_stub_raises_not_implemented(criterion, student):
    def stub(*args, **kwargs):
        raise NotImplementedError("Problem 4.3")

    student(stub)
    with pytest.raises(NotImplementedError):
        run_check(criterion)


def make_checkpoint(replay_rng=True, restore_rng=True, recompute_times=1, forward_times=1, modules_only=False,
                    segment_count=None, frozen_aware=True, input_on_ctx=False, reentrant=False, zero_first=False,
                    unfreeze=False, allow_unused=True, detach_input=True, repeated_params=False):
    """A hand-written checkpoint with one deliberate defect switched on."""

    class Segment(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, x, *params):
            ctx.run, ctx.state = run, torch.get_rng_state()
            if input_on_ctx:  # kept as an attribute: it outlives the backward
                ctx.x = x
                ctx.save_for_backward(*params)
            else:
                ctx.save_for_backward(x, *params)
            for _ in range(forward_times - 1):
                run(x)
            return run(x)

        @staticmethod
        def backward(ctx, grad):
            x, *params = (ctx.x, *ctx.saved_tensors) if input_on_ctx else ctx.saved_tensors
            if detach_input:
                x = x.detach()
            x = x.requires_grad_(ctx.needs_input_grad[1] or not frozen_aware)
            before = torch.get_rng_state()
            if replay_rng:
                torch.set_rng_state(ctx.state)
            if unfreeze:  # every parameter made to require grad, and left so
                for p in params:
                    p.requires_grad_(True)
            with torch.enable_grad():
                for _ in range(recompute_times):
                    out = ctx.run(x)
            if restore_rng:
                torch.set_rng_state(before)
            if reentrant or zero_first:
                return _backward_through_grad_fields(ctx, out, grad, x, params, zero_first)
            wanted = [t for t in (x, *params) if t.requires_grad or not frozen_aware]
            grads = iter(torch.autograd.grad(out, wanted, grad, allow_unused=allow_unused))
            return (None, *(next(grads) if t.requires_grad or not frozen_aware else None for t in (x, *params)))

    def checkpoint_sequential(layers, x, segments=None):
        run_layers, segment_bounds = answer("run_layers"), answer("segment_bounds")

        layers = list(layers)
        segments = segments or (segment_count or round)(len(layers) ** 0.5)
        for start, stop in segment_bounds(len(layers), segments):
            part = layers[start:stop]
            params = [p for layer in part if modules_only or isinstance(layer, torch.nn.Module) for p in layer.parameters()]
            if not repeated_params:  # a module or weight that appears twice is passed once
                params = list({id(p): p for p in params}.values())
            x = Segment.apply(lambda h, part=part: run_layers(part, h), x, *params)
        return x

    return checkpoint_sequential


def _backward_through_grad_fields(ctx, out, grad, x, params, zero_first):
    """The reentrant style: an inner backward accumulates the parameters' .grad directly and
    only x's gradient is returned; with ``zero_first`` the parameters' .grad are cleared
    first, read back and returned (the caller's earlier gradients are lost)."""
    if zero_first:
        for p in params:
            p.grad = None
    torch.autograd.backward(out, grad)
    if not zero_first:
        return (None, x.grad, *[None for _ in params])
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    return (None, x.grad, *[g if needed else None for g, needed in zip(grads, ctx.needs_input_grad[2:])])


def test_answer_like_variant_passes_everything(student):
    student(make_checkpoint())
    passes_all_but(None)


def test_layers_taken_for_modules_fail_bit_identity(student):
    student(make_checkpoint(modules_only=True))
    with pytest.raises(AttributeError, match="parameters"):  # the student's own exception, with their frames
        run_check("4.3-bit-identical")


def test_a_parameter_the_segment_does_not_use_fails_bit_identity(student):
    """torch.autograd.grad without allow_unused: the case with a parameter no forward uses."""
    student(make_checkpoint(allow_unused=False))
    with pytest.raises(RuntimeError, match="not have been used in the graph"):  # the student's own exception
        run_check("4.3-bit-identical")


def test_the_callers_input_recomputed_undetached_fails_bit_identity_only(student):
    """The saved input recomputed from and differentiated as it is, not a detached copy: the
    gradient of an input that is not a leaf reaches it twice (the inner torch.autograd.grad
    runs its hooks too)."""
    student(make_checkpoint(detach_input=False))
    # a weight of two segments (kind "shared") takes the inner grad into the earlier segment's freed graph
    with pytest.raises((Fail, RuntimeError), match=r"an input that is not a leaf .*: grad of x is not bit-identical "
                                                   r"to the plain run|backward through the graph a second time"):
        run_check("4.3-bit-identical")
    passes_all_but("4.3-bit-identical")


def test_outputs_cached_on_the_arguments_fail_bit_identity(student):
    """State across calls: the output of an earlier call with equal arguments handed out again."""
    checkpoint_sequential, cache = answer("checkpoint_sequential"), {}

    def cached(layers, x, segments=None):
        key = repr((layers, x, segments))
        if key not in cache:
            cache[key] = checkpoint_sequential(layers, x, segments)
        return cache[key]

    student(cached)
    fails("4.3-bit-identical", r"the same call made once before, forward and backward, then the parameters changed by "
                               r"an optimizer step .*: it returned the very tensor the same call returned before")


def test_an_output_without_grad_fails_bit_identity_on_its_requires_grad(student):
    """A detached output: every case is still observed (the call made twice included) and the
    judge says what is wrong, on the first case."""
    checkpoint_sequential = answer("checkpoint_sequential")
    student(lambda layers, x, segments=None: checkpoint_sequential(layers, x, segments).detach())
    fails("4.3-bit-identical", r"\(case 0, seed 1234\): the output has requires_grad=False; the plain run's has True")


def test_ceil_instead_of_round_for_the_default_fails_count(student):
    student(make_checkpoint(segment_count=lambda r: math.ceil(r)))
    fails("4.3-recompute-count", r"10 layers.*expected \[4, 3, 3\].*round\(sqrt\(10\)\) = 3")


def test_gradients_asked_of_frozen_parameters_fail_bit_identity(student):
    student(make_checkpoint(frozen_aware=False))
    with pytest.raises(RuntimeError, match="does not require grad"):  # the student's own exception
        run_check("4.3-bit-identical")


def test_int_instead_of_round_for_the_default_fails_count(student):
    student(make_checkpoint(segment_count=int))
    fails("4.3-recompute-count", r"backward recomputed segments of \[4, 3\] layers .* expected \[3, 2, 2\].*"
                                 r"round\(sqrt\(7\)\) = 3")


def test_checkpoint_arguments_not_checked_fail(student):
    run_layers = answer("run_layers")
    student(lambda layers, x, segments=None: run_layers(layers, x))
    fails("4.3-arguments", r"checkpoint_sequential\(\[\], x\): no layers, expected ValueError")


def test_numpy_segments_accepted_fail_arguments(student):
    import numpy as np

    checkpoint_sequential = answer("checkpoint_sequential")
    student(lambda layers, x, segments=None: checkpoint_sequential(
        layers, x, int(segments) if isinstance(segments, np.integer) else segments))
    fails("4.3-arguments", r"segments=numpy.int64\(2\)\): segments is a numpy integer .* it returned")


def test_no_rng_replay_fails_bit_identity(student):
    student(make_checkpoint(replay_rng=False))
    fails("4.3-bit-identical", r"dropout p=0.25 \(case 0, seed 1234\): grad of .* not bit-identical .* drawn again")


def test_a_repeated_module_passing_its_parameters_twice_fails_bit_identity(student):
    """[lin, lin] in one segment: lin.weight passed twice, its gradient added twice."""
    student(make_checkpoint(repeated_params=True))
    fails("4.3-bit-identical", r"2 layers, segments=1, dropout p=0.0, a module repeated .*: grad of parameter 0 is "
                               r"not bit-identical")
    passes_all_but("4.3-bit-identical")


def test_rng_left_changed_after_backward_fails(student):
    student(make_checkpoint(restore_rng=False))
    fails("4.3-bit-identical", "RNG state after backward is not the plain run's")


def test_an_output_of_another_dtype_fails_bit_identity(student):
    checkpoint_sequential = answer("checkpoint_sequential")
    student(lambda layers, x, segments=None: checkpoint_sequential(layers, x, segments).double())
    fails("4.3-bit-identical", r"float32 input .*: the output is not bit-identical to the plain run: it has dtype "
                               r"torch.float64, expected torch.float32")


def test_storing_everything_fails_memory(student):
    run_layers = answer("run_layers")

    student(lambda layers, x, segments=None: run_layers(layers, x))
    fails("4.3-stored-activations", r"after the forward, \d+ activation tensors are still stored")


def test_hidden_copies_of_activations_fail_memory(student):
    hidden = []

    def hoarding(layers, x, segments=None):
        out = make_checkpoint()(layers, x, segments)
        with torch.no_grad():
            outputs, h = [], x
            for layer in layers:
                h = layer(h)
                outputs.append(h.clone())
            hidden.append(outputs)
        return out

    student(hoarding)
    fails("4.3-stored-activations", "still stored")


def test_the_input_kept_on_ctx_fails_memory_only(student):
    """ctx.x = x instead of ctx.save_for_backward: right gradients, but every segment input
    outlives the backward while the caller holds the output."""
    student(make_checkpoint(input_on_ctx=True))
    fails("4.3-stored-activations", r"after the backward \(no retain_graph\), 3 activation tensors are still alive")
    passes_all_but("4.3-stored-activations")


def test_a_reentrant_backward_fails_bit_identity_only(student):
    """An inner backward that accumulates the parameters' .grad itself (and returns none for
    them): right after .backward(), wrong under torch.autograd.grad."""
    student(make_checkpoint(reentrant=True))
    fails("4.3-bit-identical", r"gradients taken with torch.autograd.grad .*: grad of parameter \d+: the plain run gives "
                               r"it a gradient, yours gives none")
    passes_all_but("4.3-bit-identical")


def test_gradients_cleared_before_the_backward_fail(student):
    student(make_checkpoint(zero_first=True))
    fails("4.3-bit-identical", r"gradients already there from an earlier backward .*: grad of parameter 0 is not "
                               r"bit-identical")
    run_check("4.3-caller-unchanged")  # where gradients go is 4.3-bit-identical's


def test_recomputing_twice_fails_count(student):
    student(make_checkpoint(recompute_times=2))
    fails("4.3-recompute-count", r"layer 0 ran 2 times during the backward, expected once")


def test_running_forward_twice_fails_count(student):
    student(make_checkpoint(forward_times=2))
    fails("4.3-recompute-count", r"ran 2 times during the forward")


def test_torch_utils_checkpoint_is_refused(student):
    from torch.utils.checkpoint import checkpoint_sequential as torch_version

    def borrowed(layers, x, segments=None):
        try:
            return torch_version(list(layers), min(segments or 2, len(layers)), x, use_reentrant=False)
        except RuntimeError:  # the refusal swallowed: it is on record anyway
            return answer("run_layers")(layers, x)

    student(borrowed)
    fails("4.3-bit-identical", r"hand-written recomputation; your code called torch.utils.checkpoint")


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

    student(cached)
    # the stale parameters show as a missing gradient, or as autograd's own error in the student's
    # backward where a later case's segment depends on none of them
    with pytest.raises((Fail, RuntimeError), match=r"12 layers, segments=3, .*: grad of parameter 0: the plain run "
                                                   r"gives it a gradient, yours gives none|does not require grad"):
        run_check("4.3-bit-identical")


def test_requires_grad_switched_on_the_callers_input_fails_caller_unchanged(student):
    checkpoint_sequential = answer("checkpoint_sequential")

    def switching(layers, x, segments=None):
        x.requires_grad_()
        return checkpoint_sequential(layers, x, segments)

    student(switching)
    fails("4.3-caller-unchanged", r"does not require grad: afterwards x.requires_grad is True")


def test_frozen_parameters_unfrozen_fail_caller_unchanged_only(student):
    student(make_checkpoint(unfreeze=True))
    fails("4.3-caller-unchanged", r"every other layer frozen: afterwards parameter 0.requires_grad is True")
    for criterion in UNDERSTANDING:
        run_check(criterion)


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

    student(mutating)
    fails("4.3-caller-unchanged", r"the caller's x changed|second backward")


def test_a_forged_plain_run_is_caught():
    """The child's plain run is the bit-level reference; the parent checks it against its own."""
    observation = plain_copy(recompute_observe.observe_bit_identical(SEED, {}))
    observation["cases"][0]["plain"]["output"] = observation["cases"][0]["plain"]["output"] + 1
    observation["cases"][0]["student"]["output"] = observation["cases"][0]["plain"]["output"]
    with pytest.raises(Fail, match="the plain run inside your process differs from the grader's"):
        judge_bit_identical(SEED, {}, observed(observation))
