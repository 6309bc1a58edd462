"""The grader's own 3.2 linear layers (child side); held only by the children whose fallback
needs them. See :mod:`grader.checks.problem3.pieces`."""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from grader.checks.problem3.pieces_ops import (
    _Copy,
    _dense_linear_master,
    _divide,
    _Gather,
    _GatherSequence,
    _Reduce,
    _ReduceScatterSequence,
    _Scatter,
    _world,
)


def _linear_master(master, in_features, out_features, bias, seed, dtype):
    """The dense linear layer's tensors: drawn from ``seed`` without a master; a master as the
    linear layers' contract admits it (exactly ``weight``, and ``bias`` when ``bias``, of the
    dense shapes: an empty dict is a master with neither), else ValueError, as the student's
    must. A lenient piece would let a model that hands its output layer ``{}`` pass."""
    if master is None:
        return _dense_linear_master(in_features, out_features, bias, seed, dtype)
    shapes = {"weight": (out_features, in_features), **({"bias": (out_features,)} if bias else {})}
    if set(master) != set(shapes):
        raise ValueError(f"master tensors must be {sorted(shapes)}, got {sorted(master)}")
    for name, shape in shapes.items():
        if tuple(master[name].shape) != shape:
            raise ValueError(f"master[{name!r}] must have shape {shape}, got {tuple(master[name].shape)}")
    return master


class ColumnParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=True, gather_output=False, *, sequence_parallel=False,
                 seed=0, dtype=None, master=None):
        super().__init__()
        master = _linear_master(master, in_features, out_features, bias, seed, dtype)
        rank, size = _world()[0], _divide(out_features, "out_features")
        rows = slice(rank * size, (rank + 1) * size)
        self.gather_output, self.sequence_parallel = gather_output, sequence_parallel
        self.weight = nn.Parameter(master["weight"][rows].clone())
        self.bias = nn.Parameter(master["bias"][rows].clone()) if "bias" in master else None

    def forward(self, x):
        x = _GatherSequence.apply(x) if self.sequence_parallel else _Copy.apply(x)
        y = F.linear(x, self.weight, self.bias)
        return _Gather.apply(y) if self.gather_output else y


class RowParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=True, input_is_parallel=True, *, sequence_parallel=False,
                 seed=0, dtype=None, master=None):
        super().__init__()
        master = _linear_master(master, in_features, out_features, bias, seed, dtype)
        rank, size = _world()[0], _divide(in_features, "in_features")
        self.input_is_parallel, self.sequence_parallel = input_is_parallel, sequence_parallel
        self.weight = nn.Parameter(master["weight"][:, rank * size:(rank + 1) * size].clone())
        self.bias = nn.Parameter(master["bias"].clone()) if "bias" in master else None

    def forward(self, x):
        if not self.input_is_parallel:
            x = _Scatter.apply(x)
        partial = F.linear(x, self.weight)
        if not self.sequence_parallel:
            y = _Reduce.apply(partial)
            return y if self.bias is None else y + self.bias
        y = _ReduceScatterSequence.apply(partial)
        return y if self.bias is None else y + _Copy.apply(self.bias)
