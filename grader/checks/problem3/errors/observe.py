"""3.0-errors, child side: ranks (t = 1 in this process, and t = 2) call every op and
constructor with a size that t does not divide, or heads that do not divide the hidden size,
recording the name of what each raised and the collectives issued before it raised."""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from grader.checks.problem3 import cases, ranks, recorder
from grader.checks.problem3.cases import FFN, HEADS, IN, OUT, H
from grader.checks.problem3.scatter_gather.observe import INDIVISIBLE


def calls(tp, t: int) -> dict:
    """``{what: call}``: each a call the contract says raises ValueError at world size t."""
    odd = 2 * t + 1
    found: dict[str, Callable[[], object]] = {}
    if t > 1:
        found.update({f"{name} of a tensor of shape {list(shape)}": functools.partial(
            lambda n, sh: getattr(tp, n)(torch.zeros(sh, dtype=cases.DTYPE)), name, shape) for name, shape, _ in INDIVISIBLE})
        found.update({
            f"ColumnParallelLinear({IN}, {odd})": lambda: tp.ColumnParallelLinear(IN, odd),
            f"RowParallelLinear({odd}, {OUT})": lambda: tp.RowParallelLinear(odd, OUT),
            f"ParallelSelfAttention({2 * (t + 1)}, num_heads={t + 1})": lambda: tp.ParallelSelfAttention(2 * (t + 1), t + 1),
            f"ParallelMLP({H}, {odd})": lambda: tp.ParallelMLP(H, odd),
            f"ParallelTransformerLayer({H}, {HEADS}, {odd})": lambda: tp.ParallelTransformerLayer(H, HEADS, odd),
            f"VocabParallelEmbedding({odd}, {H})": lambda: tp.VocabParallelEmbedding(odd, H),
            f"ParallelLanguageModel({odd}, {H}, {HEADS}, 1, {FFN})": lambda: tp.ParallelLanguageModel(odd, H, HEADS, 1, FFN),
        })
    found.update({
        f"ColumnParallelLinear({IN}, {OUT}) from a master weight of shape [{OUT + t}, {IN}]":
            lambda: tp.ColumnParallelLinear(IN, OUT, master={"weight": torch.zeros(OUT + t, IN), "bias": torch.zeros(OUT + t)}),
        "ParallelSelfAttention(10, num_heads=4)": lambda: tp.ParallelSelfAttention(10, 4),
        "ParallelTransformerLayer(10, 4)": lambda: tp.ParallelTransformerLayer(10, 4),
        f"ParallelLanguageModel(48, 10, 4, 1, {FFN})": lambda: tp.ParallelLanguageModel(48, 10, 4, 1, FFN),
    })
    return found


def rank_errors(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    entries = []
    for number, (what, call) in enumerate(calls(tp, t).items()):
        with recorder.Phase(f"call {number}"):
            entries.append({"case": what, "raised": ranks.raised(call)})
    return {"cases": entries, "log": recorder.taken()}


def observe_errors(seed: int, params: dict):
    """Calls every op and constructor with sizes the contract says raise (t = 1, 2)."""
    return ranks.observe(rank_errors, seed, params, cases.CONVENTION_SIZES)
