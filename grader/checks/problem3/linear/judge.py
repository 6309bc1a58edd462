"""3.2-column-row, parent side: each layer option's parameters (by name: the contract names
them), output, input and parameter gradients against ``F.linear``; gradients that accumulate
over two backwards; later calls on a 2-D input and on a batch of one sequence; float32; the
forward's communication budget; a size t does not divide is refused."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from grader.checks.judging import Fail
from grader.checks.problem3 import cases
from grader.checks.problem3.cases import IN, OUT, ROWS2, S
from grader.checks.problem3.judge_tools import (
    SHARD,
    VOLUME,
    close,
    expect,
    expect_budget,
    expect_kind,
    expect_refused,
    world_sizes,
)
from grader.checks.problem3.linear.observe import VARIANTS
from grader.checks.threads import single_threaded

OPTIONS = {"column": "gather_output=False", "column_gather": "gather_output=True", "column_no_bias": "bias=False",
           "row": "input_is_parallel=True", "row_scatter": "input_is_parallel=False", "row_no_bias": "bias=False"}


def dense_linear(weight, bias, x, grad):
    """``nn.Linear`` forward + backward: (y, dx, dweight, dbias); ``bias`` may be None."""
    weight, x = weight.clone().requires_grad_(), x.clone().requires_grad_()
    bias = None if bias is None else bias.clone().requires_grad_()
    y = F.linear(x, weight, bias)
    (y * grad).sum().backward()
    return y.detach(), x.grad, weight.grad, None if bias is None else bias.grad


@single_threaded
def judge_column_row(seed: int, params: dict, observation) -> None:
    m = cases.linear_master(seed)
    dense = {"column": (m["weight"], m["bias"]), "row": (m["row.weight"], m["row.bias"]),
             "column_no_bias": (m["weight"], None), "row_no_bias": (m["row.weight"], None)}
    for t, values in world_sizes(observation, params, "the column- and row-parallel layers", cases.ALL_SIZES).items():
        for r, o in enumerate(values):
            where = f"t={t}, rank {r}"
            for name in VARIANTS:
                weight, bias = dense[name.replace("_gather", "").replace("_scatter", "")]
                column = name.startswith("column")
                what = f"{where}: {'Column' if column else 'Row'}ParallelLinear({OPTIONS[name]})"
                (judge_column if column else judge_row)(what, o[name], dense_linear(weight, bias, m["x"], m["grad"]),
                                                        weight, bias, r, t)
                judge_later_calls(what, o[name], weight, bias, m, name, r, t)
                if name in ("column", "row") and bias is not None:
                    y32 = F.linear(m["x"].float(), weight.float(), bias.float())
                    expect(f"{what} built in float32: output", o[name]["out32"],
                           cases.column_block(y32, r, t) if column else y32)
            for name, shard in (("column", (cases.row_block(m["weight"], r, t), cases.row_block(m["bias"], r, t))),
                                ("row", (cases.column_block(m["row.weight"], r, t), m["row.bias"]))):
                for parameter, value in zip(("weight", "bias"), shard):
                    expect(f"{where}: {'Column' if name == 'column' else 'Row'}ParallelLinear's {parameter}, after "
                           "another layer built from equal master tensors had its parameters changed in place "
                           "(each layer holds its own parameters: nothing is kept between calls)", o["independent"][name].get(parameter), value, SHARD)
            if t > 1:
                judge_refusals_and_budgets(where, o, t)


def judge_later_calls(what: str, result, weight, bias, m: dict, name: str, r: int, t: int) -> None:
    blocked = name in ("column", "column_no_bias")
    for label, x, kind, value in zip((f"a 2-D input of {ROWS2} rows", f"a batch of one sequence [{S}, 1, {IN}]",
                                      f"a 1-D input [{IN}]"), (m["x2"], m["x"][:, :1], m["x"][0, 0]),
                                     result["later_kinds"], result["later"]):
        y = F.linear(x, weight, bias)
        expect(f"{what}, called again under torch.no_grad() with {label}: output", value,
               cases.column_block(y, r, t) if blocked else y)
        expect_kind(f"{what}, called under torch.no_grad(): the output", kind, needs_grad=False)


def judge_refusals_and_budgets(where: str, o, t: int) -> None:
    expect_refused(f"t={t}: ColumnParallelLinear({IN}, {2 * t + 1}) (out_features not divisible by {t})",
                   o["column_error"])
    expect_refused(f"t={t}: RowParallelLinear({2 * t + 1}, {OUT}) (in_features not divisible by {t})", o["row_error"])
    for name in ("column", "column_no_bias"):
        expect_budget(f"{where}, ColumnParallelLinear({OPTIONS[name]})", t, o["log"], f"{name}.forward", 0,
                      "the input is the same on every rank and each rank keeps its own output block")
    expect_budget(f"{where}, ColumnParallelLinear(gather_output=True)", t, o["log"], "column_gather.forward",
                  VOLUME["all_gather"](t) * S * cases.B * OUT, "one gather of the output")
    for name in ("row", "row_scatter", "row_no_bias"):
        expect_budget(f"{where}, RowParallelLinear({OPTIONS[name]})", t, o["log"], f"{name}.forward",
                      VOLUME["all_reduce"](t) * S * cases.B * OUT, "one all-reduce of the output")


def judge_column(where: str, c, dense, master_weight, master_bias, r: int, t: int) -> None:
    y, dx, dw, db = dense
    rows = f"rows {r * OUT // t}:{(r + 1) * OUT // t}"
    expect(f"{where} weight must be {rows} of the master weight", c["params"].get("weight"),
           cases.row_block(master_weight, r, t), SHARD)
    judge_bias(where, c, cases.row_block(master_bias, r, t) if db is not None else None,
               f"entries {rows[5:]} of the master bias")
    gathered = "gather_output=True" in where
    expect(f"{where} output", c["out"], y if gathered else cases.column_block(y, r, t))
    expect_kind(f"{where} output (the parameters require grad)", c["kind"], needs_grad=True)
    expect(f"{where} input grad (the whole dense gradient, on every rank)", c["grad"], dx)
    judge_parameter_grads(where, c, cases.row_block(dw, r, t), None if db is None else cases.row_block(db, r, t))


def judge_row(where: str, c, dense, master_weight, master_bias, r: int, t: int) -> None:
    y, dx, dw, db = dense
    expect(f"{where} weight must be columns {r * IN // t}:{(r + 1) * IN // t} of the master weight",
           c["params"].get("weight"), cases.column_block(master_weight, r, t), SHARD)
    judge_bias(where, c, master_bias if db is not None else None, "the whole master bias")
    if db is not None and t > 1 and close(c["out"], y + (t - 1) * master_bias):
        raise Fail(f"{where}: the output holds the bias {t} times (once per rank); the dense layer adds it once")
    expect(f"{where} output", c["out"], y)
    expect_kind(f"{where} output (the parameters require grad)", c["kind"], needs_grad=True)
    expect(f"{where} input grad", c["grad"], dx if "input_is_parallel=False" in where else cases.column_block(dx, r, t))
    judge_parameter_grads(where, c, cases.column_block(dw, r, t), db)


def judge_bias(where: str, c, expected, block: str) -> None:
    if expected is None:
        if c["params"].get("bias") is not None or c["param_grads"].get("bias") is not None:
            raise Fail(f"{where} has a bias parameter; with bias=False it has none (self.bias is None)")
        return
    expect(f"{where} bias must be {block}", c["params"].get("bias"), expected, SHARD)


def judge_parameter_grads(where: str, c, dw: torch.Tensor, db) -> None:
    expect(f"{where} weight grad", c["param_grads"].get("weight"), dw)
    if db is not None:
        expect(f"{where} bias grad", c["param_grads"].get("bias"), db)
    for name, one in (("weight", dw), ("bias", db)):
        if one is not None:
            expect(f"{where} {name} grad after a second forward and backward without zeroing (gradients "
                   "accumulate, as with nn.Linear: twice the dense one)", c["param_grads_twice"].get(name), 2 * one)
