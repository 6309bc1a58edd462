"""Running a parallel module (3.3's MLP, attention and layer; 3.5's sequence-parallel layer)
in a rank (child side): forward and backward twice (gradients accumulate), one SGD step of half
the rate (so the step equals one dense step of the full rate), then a second call on another
shape; 3.3 also runs the modules' options (``causal=False``, a non-default ``eps``) and builds
them without ``master`` (from ``seed`` and ``dtype``)."""
from __future__ import annotations

import torch

from grader.checks.problem3 import cases, ranks, recorder
from grader.checks.problem3.cases import FFN, HEADS, H

DRAWN_SEED = 3  # the seed a module draws its master tensors from when none are given
OPTION_EPS = 0.05  # the layer built with a non-default eps (and causal=False)
BAD_HEADS = (10, 4)  # (hidden_size, num_heads): 4 heads do not divide 10 features


def build(tp, part: str, master: dict | None, sequence_parallel: bool = False, **options):
    """The student's module ``part`` from ``master`` (the layer's master tensors) or, with
    ``master=None``, drawn from ``options``' seed and dtype."""
    if part == "mlp":
        return tp.ParallelMLP(H, FFN, sequence_parallel=sequence_parallel,
                              master=cases.sub(master, "mlp") if master else None, **options)
    if part == "attention":
        return tp.ParallelSelfAttention(H, HEADS, sequence_parallel=sequence_parallel,
                                        master=cases.sub(master, "attention") if master else None, **options)
    if master is None:  # ffn_hidden_size left to its default, 4 * hidden_size
        return tp.ParallelTransformerLayer(H, HEADS, sequence_parallel=sequence_parallel, **options)
    return tp.ParallelTransformerLayer(H, HEADS, FFN, sequence_parallel=sequence_parallel, master=master, **options)


def build_tiny(tp, part: str, sizes: tuple[int, int, int], seed: int):
    """The student's module ``part`` of :func:`cases.tiny_sizes` (sizes of one), from master tensors."""
    hidden, heads, ffn = sizes
    master = cases.layer_master(seed, hidden, ffn)
    if part == "mlp":
        return tp.ParallelMLP(hidden, ffn, master=cases.sub(master, "mlp"))
    if part == "attention":
        return tp.ParallelSelfAttention(hidden, heads, master=cases.sub(master, "attention"))
    return tp.ParallelTransformerLayer(hidden, heads, ffn, master=master)


def run_block(tp, rank: int, t: int, seed: int, part: str, sp: bool) -> dict:
    """Output, input grad, parameter grads by name (after one and two backwards), the forward's
    collectives, the weight matrices held, and the second call after the step."""
    master, data = cases.layer_master(seed), cases.activations(seed, t)
    module = build(tp, part, master, sp)
    x, grad, x2 = data["x"], data["grad"], cases.second_input(seed)
    if sp:
        x, grad, x2 = (cases.row_block(v, rank, t) for v in (x, grad, x2))
    x = x.clone().requires_grad_()
    with recorder.Phase("forward"):
        y = module(x)
    result = {"out": ranks.out(y), "kind": ranks.kind(y), "matrix_numel": ranks.matrix_numel(module)}
    with recorder.Phase("backward"):
        ranks.backward(y, grad)
    result.update(grad=ranks.out(x.grad), param_grads=ranks.grads(module))
    with recorder.Phase("again"):  # gradients accumulate: the step below takes half the rate
        ranks.backward(module(x.detach().clone().requires_grad_()), grad)
    result["param_grads_twice"] = ranks.grads(module)
    ranks.sgd_step(module, cases.LR / 2)
    with recorder.Phase("second"), torch.no_grad():
        second = ranks.attempt(lambda: module(x2))
    result["out2"] = second if isinstance(second, dict) else ranks.out(second)
    result["kind2"] = ranks.kind(second)
    result["log"] = recorder.taken()
    return result


def run_sequence_parallel(tp, rank: int, t: int, seed: int, part: str) -> dict:
    """``part`` built with ``sequence_parallel=True`` on rank r's sequence blocks: the output,
    then one SGD step of the full rate after one backward (the replicated parameters' gradients
    must cover the whole sequence), and the second call's output."""
    master, data = cases.layer_master(seed), cases.activations(seed, t)
    x, grad, x2 = (cases.row_block(v, rank, t) for v in (data["x"], data["grad"], cases.second_input(seed)))
    module = build(tp, part, master, sequence_parallel=True)
    y = module(x.clone().requires_grad_())
    result = {"out": ranks.out(y)}
    ranks.backward(y, grad)
    ranks.sgd_step(module, cases.LR)
    with torch.no_grad():
        result["out2"] = ranks.out(module(x2.clone()))
    return result


def run_options(tp, rank: int, t: int, seed: int, part: str) -> dict:
    """3.3's other constructions, forward only under ``torch.no_grad()``: drawn from a seed in
    float64 (the default dtype is float32), built from float32 master tensors, with
    ``sequence_parallel=True`` on rank r's sequence block (t > 1), with sizes of one
    (:func:`cases.tiny_sizes`); the layer with ``causal=False`` and a non-default ``eps``;
    attention refusing heads that do not divide."""
    master, x = cases.layer_master(seed), cases.activations(seed, t)["x"]
    result = {}
    with recorder.Phase("drawn"), torch.no_grad():
        result["drawn"] = ranks.outcome(lambda: build(tp, part, None, seed=DRAWN_SEED, dtype=cases.DTYPE)(x.clone()))
    with recorder.Phase("float32"), torch.no_grad():
        master32 = {k: v.float() for k, v in master.items()}
        result["float32"] = ranks.outcome(lambda: build(tp, part, master32)(x.float()))
    if t > 1:  # at t = 1 a sequence block is the whole sequence
        with recorder.Phase("sequence-parallel"):
            result["sequence_parallel"] = ranks.attempt(lambda: run_sequence_parallel(tp, rank, t, seed, part))
    sizes = cases.tiny_sizes(part, t)
    if sizes:
        with recorder.Phase("sizes of one"), torch.no_grad():
            result["tiny"] = ranks.outcome(lambda: build_tiny(tp, part, sizes, seed)(cases.tiny_input(seed)))
    if part == "layer":
        with recorder.Phase("options"), torch.no_grad():
            result["options"] = ranks.outcome(lambda: build(tp, part, master, causal=False, eps=OPTION_EPS)(x.clone()))
    if part == "attention":
        hidden, heads = BAD_HEADS
        result["bad_heads"] = ranks.raised(lambda: tp.ParallelSelfAttention(hidden, heads))
        if t > 1:
            result["heads_error"] = ranks.raised(lambda: tp.ParallelSelfAttention(2 * (t + 1), t + 1))
        everywhere = build(tp, part, master, causal=False)
        x = x.clone().requires_grad_()
        with recorder.Phase("non-causal"):
            y = everywhere(x)
            ranks.backward(y, cases.activations(seed, t)["grad"])
        result["non_causal"] = {"out": ranks.out(y), "grad": ranks.out(x.grad)}
    return result
