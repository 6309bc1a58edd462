"""3.5-sequence-parallel, parent side: the sequence-parallel linear layers (with and without
bias) and LayerNorm on their own (by name: the contract names their parameters; replicated
gradients summed over the whole sequence; accumulating over two backwards; within their
budgets), then the sequence-parallel layer against the dense layer (each rank's sequence block;
with the grader's modules also every parameter's gradient by name), with no all-reduce of
activations and the volume of plain tensor parallelism."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from grader.checks.judging import Fail
from grader.checks.problem3 import cases, expected_dense, pieces
from grader.checks.problem3.cases import B, H, N, S
from grader.checks.problem3.judge_blocks import judge_run
from grader.checks.problem3.judge_tools import (
    VOLUME,
    close,
    describe,
    expect,
    expect_budget,
    expect_kind,
    expect_outcome,
    phase_log,
    world_sizes,
)
from grader.checks.problem3.linear.judge import dense_linear
from grader.checks.threads import single_threaded

WHAT = ("a transformer layer with sequence_parallel=True ({}; the grader's modules over your ColumnParallelLinear, "
        "RowParallelLinear and ReplicatedLayerNorm are tried when your own layer does not pass)")
PART_NAMES = {"column": "ColumnParallelLinear(sequence_parallel=True)",
              "column_no_bias": "ColumnParallelLinear(bias=False, sequence_parallel=True)",
              "row": "RowParallelLinear(sequence_parallel=True)",
              "row_no_bias": "RowParallelLinear(bias=False, sequence_parallel=True)",
              "norm": "ReplicatedLayerNorm(sequence_parallel=True)"}
# Per part: which of the dense results is rank r's (its sequence block, its feature block, or whole).
LAYOUT = {"column": ("features", "sequence"), "row": ("sequence", "features"), "norm": ("sequence", "sequence")}


@single_threaded
def judge_sequence_parallel(seed: int, params: dict, observation) -> None:
    y, dx, dense, y2 = expected_dense.dense_run(seed, "layer")
    graders = pieces.uses_grader_pieces(params)
    parts = dense_parts(seed)
    for t, values in world_sizes(observation, params, "the sequence-parallel layer", cases.ALL_SIZES).items():
        partial = expected_dense.partial_grads(seed, t)
        for r, o in enumerate(values):
            for name, part in o["parts"].items():
                judge_part(f"t={t}, rank {r}: {PART_NAMES[name]}", name, part, parts[name], r, t)
            judge_float32_rows(f"t={t}, rank {r}", o["float32"], seed, r, t)
            if t > 1:
                judge_parts_traffic(f"t={t}, rank {r}", o["log"], t)
            where = f"t={t}, rank {r}: " + WHAT.format("the grader's modules" if graders else "your own layer")
            for name, blocks in partial.items() if graders and t > 1 else ():
                if close(o["param_grads"].get(name), blocks[r]):
                    raise Fail(f"{where}: the gradient of {name} covers only this rank's block of the sequence; after "
                               "backward every rank must hold the gradient over the whole sequence")
            judge_run(where, o, y, dx, y2, lambda v: cases.row_block(v, r, t))  # noqa: B023 - used at once
            for name, value in dense.expected_grads(t, r).items() if graders else ():
                expect(f"{where}: gradient of {name}", o["param_grads"].get(name), value)
            if t > 1:
                judge_layer_traffic(where, o["log"], t)


def judge_float32_rows(where: str, results: dict, seed: int, r: int, t: int) -> None:
    master, d = cases.layer_master(seed), cases.sequence_parallel_data(seed)
    weight, bias = master["mlp.fc2.weight"].float(), master["mlp.fc2.bias"].float()
    for name, with_bias in (("row", bias), ("row_no_bias", None)):
        expect_outcome(f"{where}: {PART_NAMES[name]} built from float32 master tensors, on a float32 input: output",
                       results[name], cases.row_block(F.linear(d["hidden"].float(), weight, with_bias), r, t))


def judge_layer_traffic(where: str, log: list, t: int) -> None:
    activations = [c for c in phase_log(log, "forward") if c["numel"] > 4 * H]
    all_reduces = [c for c in activations if c["kind"] == "all_reduce"]
    if all_reduces:
        raise Fail(f"{where}: with sequence parallelism the forward all-reduces no activation (each rank keeps only "
                   f"its block of the sequence between the layers); recorded {describe(all_reduces)}")
    expect_budget(where, t, activations, "forward", 2 * VOLUME["all_reduce"](t) * N,
                  "the same as the 2 all-reduces of plain tensor parallelism")


def dense_parts(seed: int) -> dict[str, dict]:
    """Per part, over the whole sequence: the dense output ``y``, input grad ``dx``, parameter
    gradients ``grads``, the master ``values`` and, for the replicated parameters, the
    gradient function of a block of the sequence (``partial``, what a rank sees unsummed)."""
    master, d = cases.layer_master(seed), cases.sequence_parallel_data(seed)
    found = {}
    for name, prefix, x, grad in (("column", "mlp.fc1", d["x"], d["grad_ffn"]), ("row", "mlp.fc2", d["hidden"], d["grad"])):
        for suffix, bias in (("", master[f"{prefix}.bias"]), ("_no_bias", None)):
            y, dx, dw, db = dense_linear(master[f"{prefix}.weight"], bias, x, grad)
            found[name + suffix] = {"y": y, "dx": dx, "grads": {"weight": dw, **({"bias": db} if bias is not None else {})},
                                    "values": {"bias": bias}}
    found["row"]["partial"] = lambda block: {"bias": d["grad"][block].sum(dim=(0, 1))}
    weight, bias = master["ln1.weight"].clone().requires_grad_(), master["ln1.bias"].clone().requires_grad_()
    x = d["x"].clone().requires_grad_()
    y = F.layer_norm(x, (H,), weight, bias)
    (y * d["grad"]).sum().backward()
    found["norm"] = {"y": y.detach(), "dx": x.grad, "grads": {"weight": weight.grad, "bias": bias.grad},
                     "values": cases.sub(master, "ln1"), "partial": lambda block: layer_norm_grads(master, d, block)}
    return found


def layer_norm_grads(master: dict, d: dict, block: slice) -> dict[str, torch.Tensor]:
    weight, bias = master["ln1.weight"].clone().requires_grad_(), master["ln1.bias"].clone().requires_grad_()
    (F.layer_norm(d["x"][block], (H,), weight, bias) * d["grad"][block]).sum().backward()
    return {"weight": weight.grad, "bias": bias.grad}


def shard(name: str, parameter: str, value: torch.Tensor, r: int, t: int) -> torch.Tensor:
    """Rank r's share of a parameter's dense gradient (the contract names them)."""
    kind = name.replace("_no_bias", "")
    if kind == "column":
        return cases.row_block(value, r, t)
    if kind == "row" and parameter == "weight":
        return cases.column_block(value, r, t)
    return value  # replicated: the whole sequence's gradient on every rank


def judge_part(where: str, name: str, o, dense: dict, r: int, t: int) -> None:
    blocks = {"sequence": cases.row_block, "features": cases.column_block}
    out_layout, grad_layout = LAYOUT[name.replace("_no_bias", "")]
    out, grad = blocks[out_layout](dense["y"], r, t), blocks[grad_layout](dense["dx"], r, t)
    bias = dense["values"].get("bias")
    if name == "row" and t > 1 and close(o["out"], out + (t - 1) * bias):
        raise Fail(f"{where}: the output holds the bias {t} times (once per rank); the dense layer adds it once")
    expect(f"{where} output", o["out"], out)
    expect_kind(f"{where} output (the input requires grad)", o["kind"], needs_grad=True)
    expect(f"{where} input grad", o["grad"], grad)
    if name.endswith("_no_bias") and o["param_grads"].get("bias") is not None:
        raise Fail(f"{where} has a bias parameter; with bias=False it has none (self.bias is None)")
    partial = dense["partial"](slice(r * S // t, (r + 1) * S // t)) if "partial" in dense and t > 1 else {}
    for parameter, value in dense["grads"].items():
        got = o["param_grads"].get(parameter)
        if parameter in partial and close(got, partial[parameter]):
            raise Fail(f"{where}: the gradient of {parameter} covers only this rank's block of the sequence; after "
                       "backward every rank must hold the gradient over the whole sequence (identical on every rank)")
        expect(f"{where} {parameter} grad", got, shard(name, parameter, value, r, t))
        expect(f"{where} {parameter} grad after a second forward and backward (gradients accumulate: twice the dense "
               "one)", o["param_grads_twice"].get(parameter), shard(name, parameter, 2 * value, r, t))
    if name == "norm":
        for value, parameter in zip(o["parameters"], ("weight", "bias")):
            expect(f"{where}: sequence_parallel_parameters()'s {parameter}, equal to self.{parameter}", value,
                   dense["values"][parameter])


def judge_parts_traffic(where: str, log: list, t: int) -> None:
    for name, budget, why in (
        ("column", VOLUME["all_gather"](t) * S * B * H, "the input moves once"),
        ("column_no_bias", VOLUME["all_gather"](t) * S * B * H, "the input moves once"),
        ("row", VOLUME["reduce_scatter"](t) * S * B * H, "one reduce-scatter of the output"),
        ("row_no_bias", VOLUME["reduce_scatter"](t) * S * B * H, "one reduce-scatter of the output"),
        ("norm", 0, "each rank normalises its own block of the sequence"),
    ):
        expect_budget(f"{where}: {PART_NAMES[name]}", t, log, f"{name}.forward", budget, why)
    expect_budget(f"{where}: {PART_NAMES['norm']}", t, log, "norm.backward", 2 * VOLUME["all_reduce"](t) * H,
                  f"at most one all-reduce of {H} elements per parameter", direction="backward")
