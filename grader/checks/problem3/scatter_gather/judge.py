"""3.1-scatter-gather, parent side: each op's output and input gradient against the blocks
and sums of the ranks' tensors; outputs have the input's dtype and require grad only when the
input does; the communication each docstring allows; a size t does not divide is refused."""
from __future__ import annotations

import torch

from grader.checks.judging import Fail
from grader.checks.problem3 import cases
from grader.checks.problem3.judge_tools import describe, expect, expect_kind, expect_refused, moved, phase_log, world_sizes
from grader.checks.problem3.scatter_gather.observe import GATHER, INDIVISIBLE, OPS, SCATTER, SEQUENCE_GATHER, SEQUENCE_SCATTER
from grader.checks.threads import single_threaded


def expected(name: str, data: dict, rank: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(expected output, expected input grad) of rank for op ``name``."""
    x, grad, xs, gs = data["x"], data["grad"], data["x_r"], data["grad_r"]
    column, row = cases.column_block, cases.row_block
    if name == SCATTER:
        return column(x, rank, t), torch.cat([column(gs[r], r, t) for r in range(t)], -1)
    if name == GATHER:
        return torch.cat([column(xs[r], r, t) for r in range(t)], -1), column(grad, rank, t)
    if name == SEQUENCE_SCATTER:
        return row(x, rank, t), torch.cat([row(gs[r], r, t) for r in range(t)])
    if name == SEQUENCE_GATHER:
        return torch.cat([row(xs[r], r, t) for r in range(t)]), row(sum(gs), rank, t)
    return row(sum(xs), rank, t), torch.cat([row(gs[r], r, t) for r in range(t)])


def budgets(name: str, x_numel: int, out_numel: int, t: int) -> dict[str, tuple[int, float, str]]:
    """``{direction: (most collectives, most elements moved per rank, the contract's words)}``."""
    if name in (SCATTER, SEQUENCE_SCATTER):
        return {"forward": (0, 0.0, "every rank already holds the whole tensor")}
    if name in (GATHER, SEQUENCE_GATHER):
        words = "at most one collective each way, moving at most the output's elements"
        return {"forward": (1, out_numel, words), "backward": (1, x_numel * t, words)}
    return {"forward": (1, 2 * (t - 1) / t * x_numel, "at most what one all-reduce of x moves")}


@single_threaded
def judge_scatter_gather(seed: int, params: dict, observation) -> None:
    for t, values in world_sizes(observation, params, "the scatter/gather ops", cases.WORLD_SIZES).items():
        for r, o in enumerate(values):
            for label, data in cases.op_cases(seed, t):
                for name in OPS:
                    judge_op(f"t={t}, rank {r}: {name} on {label}", name, o[f"{name} {label}"], o["log"],
                             f"{name} {label}", data, r, t)
            for name in OPS:
                expect_kind(f"t={t}, rank {r}: {name}'s output for an input that does not require grad",
                            o["no_grad"][name], needs_grad=False)
            for name, shape, dimension in INDIVISIBLE if t > 1 else ():
                expect_refused(f"t={t}: {name} of a tensor of shape {list(shape)} (its {'last' if dimension else 'first'} dimension "
                               f"is not divisible by {t}; do not cut the rest off)", o["indivisible"][name])


def judge_op(where: str, name: str, result, log: list, phase: str, data: dict, r: int, t: int) -> None:
    out, grad = expected(name, data, r, t)
    expect(f"{where}: forward output", result["out"], out)
    expect_kind(f"{where}: the output (its input requires grad)", result["kind"], needs_grad=True)
    expect(f"{where}: backward input grad", result["grad"], grad)
    for direction, (most, volume, words) in budgets(name, grad.numel(), out.numel(), t).items():
        got = phase_log(log, f"{phase}.{direction}")
        amount, unknown = moved(t, got)
        if t > 1 and (len(got) > most or unknown or amount > volume * (1 + 1e-9)):
            raise Fail(f"{where}: the {direction} may issue at most {most} collective(s) moving at most {volume:g} "
                       f"elements per rank ({words}); recorded {describe(got)}, which moves {amount:g}")
