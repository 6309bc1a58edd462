"""CHILD side: the grader's 1F1B builder, the one piece a fallback run binds in the student's
module for 4.2 (and, with 4.4's own interleaved piece, for 4.4).

A piece handed to the student's code reaches its module's namespace: this module holds that
piece and the binding only, never an interleaved order (4.2's answer) nor anything the parent
judges with (``expected_orders.py``, parent side). Bound only where a criterion's
``params["pieces"]`` is ``"grader"`` (the rubric's ``fallback``, after the student's own
pieces failed).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

from grader.checks.recording import provided


def check_sizes(**sizes) -> None:
    """The contracts' ValueError: every size a Python int >= 1 (bools are not)."""
    for name, value in sizes.items():
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def as_actions(rows) -> list:
    """``(stage, kind, microbatch)`` rows as new lists of the provided ``Action``."""
    action = provided("minitorch.schedules").Action
    return [[action(*entry) for entry in row] for row in rows]


def one_f_one_b_rows(num_stages: int, num_microbatches: int) -> list:
    """The lecture's 1F1B order as ``(stage, kind, microbatch)`` rows: K - d - 1 warm-up
    forwards, then one forward one backward, then the backwards left."""
    rows = []
    for device in range(num_stages):
        warmup = min(num_stages - device - 1, num_microbatches)
        row = [(device, "F", m) for m in range(warmup)]
        for m in range(num_microbatches - warmup):
            row += [(device, "F", warmup + m), (device, "B", m)]
        rows.append(row + [(device, "B", m) for m in range(num_microbatches - warmup, num_microbatches)])
    return rows


def grader_one_f_one_b(num_stages: int, num_microbatches: int) -> list:
    """The grader's 1F1B builder: :func:`one_f_one_b_rows` as actions, with its contract's ValueError."""
    check_sizes(num_stages=num_stages, num_microbatches=num_microbatches)
    return as_actions(one_f_one_b_rows(num_stages, num_microbatches))


@contextlib.contextmanager
def grader_builders(student, builders: dict[str, Callable], pieces: str):
    """With ``pieces == "grader"``, ``builders`` (name: the grader's piece) bound in the
    student's module for the block, the student's put back afterwards whatever the block
    raised; with ``"own"`` (or none), the student's own functions untouched."""
    if pieces != "grader":
        yield
        return
    saved = {name: vars(student)[name] for name in builders if name in vars(student)}
    for name, builder in builders.items():
        setattr(student, name, builder)
    try:
        yield
    finally:
        for name in builders:
            if name in saved:
                setattr(student, name, saved[name])
            elif name in vars(student):
                delattr(student, name)
