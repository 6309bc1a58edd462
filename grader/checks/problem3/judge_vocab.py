"""Naming the first wrong token of a per-token result (parent side; 3.4's embedding and loss):
a range test off by one shows at the edges of a rank's vocabulary range."""
from __future__ import annotations

import torch

from grader.checks.judging import Fail
from grader.checks.problem3.cases import VOCAB
from grader.checks.problem3.judge_tools import close, expect, tolerance


def expect_per_token(what: str, actual, expected: torch.Tensor, ids: torch.Tensor, t: int, rule: str) -> None:
    """``actual`` equals ``expected`` ([*ids.shape, ...] per token), or Fail naming the first
    wrong token's id and the rank range it belongs to."""
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape or actual.dtype != expected.dtype:
        expect(what, actual, expected)  # missing, not a tensor, another shape or dtype: it says which
    if close(actual, expected):
        return
    per_token = (actual - expected).abs().reshape(ids.numel(), -1).amax(dim=1)
    bound = tolerance(expected) * (1 + expected.abs().max().item())
    wrong = int((~(per_token <= bound)).nonzero()[0])  # NaN is wrong too
    token_id, size = int(ids.reshape(-1)[wrong]), VOCAB // t
    owner = token_id // size
    edge = (" (the first id of that range)" if token_id == owner * size
            else " (the last id of that range)" if token_id == (owner + 1) * size - 1 else "")
    raise Fail(f"{what} for token id {token_id} differs by {float(per_token[wrong]):.3g}; that id belongs to rank "
               f"{owner}'s range [{owner * size}, {(owner + 1) * size}){edge}: {rule}")
