"""Tensor comparisons that never raise on a shape or a missing value (a judge given the wrong
shape fails the criterion, it does not crash). Problem 2's expected schedule lives in
grader/checks/problem2/expected.py.
"""
from __future__ import annotations

import torch


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
