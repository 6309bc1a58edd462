"""3.2-column-row, child side: ranks build the student's column- and row-parallel layers from
the grader's master tensors (each option, bias=False, float32) and run them forward and
backward twice (gradients accumulate), then again on a 2-D input, a batch of one sequence
and a 1-D input under ``torch.no_grad()``; two layers from equal master tensors (each its own
copies); with the student's own 3.1 ops first, the grader's in the fallback's second run."""
from __future__ import annotations

import torch

# pieces_*: the grader's pieces this check's fallback binds, and only those, loaded before the
# student's code runs (a child cannot import grader modules after that).
from grader.checks.problem3 import (
    cases,
    pieces,
    pieces_ops,  # noqa: F401
    ranks,
    recorder,
)
from grader.checks.problem3.cases import IN, OUT

VARIANTS = ("column", "column_gather", "column_no_bias", "row", "row_scatter", "row_no_bias")


def variants(tp, m: dict, rank: int, t: int) -> dict:
    """``{name: (build, x, grad, second inputs)}``: each layer option, on its input and the
    gradient of its output."""
    column_master, row_master = {"weight": m["weight"], "bias": m["bias"]}, {"weight": m["row.weight"], "bias": m["row.bias"]}
    whole = (m["x2"], m["x"][:, :1], m["x"][0, 0])
    blocks = tuple(cases.column_block(v, rank, t) for v in whole)
    return {
        "column": (lambda: tp.ColumnParallelLinear(IN, OUT, master=column_master),
                   m["x"], cases.column_block(m["grad"], rank, t), whole),
        "column_gather": (lambda: tp.ColumnParallelLinear(IN, OUT, gather_output=True, master=column_master),
                          m["x"], m["grad"], whole),
        "column_no_bias": (lambda: tp.ColumnParallelLinear(IN, OUT, bias=False, master={"weight": m["weight"]}),
                           m["x"], cases.column_block(m["grad"], rank, t), whole),
        "row": (lambda: tp.RowParallelLinear(IN, OUT, master=row_master),
                cases.column_block(m["x"], rank, t), m["grad"], blocks),
        "row_scatter": (lambda: tp.RowParallelLinear(IN, OUT, input_is_parallel=False, master=row_master),
                        m["x"], m["grad"], whole),
        "row_no_bias": (lambda: tp.RowParallelLinear(IN, OUT, bias=False, master={"weight": m["row.weight"]}),
                        cases.column_block(m["x"], rank, t), m["grad"], blocks),
    }


def run_variant(build, x: torch.Tensor, grad: torch.Tensor, seconds: tuple, name: str) -> dict:
    layer = build()
    x = x.clone().requires_grad_()
    with recorder.Phase(f"{name}.forward"):
        y = layer(x)
    result = {"out": ranks.out(y), "kind": ranks.kind(y), "params": ranks.values(layer)}
    with recorder.Phase(f"{name}.backward"):
        ranks.backward(y, grad)
    result.update(grad=ranks.out(x.grad), param_grads=ranks.grads(layer))
    with recorder.Phase(f"{name}.again"):  # the same forward and backward: every gradient accumulates
        ranks.backward(layer(x.detach().clone().requires_grad_()), grad)
    result["param_grads_twice"] = ranks.grads(layer)
    with recorder.Phase(f"{name}.second"), torch.no_grad():
        later = [layer(v.clone()) for v in seconds]
    result.update(later=[ranks.out(v) for v in later], later_kinds=[ranks.kind(v) for v in later])
    return result


def copies(master: dict) -> dict:
    return {name: tensor.clone() for name, tensor in master.items()}


def two_layers(build) -> dict:
    """Two layers built from equal master tensors (each its own copies of them, so that a layer
    whose parameters are views of its master, 3.0-caller-unchanged's mistake, passes); the
    first's parameters changed in place: the second's parameters."""
    first, second = build(), build()
    with torch.no_grad():
        for parameter in first.parameters():
            parameter.add_(1.0)
    return ranks.values(second)


def rank_column_row(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    m = cases.linear_master(seed)
    result: dict = {}
    column_master, row_master = {"weight": m["weight"], "bias": m["bias"]}, {"weight": m["row.weight"], "bias": m["row.bias"]}
    with pieces.bound(tp, params, ops=True):
        for name, (build, x, grad, seconds) in variants(tp, m, rank, t).items():
            result[name] = run_variant(build, x, grad, seconds, name)
        for name in ("column", "row"):  # float32, built from float32 master tensors
            prefix = "" if name == "column" else "row."
            master = {"weight": m[f"{prefix}weight"].float(), "bias": m[f"{prefix}bias"].float()}
            layer = (tp.ColumnParallelLinear if name == "column" else tp.RowParallelLinear)(IN, OUT, master=master)
            x = m["x"] if name == "column" else cases.column_block(m["x"], rank, t)
            with recorder.Phase(f"{name}.float32"), torch.no_grad():
                result[name]["out32"] = ranks.out(layer(x.float()))
        result["independent"] = {name: two_layers(build) for name, build in (
            ("column", lambda: tp.ColumnParallelLinear(IN, OUT, master=copies(column_master))),
            ("row", lambda: tp.RowParallelLinear(IN, OUT, master=copies(row_master))))}
        odd = t * 2 + 1
        result["column_error"] = ranks.raised(lambda: tp.ColumnParallelLinear(IN, odd))
        result["row_error"] = ranks.raised(lambda: tp.RowParallelLinear(odd, OUT))
    result["log"] = recorder.taken()
    return result


def observe_column_row(seed: int, params: dict):
    """Launches ranks that build column- and row-parallel linear layers from the grader's weights and run them."""
    return ranks.observe(rank_column_row, seed, params, cases.ALL_SIZES)
