"""3.5-sequence-parallel, child side: ranks run a transformer layer with
``sequence_parallel=True`` (see :mod:`grader.checks.problem3.blocks`) and, on their own, the
student's sequence-parallel column- and row-parallel layers (with and without bias) and
LayerNorm, forward and backward twice (gradients accumulate), and the row-parallel layer
forward in float32. With the student's own pieces (its layer, ops, everything) first; in the
fallback's second run, the grader's 3.1 ops and 3.3 modules built on the student's linear
layers and LayerNorm."""
from __future__ import annotations

import torch

# pieces_*: the grader's pieces this check's fallback binds, and only those, loaded before the
# student's code runs (a child cannot import grader modules after that).
from grader.checks.problem3 import blocks, cases, pieces, pieces_blocks, pieces_ops, ranks, recorder  # noqa: F401
from grader.checks.problem3.cases import FFN, H


def parts(tp, master: dict, d: dict, rank: int, t: int) -> dict:
    """``{name: (build, x, grad)}``: each sequence-parallel part on this rank's input and the
    gradient of its output."""
    fc1, fc2, ln1 = cases.sub(master, "mlp.fc1"), cases.sub(master, "mlp.fc2"), cases.sub(master, "ln1")
    x, hidden = cases.row_block(d["x"], rank, t), cases.column_block(d["hidden"], rank, t)
    to_hidden, to_x = cases.column_block(d["grad_ffn"], rank, t), cases.row_block(d["grad"], rank, t)
    return {
        "column": (lambda: tp.ColumnParallelLinear(H, FFN, sequence_parallel=True, master=fc1), x, to_hidden),
        "column_no_bias": (lambda: tp.ColumnParallelLinear(H, FFN, bias=False, sequence_parallel=True,
                                                           master={"weight": fc1["weight"]}), x, to_hidden),
        "row": (lambda: tp.RowParallelLinear(FFN, H, sequence_parallel=True, master=fc2), hidden, to_x),
        "row_no_bias": (lambda: tp.RowParallelLinear(FFN, H, bias=False, sequence_parallel=True,
                                                     master={"weight": fc2["weight"]}), hidden, to_x),
        "norm": (lambda: tp.ReplicatedLayerNorm(H, sequence_parallel=True, master=ln1), x, to_x),
    }


def float32_rows(tp, master: dict, d: dict, rank: int, t: int) -> dict:
    """The sequence-parallel row-parallel layer (with and without bias) built from float32 master
    tensors, forward on this rank's float32 block of the hidden features."""
    fc2 = {k: v.float() for k, v in cases.sub(master, "mlp.fc2").items()}
    hidden = cases.column_block(d["hidden"], rank, t).float()
    return {"row": ranks.outcome(lambda: tp.RowParallelLinear(FFN, H, sequence_parallel=True, master=fc2)(hidden.clone())),
            "row_no_bias": ranks.outcome(lambda: tp.RowParallelLinear(
                FFN, H, bias=False, sequence_parallel=True, master={"weight": fc2["weight"]})(hidden.clone()))}


def run_part(build, x: torch.Tensor, grad: torch.Tensor, name: str) -> dict:
    module = build()
    x = x.clone().requires_grad_()
    with recorder.Phase(f"{name}.forward"):
        y = module(x)
    result = {"out": ranks.out(y), "kind": ranks.kind(y)}
    with recorder.Phase(f"{name}.backward"):
        ranks.backward(y, grad)
    result.update(grad=ranks.out(x.grad), param_grads=ranks.grads(module))
    with recorder.Phase(f"{name}.again"):
        ranks.backward(module(x.detach().clone().requires_grad_()), grad)
    result["param_grads_twice"] = ranks.grads(module)
    if name == "norm":
        with recorder.Phase("norm.parameters"):
            result["parameters"] = [ranks.out(p) for p in module.sequence_parallel_parameters()]
    return result


def rank_sequence_parallel(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    with pieces.bound(tp, params, ops=True, blocks=True):
        result = blocks.run_block(tp, rank, t, seed, "layer", sp=True)
        master, d = cases.layer_master(seed), cases.sequence_parallel_data(seed)
        result["parts"] = {name: run_part(build, x, grad, name) for name, (build, x, grad) in
                           parts(tp, master, d, rank, t).items()}
        with recorder.Phase("float32"), torch.no_grad():
            result["float32"] = float32_rows(tp, master, d, rank, t)
    result["log"] = recorder.taken()
    return result


def observe_sequence_parallel(seed: int, params: dict):
    """Launches ranks that run a sequence-parallel layer and the sequence-parallel parts alone."""
    return ranks.observe(rank_sequence_parallel, seed, params, cases.ALL_SIZES)
