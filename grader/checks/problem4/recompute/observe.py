"""CHILD side of 4.3: the student's ``checkpoint_sequential`` run on the grader's layers, with
``torch.utils.checkpoint`` refused (each use is recorded, whatever the student's code does
with the refusal); what it computed, kept and ran, recorded as plain data."""
from __future__ import annotations

import contextlib

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn

from grader.checks.problem4 import reading
from grader.checks.problem4.recompute import cases as table
from grader.checks.problem4.recompute.layers import (
    WIDTH,
    GraderLayer,
    as_passed,
    build_case,
    given_input,
    optimizer_step,
    parameters,
    preset_gradients,
)
from grader.checks.problem4.recompute.measure import measure
from grader.checks.problem4.recompute.runs import clone, finish, plain_run
from grader.checks.recording import student_tensor
from grader.checks.threads import single_threaded

# The first backward of a process imports torch's symbolic-shape machinery (sympy: 1-3 s); the
# harness preloads it in the forkserver, so every child that runs a backward has it already.
FORKSERVER_PRELOAD = ("torch.fx.experimental.symbolic_shapes",)
REFUSED = ("checkpoint", "checkpoint_sequential", "_checkpoint_without_reentrant_generator")


def _student():
    from minitorch import pipeline

    return pipeline


@contextlib.contextmanager
def _torch_checkpoint_refused(used: list[str]):
    """``torch.utils.checkpoint``'s entry points raise while the block runs; each call is
    appended to ``used`` (a refusal the student's code catches is still on record)."""
    saved = {name: getattr(torch_checkpoint, name) for name in REFUSED if hasattr(torch_checkpoint, name)}
    original_forward = torch_checkpoint.CheckpointFunction.forward

    def refusing(name):
        def refused(*args, **kwargs):
            used.append(f"torch.utils.checkpoint.{name}")
            raise RuntimeError(f"torch.utils.checkpoint.{name} is refused while this check runs")

        return refused

    for name in saved:
        setattr(torch_checkpoint, name, refusing(name))
    torch_checkpoint.CheckpointFunction.forward = staticmethod(refusing("CheckpointFunction"))  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(torch_checkpoint, name, value)
        torch_checkpoint.CheckpointFunction.forward = original_forward  # type: ignore[method-assign]


def _call(student, layers, x, segments, keyword: bool = False):
    """The student's checkpointed forward (segments None: the default, not passed)."""
    if segments is None:
        output = student.checkpoint_sequential(layers, x)
    elif keyword:
        output = student.checkpoint_sequential(layers, x, segments=segments)
    else:
        output = student.checkpoint_sequential(layers, x, segments)
    return student_tensor(output, "checkpoint_sequential")


def _backward(output) -> None:
    """An earlier call's backward; an output without grad is the judge's to word, on the
    case itself, not a crash of this earlier call."""
    if output.requires_grad:
        output.sum().backward()


def _warm_up(student, layers, case: table.RecomputeCase) -> None:
    """Use the layers once with another input shape and segment count, then forget the grads
    and put back which parameters are frozen: a call that changes that is
    4.3-caller-unchanged's concern, not this run's."""
    frozen = [(parameter, parameter.requires_grad) for parameter in parameters(layers)]
    x = torch.randn(3, 1, WIDTH, dtype=getattr(torch, case.dtype), requires_grad=True)
    _backward(_call(student, as_passed(layers, case), x, len(layers)))
    for parameter, requires_grad in frozen:
        parameter.grad = None
        parameter.requires_grad_(requires_grad)


def _same_call_before(student, layers, x, case: table.RecomputeCase):
    """The very same call once before, forward and backward, then an optimizer step and the
    gradients forgotten: the case's call is then a second training step on the same batch.
    Returns what that call returned."""
    earlier = _call(student, as_passed(layers, case), x, case.segments, case.keyword)
    _backward(earlier)
    optimizer_step(layers)
    for tensor in [x, *parameters(layers)]:
        tensor.grad = None
    return earlier


@single_threaded
def observe_bit_identical(seed: int, params: dict) -> dict:
    """Per case: the plain run and the student's checkpointed run (value, requires_grad,
    gradients, which tensors hold a ``.grad``, RNG states)."""
    student, used = _student(), list[str]()
    results = []
    with _torch_checkpoint_refused(used):
        for index, case in enumerate(table.recompute_cases(seed)):
            layers, x, rng_seed = build_case(seed, index)
            earlier = _same_call_before(student, layers, x, case) if case.repeat else None
            plain = plain_run(layers, x, rng_seed, case)
            for tensor in [x, *parameters(layers)]:
                tensor.grad = None
            if case.warm_up:
                _warm_up(student, layers, case)
            if case.accumulate:
                preset_gradients(layers, x)
            torch.manual_seed(rng_seed)
            given = given_input(x, case)
            output = _call(student, as_passed(layers, case), given, case.segments, case.keyword)
            results.append({"case": index, "plain": plain, "student": finish(layers, given, output, case, earlier)})
    return {"cases": results, "torch_checkpoint": used}


@single_threaded
def observe_stored_activations(seed: int, params: dict) -> dict:
    """Activation storages alive after the checkpointed forward, during its backward and
    after it (the parent measures the plain run itself)."""
    student, used = _student(), list[str]()
    results = []
    with _torch_checkpoint_refused(used):
        for index in table.MEMORY_CASES:
            layers, x, rng_seed = build_case(seed, index)
            torch.manual_seed(rng_seed)
            segments = table.RECOMPUTE_CASES[index].segments
            results.append({"case": index, **measure(lambda: _call(student, layers, x, segments), layers, x)})
    return {"cases": results, "torch_checkpoint": used}


@single_threaded
def observe_count(seed: int, params: dict) -> dict:
    """How often each grader layer ran during the checkpointed forward and during backward,
    and in which order backward ran them."""
    student, used = _student(), list[str]()
    results = []
    with _torch_checkpoint_refused(used):
        for index in table.COUNT_CASES:
            case = table.RECOMPUTE_CASES[index]
            layers, x, rng_seed = build_case(seed, index)
            if case.warm_up:
                _warm_up(student, layers, case)
            torch.manual_seed(rng_seed)
            measured = measure(lambda: _call(student, as_passed(layers, case), x, case.segments, case.keyword), layers, x)
            results.append({"case": index, "calls": measured["calls"], "order": measured["order"]})
    return {"cases": results, "torch_checkpoint": used}


def observe_arguments(seed: int, params: dict) -> dict:
    """What the student's ``checkpoint_sequential`` does with each bad call and each valid one."""
    student, used = _student(), list[str]()
    tanh = nn.Tanh()  # a module: plain-function layers are 4.3-bit-identical's, not this criterion's
    values = {"[]": [], "[tanh]": [tanh], "[tanh] * 3": [tanh] * 3, "[3]": [3], "[tanh, 3]": [tanh, 3],
              "x": torch.ones(2, 3), "[[1.0]]": [[1.0]]}

    def outcomes(calls: list) -> list:
        return [{"case": label, **reading.outcome(lambda: _call(student, values[layers], values[x], segments))}
                for label, layers, x, segments in calls]

    with _torch_checkpoint_refused(used):
        valid = outcomes(table.VALID)  # first: see table.VALID
        return {"valid": valid, "bad": outcomes(table.BAD), "torch_checkpoint": used}


@single_threaded
def observe_caller(seed: int, params: dict) -> dict:
    """The caller's tensors after the checkpointed forward and backward, and a second
    backward through the same graph (the gradients zeroed in between: whether they add up
    is 4.3-bit-identical's)."""
    student, used = _student(), list[str]()
    results = []
    with _torch_checkpoint_refused(used):
        for label, input_grad, frozen, segments in table.CALLER_CASES:
            generator = torch.Generator().manual_seed(seed)
            layers = [GraderLayer(generator, 0.2, torch.float64) for _ in range(4)]
            for layer in layers[::2] if frozen else ():
                layer.requires_grad_(False)
            x = torch.randn(table.BATCH, WIDTH, generator=generator, dtype=torch.float64).requires_grad_(input_grad)
            results.append({"case": label, **_caller_run(student, layers, x, segments)})
    return {"cases": results, "torch_checkpoint": used}


def _caller_run(student, layers, x, segments: int) -> dict:
    before = x.detach().clone()
    tensors = [*parameters(layers), x]
    record = {"requires_grad": [t.requires_grad for t in tensors], "first": [], "second": "not tried", "again": []}
    torch.manual_seed(0)
    output = _call(student, layers, x, segments)
    try:
        output.sum().backward(retain_graph=True)
    except RuntimeError as error:
        record["second"] = f"not tried: the first backward raised RuntimeError: {str(error)[:200]}"
    else:
        record["first"] = [clone(t.grad) for t in tensors]
        for tensor in tensors:
            tensor.grad = None
        try:
            output.sum().backward()
            record["second"] = "ran"
        except RuntimeError as error:
            record["second"] = f"RuntimeError: {str(error)[:200]}"
        record["again"] = [clone(t.grad) for t in tensors]
    record.update({"x": x.detach().clone(), "before": before,
                   "requires_grad_after": [t.requires_grad for t in tensors],
                   "has_grad": [t.grad is not None for t in tensors]})
    return record
