"""The grader's own LayerNorm with its 3.5 part (child side); held only by the children whose
fallback needs it. See :mod:`grader.checks.problem3.pieces`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from grader.checks.problem3.pieces_ops import (
    _Copy,
)


class ReplicatedLayerNorm(nn.LayerNorm):
    def __init__(self, hidden_size, eps=1e-5, *, sequence_parallel=False, dtype=None, master=None):
        super().__init__(hidden_size, eps=eps, dtype=master["weight"].dtype if master else dtype)
        self.sequence_parallel = sequence_parallel
        if master:
            with torch.no_grad():
                self.weight.copy_(master["weight"])
                self.bias.copy_(master["bias"])

    def forward(self, x):
        weight, bias = self.weight, self.bias
        if self.sequence_parallel:  # each rank saw its block of the sequence: sum the gradients
            weight, bias = _Copy.apply(weight), _Copy.apply(bias)
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)
