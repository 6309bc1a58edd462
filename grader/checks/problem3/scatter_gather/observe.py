"""3.1-scatter-gather, child side: ranks run the scatter/gather ops of the last dimension and
the sequence-parallel ops of the first forward and backward on every case of
:func:`~grader.checks.problem3.cases.op_cases` (contiguous inputs), on an input that does not
require grad, and on sizes t does not divide, recording outputs, gradients and collectives."""
from __future__ import annotations

import torch

from grader.checks.problem3 import cases, ranks, recorder

OPS = ("scatter_to_tensor_model_parallel_region", "gather_from_tensor_model_parallel_region",
       "scatter_to_sequence_parallel_region", "gather_from_sequence_parallel_region",
       "reduce_scatter_to_sequence_parallel_region")
SCATTER, GATHER, SEQUENCE_SCATTER, SEQUENCE_GATHER, REDUCE_SCATTER = OPS
# (op, an input shape that t = 2 and t = 4 do not divide where the op splits, that dimension)
INDIVISIBLE = (
    (SCATTER, (cases.S, cases.B, cases.H + 1), -1),
    (SEQUENCE_SCATTER, (cases.S + 1, cases.B, cases.H), 0),
    (REDUCE_SCATTER, (cases.S + 1, cases.B, cases.H), 0),
)


def inputs(name: str, data: dict, rank: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input of rank, upstream grad of rank) for op ``name``."""
    x, xr, grad, gr = data["x"], data["x_r"][rank], data["grad"], data["grad_r"][rank]
    return {
        SCATTER: (x, cases.column_block(gr, rank, t)),
        GATHER: (cases.column_block(xr, rank, t), grad),
        SEQUENCE_SCATTER: (x, cases.row_block(gr, rank, t)),
        SEQUENCE_GATHER: (cases.row_block(xr, rank, t), gr),
        REDUCE_SCATTER: (xr, cases.row_block(gr, rank, t)),
    }[name]


def rank_scatter_gather(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    result: dict = {"no_grad": {}}
    for label, data in cases.op_cases(seed, t):
        for name in OPS:
            x, grad = inputs(name, data, rank, t)
            result[f"{name} {label}"] = ranks.run_op(getattr(tp, name), x, grad, f"{name} {label}")
    main = cases.activations(seed, t)
    for name in OPS:
        with recorder.Phase(f"{name} no-grad"):
            result["no_grad"][name] = ranks.kind(getattr(tp, name)(inputs(name, main, rank, t)[0]))
    result["log"] = recorder.taken()
    with recorder.Phase("indivisible"):
        result["indivisible"] = {name: ranks.raised(lambda: getattr(tp, name)(torch.zeros(shape, dtype=cases.DTYPE)))
                                 for name, shape, _ in INDIVISIBLE}
    return result


def observe_scatter_gather(seed: int, params: dict):
    """Launches t = 2, 4 gloo ranks that run the scatter/gather region ops."""
    return ranks.observe(rank_scatter_gather, seed, params, cases.WORLD_SIZES)
