"""What every 2.2 judge says the same way (parent side only): a case in words, tolerances, what is
wrong with the microbatches a stage was given, how an output differs row by row."""
from __future__ import annotations

import torch

from grader.checks.problem2.expected import microbatch_sizes

RTOL, ATOL = 1e-7, 1e-9  # forward, float64: only the matmul blocking differs
TOLERANCE = {"float64": (RTOL, ATOL), "float32": (1e-5, 1e-6), "bfloat16": (2e-2, 2e-2)}
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6


def describe(stages: int, rows: int, split_size: int) -> str:
    m = len(microbatch_sizes(rows, split_size))
    return (f"{stages} stage{'s' * (stages != 1)}, a batch of {rows} row{'s' * (rows != 1)}, split_size={split_size} "
            f"({m} microbatch{'es' * (m != 1)})")


def microbatch_mistake(given: list[int], rows: int, split_size: int) -> str | None:
    """What is wrong with the microbatch sizes stage 0 was given, counted before anything else;
    None when they are right, or when stage 0 did not see every row once (then the calls, not
    the split, are wrong: later checks say how)."""
    sizes = microbatch_sizes(rows, split_size)
    if given == sizes or sum(given) != rows:
        return None
    if len(given) != len(sizes):
        return (
            f"ran {len(given)} microbatch{'es' * (len(given) != 1)} ({given} rows); split_size={split_size} rows per "
            f"microbatch gives {len(sizes)} ({sizes} rows). split_size is the number of ROWS per microbatch: "
            "torch.split(x, split_size)"
        )
    return (
        f"stage 0 was given microbatches of {given} rows; expected {sizes}: split_size rows each, only the last "
        "may be smaller (torch.split(x, split_size); torch.chunk spreads the rows evenly instead)"
    )


def differs(actual, expected: torch.Tensor) -> str:
    """How ``actual`` differs from ``expected``, in words: missing, another shape, or by how much."""
    if not isinstance(actual, torch.Tensor):
        return "is missing" if actual is None else f"is a {type(actual).__name__}, not a tensor"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"has shape {list(actual.shape)}, expected {list(expected.shape)}"
    gap = (actual.to(expected.dtype) - expected).abs().max() if expected.numel() else torch.tensor(0.0)
    return f"differs by up to {float(gap):.3g}"


def close(actual, expected: torch.Tensor, rtol: float, atol: float) -> bool:
    """``torch.allclose`` for a value that may be missing or of another shape or dtype."""
    return (isinstance(actual, torch.Tensor) and actual.shape == expected.shape and actual.dtype == expected.dtype
            and torch.allclose(actual, expected, rtol=rtol, atol=atol))


def compare_rows(expected: torch.Tensor, got: torch.Tensor, split_size: int, rtol: float = RTOL,
                 atol: float = ATOL) -> str:
    """Say how ``got`` differs from ``expected`` row by row (reordered? which microbatch?)."""
    expected, got = expected.reshape(expected.shape[0], -1), got.reshape(got.shape[0], -1)
    near = torch.isclose(got, expected, rtol=rtol, atol=atol).all(dim=1)
    bad = (~near).nonzero().flatten().tolist()
    moved = []
    for row in bad:
        match = torch.isclose(expected, got[row], rtol=rtol, atol=atol).all(dim=1).nonzero().flatten().tolist()
        moved.append(match[0] if match else None)
    if all(source is not None for source in moved):
        pairs = ", ".join(f"row {row} holds the result of input row {source}" for row, source in list(zip(bad, moved))[:4])
        return f"rows are out of order: {pairs} (concatenate the microbatches in their original order)"
    row = bad[0]
    return (f"output row {row} (microbatch {row // split_size}) differs from the stages run in sequence "
            f"{differs(got[row], expected[row]).removeprefix('differs ')}")
