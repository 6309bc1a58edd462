"""What the Problem 2 judges expect (parent side only): the GPipe schedule, the calls on the
workers it implies, the microbatch sizes of a split, and the stages run in sequence.

Written from the lecture's rules in plain Python and PyTorch, never from the answer key.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def gpipe_waves(num_microbatches: int, num_stages: int) -> list[list[tuple[int, int]]]:
    """Wave ``k`` holds every ``(i, j)`` with ``i + j == k``, ``0 <= i < M``, ``0 <= j < K``, by increasing ``j``."""
    return [
        [(k - j, j) for j in range(num_stages) if 0 <= k - j < num_microbatches]
        for k in range(num_microbatches + num_stages - 1 if num_microbatches else 0)
    ]


def expected_calls(num_microbatches: int, num_stages: int) -> list[list[str]]:
    """Per wave: ``submit(j)`` for every (i, j) of the wave, then ``receive(j)`` likewise."""
    return [
        [f"submit({j})" for _, j in wave] + [f"receive({j})" for _, j in wave]
        for wave in gpipe_waves(num_microbatches, num_stages)
    ]


def microbatch_sizes(rows: int, split_size: int) -> list[int]:
    """The rows of each microbatch: ``split_size`` each, the last one fewer."""
    return [min(split_size, rows - start) for start in range(0, rows, split_size)]


def sequential(stages: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for stage in stages:
        x = stage(x)
    return x
