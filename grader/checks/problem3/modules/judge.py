"""3.3-mlp, 3.3-attention, 3.3-layer, parent side: each module against its dense counterpart
(output, input grad, parameter gradients through one SGD step and a second call, whatever the
student's parameters are called), built from a seed without master tensors, the options
(causal=False, eps), the memory budget and the forward's communication budget."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from grader.checks.judging import Fail
from grader.checks.problem3 import blocks, cases, expected_dense
from grader.checks.problem3.cases import B2, LR, S2, B, H, N, S
from grader.checks.problem3.judge_blocks import judge_matrices, judge_run
from grader.checks.problem3.judge_tools import VOLUME, close, expect, expect_budget, expect_outcome, expect_refused, world_sizes
from grader.checks.threads import single_threaded

WHAT = {"mlp": "ParallelMLP", "attention": "ParallelSelfAttention (causal)", "layer": "ParallelTransformerLayer"}
ALL_REDUCES = {"mlp": 1, "attention": 1, "layer": 2}  # the forward's budget, in all-reduces of one activation


@single_threaded
def judge_module(seed: int, params: dict, observation, part: str) -> None:
    y, dx, _, y2 = expected_dense.dense_run(seed, part)
    x = cases.activations(seed, 1)["x"]
    drawn = expected_dense.drawn_part(part, blocks.DRAWN_SEED, x)
    float32 = expected_dense.float32_part(seed, part, x.float())
    for t, values in world_sizes(observation, params, WHAT[part].split()[0], cases.ALL_SIZES).items():
        for r, o in enumerate(values):
            where = f"t={t}, rank {r}: {WHAT[part]}"
            if part == "mlp":
                judge_gelu_place(where, o, seed)
            judge_run(where, o, y, dx, y2, lambda v: v)
            built = f"t={t}, rank {r}: {WHAT[part].split()[0]}(..., seed={blocks.DRAWN_SEED}, dtype=torch.float64)"
            expect_outcome(f"{built} without master (its master tensors drawn from the seed as its docstring says), "
                           "output", o["drawn"], drawn)
            expect_outcome(f"t={t}, rank {r}: {WHAT[part].split()[0]} built from float32 master tensors, on a float32 "
                           "input: output", o["float32"], float32)
            if t > 1:
                judge_matrices(where, o, part, t)
                expect_budget(where, t, o["log"], "forward", ALL_REDUCES[part] * VOLUME["all_reduce"](t) * N,
                              f"the elements of {ALL_REDUCES[part]} all-reduce(s) of the [{S}, {B}, {H}] activation")
            judge_more_sizes(f"t={t}, rank {r}: {WHAT[part].split()[0]}", o, part, seed, r, t)


def judge_more_sizes(where: str, o, part: str, seed: int, r: int, t: int) -> None:
    """With ``sequence_parallel=True`` (t > 1) and with sizes of one (:func:`cases.tiny_sizes`)."""
    if t > 1:
        y, _, _, y2 = expected_dense.dense_run(seed, part)
        run, built = o["sequence_parallel"], f"{where}(..., sequence_parallel=True)"
        if "raised" in run:
            raise Fail(f"{built}: your code raised {run['raised']}")
        expect(f"{built} on rank {r}'s block [{S // t}, {B}, {H}] of the sequence: output (rank {r}'s block of the "
               "dense output)", run["out"], cases.row_block(y, r, t))
        expect(f"{built}: rank {r}'s block of the output of a second call on a [{S2}, {B2}, {H}] input, after one "
               f"backward and one SGD step p -= {LR} * p.grad on every rank (the dense step: every parameter's "
               "gradient covers the whole sequence)", run["out2"], cases.row_block(y2, r, t))
    sizes = cases.tiny_sizes(part, t)
    if sizes:
        hidden, heads, ffn = sizes
        dense = expected_dense.DenseLayer(cases.layer_master(seed, hidden, ffn), heads=heads)
        with torch.no_grad():
            tiny = dense.part(part)(cases.tiny_input(seed))
        built = {"mlp": f"({hidden}, {ffn})", "attention": f"({hidden}, num_heads={heads})",
                 "layer": f"({hidden}, num_heads={heads}, ffn_hidden_size={ffn})"}[part]
        expect_outcome(f"{where}{built} (sizes of one are sizes too), on a [3, 2, {hidden}] input: output",
                       o["tiny"], tiny)


def judge_gelu_place(where: str, o, seed: int) -> None:
    dense = expected_dense.DenseLayer(cases.layer_master(seed))
    with torch.no_grad():
        gelu_last = F.gelu(dense.fc2(dense.fc1(cases.activations(seed, 1)["x"])))
    if close(o["out"], gelu_last):
        raise Fail(f"{where}'s output equals GeLU applied to the whole second linear layer's output; the dense MLP "
                   "applies GeLU between the two layers")


@single_threaded
def judge_mlp(seed: int, params: dict, observation) -> None:
    judge_module(seed, params, observation, "mlp")


@single_threaded
def judge_attention(seed: int, params: dict, observation) -> None:
    judge_module(seed, params, observation, "attention")
    y, dx, _, _ = expected_dense.dense_run(seed, "attention", causal=False)
    hidden, heads = blocks.BAD_HEADS
    for t, values in world_sizes(observation, params, "ParallelSelfAttention", cases.ALL_SIZES).items():
        for r, o in enumerate(values):
            where = f"t={t}, rank {r}: ParallelSelfAttention(causal=False)"
            expect(f"{where} output (every position attends to every position)", o["non_causal"]["out"], y)
            expect(f"{where} input grad", o["non_causal"]["grad"], dx)
            expect_refused(f"t={t}: ParallelSelfAttention({hidden}, num_heads={heads}) ({heads} heads do not divide "
                           f"{hidden} features)", o["bad_heads"])
            if t > 1:
                expect_refused(f"t={t}: ParallelSelfAttention({2 * (t + 1)}, num_heads={t + 1}) "
                               f"(heads not divisible by {t})", o["heads_error"])


@single_threaded
def judge_layer(seed: int, params: dict, observation) -> None:
    judge_module(seed, params, observation, "layer")
    x = cases.activations(seed, 1)["x"]
    options = expected_dense.layer_with(seed, x, eps=blocks.OPTION_EPS, causal=False)
    for t, values in world_sizes(observation, params, "ParallelTransformerLayer", cases.ALL_SIZES).items():
        for r, o in enumerate(values):
            expect_outcome(f"t={t}, rank {r}: ParallelTransformerLayer(..., causal=False, eps={blocks.OPTION_EPS}), "
                           "output (its LayerNorms use that eps; every position attends to every position)",
                           o["options"], options)
