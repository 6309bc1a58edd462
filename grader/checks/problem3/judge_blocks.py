"""Judging a parallel module's run (parent side; see :mod:`grader.checks.problem3.blocks`):
shared by 3.3's modules and 3.5's sequence-parallel layer."""
from __future__ import annotations

from grader.checks.judging import Fail
from grader.checks.problem3 import cases
from grader.checks.problem3.cases import B2, LR, S2, B, H, S
from grader.checks.problem3.judge_tools import expect, expect_kind

# Elements of the dense weight MATRICES of each part: each rank may hold at most 1/t of them.
MATRICES = {"mlp": 2 * H * cases.FFN, "attention": 4 * H * H, "layer": 2 * H * cases.FFN + 4 * H * H}


def judge_run(where: str, o, y, dx, y2, pick) -> None:
    """Output, input grad, and the second call after the step (two backwards accumulated);
    ``pick`` maps a dense tensor to what this rank holds of it (its sequence block)."""
    expect(f"{where} output ([{S}, {B}, {H}] input)", o["out"], pick(y))
    expect_kind(f"{where} output (the input requires grad)", o["kind"], needs_grad=True)
    expect(f"{where} input grad", o["grad"], pick(dx))
    second = o["out2"]
    if isinstance(second, dict) and "raised" in second:
        raise Fail(f"{where}: a second call, on a [{S2}, {B2}, {H}] input (the first call's sequence length was {S}), "
                   f"raised {second['raised']}\nSomething kept from the first call does not fit the new size (a mask, "
                   "a buffer or a cache built for the first call's shape): nothing may be cached between calls")
    expect(f"{where} output of a second call on a [{S2}, {B2}, {H}] input (a batch of one sequence), after one SGD "
           f"step (two backwards accumulated, then p -= {LR / 2} * p.grad on every rank: the dense model's step of "
           f"{LR}; a wrong or double-counted parameter gradient, or state kept from the first call, shows here)",
           second, pick(y2))
    expect_kind(f"{where} output of the second call, under torch.no_grad()", o["kind2"], needs_grad=False)


def judge_matrices(where: str, o, part: str, t: int) -> None:
    budget = MATRICES[part] / t
    if not isinstance(o["matrix_numel"], int) or o["matrix_numel"] > budget:
        raise Fail(f"{where} holds {o['matrix_numel']} elements of weight matrices on this rank; each rank may hold "
                   f"at most 1/{t} of the dense module's {MATRICES[part]} ({budget:g})")
