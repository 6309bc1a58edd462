"""What the check modules compare with, in one place: the grader's own GPipe schedule and
the submit/receive order it implies, and tensor comparisons that never raise on a shape or
a missing value (a judge given the wrong shape fails the criterion, it does not crash).

Expected values here come from plain Python and PyTorch, never from the answer key.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch


def reference_clock_cycles(num_microbatches: int, num_stages: int) -> Iterator[list[tuple[int, int]]]:
    """The GPipe waves: wave k holds every (i, j) with i + j == k, by increasing stage j."""
    if num_microbatches < 0:
        raise ValueError(f"num_microbatches must be >= 0, got {num_microbatches}")
    if num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")
    if num_microbatches == 0:
        return
    for k in range(num_microbatches + num_stages - 1):
        yield [(k - j, j) for j in range(max(0, k - num_microbatches + 1), min(k, num_stages - 1) + 1)]


def expected_calls(num_microbatches: int, num_stages: int) -> list[list[str]]:
    """Per wave: ``submit(j)`` for every (i, j) of the wave, then ``receive(j)`` likewise."""
    return [
        [f"submit({j})" for _, j in wave] + [f"receive({j})" for _, j in wave]
        for wave in reference_clock_cycles(num_microbatches, num_stages)
    ]


def max_difference(actual, expected: torch.Tensor) -> float | None:
    """Largest absolute difference, or None when ``actual`` is not a tensor of that shape."""
    if not isinstance(actual, torch.Tensor) or tuple(actual.shape) != tuple(expected.shape):
        return None
    if not expected.numel():
        return 0.0
    return float((actual.to(expected.dtype) - expected).abs().max())


def close(actual, expected, rtol: float, atol: float) -> bool:
    """``torch.allclose`` for values that may be missing (None) or of another shape."""
    return (
        isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)
        and actual.shape == expected.shape and torch.allclose(actual, expected, rtol=rtol, atol=atol)
    )


def difference(actual, expected: torch.Tensor) -> str:
    """How ``actual`` differs from ``expected``, in words: missing, another shape, or by how much."""
    if actual is None:
        return "is None"
    if not isinstance(actual, torch.Tensor):
        return f"is a {type(actual).__name__}, not a tensor"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"has shape {list(actual.shape)}, expected {list(expected.shape)}"
    return f"differs by up to {max_difference(actual, expected):.3g}"
