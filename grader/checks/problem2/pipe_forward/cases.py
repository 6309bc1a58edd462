"""The Pipe forwards of 2.2-forward and 2.2-input-unchanged, shared by the child (which runs them)
and the parent (which judges exactly these).

A case: ``stages`` (how many), ``rows`` (the batch size of each call on one Pipe: later calls
with other sizes, one row), ``split`` (split_size: 1, uneven, larger than the batch; 9 rows at 4
are [4, 4, 1], not torch.chunk's [3, 3, 3]), and what the contract allows beyond the worked
example: ranks 1 to 4 (``shape``: the dimensions after the rows), float32 and bfloat16, stages
without or with frozen parameters (``kinds``), a tuple or a ModuleList of stages (``container``).
The caller's batch as it comes (2.2-input-unchanged, a convention): not contiguous (``layout``),
requiring grad, under no_grad; there each forward on a batch that is not contiguous is judged
against the same forward on a contiguous copy of it.
"""
from __future__ import annotations

from typing import Any

FORWARD_CASES: list[dict[str, Any]] = [
    {"stages": 1, "rows": [5, 5], "split": 2},
    {"stages": 2, "rows": [7, 3], "split": 3},
    {"stages": 3, "rows": [6, 1], "split": 1},
    {"stages": 3, "rows": [4, 9], "split": 10},
    {"stages": 3, "rows": [10, 10, 7], "split": 4},
    {"stages": 2, "rows": [8], "split": 8, "container": "tuple"},
    {"stages": 3, "rows": [9, 6], "split": 4, "container": "ModuleList"},
    {"stages": 2, "rows": [6], "split": 4},
    {"stages": 4, "rows": [7], "split": 2, "dtype": "float32", "kinds": ["trained", "buffers", "frozen", "trained"]},
    {"stages": 3, "rows": [5, 2], "split": 2, "shape": [2, 1, 3]},
    {"stages": 2, "rows": [5], "split": 2, "shape": []},
    {"stages": 2, "rows": [5], "split": 2, "dtype": "bfloat16"},
    {"stages": 5, "rows": [1, 11], "split": 3},
]

# The caller's batch after a forward: with and without requires_grad, contiguous or not, of
# other ranks and dtypes, split into one microbatch or into one row each, and under no_grad.
INPUT_CASES: list[dict[str, Any]] = [
    {"stages": 3, "rows": 6, "split": 2},
    {"stages": 2, "rows": 5, "split": 2, "requires_grad": True},
    {"stages": 2, "rows": 4, "split": 1, "layout": "transposed"},
    {"stages": 2, "rows": 3, "split": 2, "requires_grad": True, "layout": "transposed"},
    {"stages": 2, "rows": 4, "split": 8},
    {"stages": 2, "rows": 4, "split": 8, "requires_grad": True},
    {"stages": 3, "rows": 5, "split": 2, "shape": []},
    {"stages": 2, "rows": 6, "split": 4, "shape": [2, 3], "dtype": "float32", "requires_grad": True},
    {"stages": 2, "rows": 6, "split": 2, "requires_grad": True, "mode": "no_grad"},
    {"stages": 3, "rows": 6, "split": 4, "layout": "transposed", "shape": [2, 3]},
]


def container(stages: list, case: dict):
    """The stages as the case hands them to the Pipe (a list unless it says otherwise)."""
    from torch import nn

    kind = case.get("container", "list")
    return tuple(stages) if kind == "tuple" else nn.ModuleList(stages) if kind == "ModuleList" else stages
