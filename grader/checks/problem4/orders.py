"""The grader's own schedule orders and builders, shared by both sides (never the answer key).

The parent judges schedules against these orders; the child binds the builders in the
student's module in place of the student's schedule functions where a criterion's
``params["pieces"]`` is ``"grader"`` (the rubric's ``fallback``: 4.2 judged with the grader's
1F1B, 4.4 with both builders, only where the student's own pieces fail).
"""
from __future__ import annotations

import contextlib

from grader.checks.recording import provided


def reference_one_f_one_b(num_stages: int, num_microbatches: int) -> list:
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


def reference_interleaved(num_stages: int, num_microbatches: int, num_chunks: int) -> list:
    """Megatron-LM's interleaved order as ``(stage, kind, microbatch)`` rows (``v = 1``: 1F1B)."""
    if num_chunks == 1:
        return reference_one_f_one_b(num_stages, num_microbatches)
    K, v, total = num_stages, num_chunks, num_microbatches * num_chunks

    def kth(k: int, device: int, kind: str) -> tuple:
        group, rest = divmod(k, K * v)
        chunk = rest // K if kind == "F" else v - 1 - rest // K
        return (chunk * K + device, kind, group * K + rest % K)

    rows = []
    for device in range(K):
        warmup = min(2 * (K - device - 1) + (v - 1) * K, total)
        row = [kth(k, device, "F") for k in range(warmup)]
        for k in range(total - warmup):
            row += [kth(warmup + k, device, "F"), kth(k, device, "B")]
        rows.append(row + [kth(k, device, "B") for k in range(total - warmup, total)])
    return rows


def _check_sizes(**sizes) -> None:
    """The contract's ValueError: every size a Python int >= 1 (bools are not)."""
    for name, value in sizes.items():
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _as_actions(rows: list) -> list:
    action = provided("minitorch.schedules").Action
    return [[action(*entry) for entry in row] for row in rows]


def grader_one_f_one_b(num_stages: int, num_microbatches: int) -> list:
    """The grader's 1F1B builder, with its contract's ValueError."""
    _check_sizes(num_stages=num_stages, num_microbatches=num_microbatches)
    return _as_actions(reference_one_f_one_b(num_stages, num_microbatches))


def grader_interleaved(num_stages: int, num_microbatches: int, num_chunks: int) -> list:
    """The grader's interleaved builder, with its contract's ValueError (M a multiple of K)."""
    _check_sizes(num_stages=num_stages, num_microbatches=num_microbatches, num_chunks=num_chunks)
    if num_microbatches % num_stages:
        raise ValueError(f"num_microbatches ({num_microbatches}) must be a multiple of num_stages ({num_stages})")
    return _as_actions(reference_interleaved(num_stages, num_microbatches, num_chunks))


BUILDERS = {"one_f_one_b": grader_one_f_one_b, "interleaved_one_f_one_b": grader_interleaved}


@contextlib.contextmanager
def grader_builders(student, names: tuple[str, ...], pieces: str):
    """With ``pieces == "grader"``, the grader's builders bound in the student's module in
    place of ``names`` for the block, the student's put back afterwards whatever the block
    raised; with ``"own"`` (or none), the student's own functions untouched."""
    if pieces != "grader":
        yield
        return
    saved = {name: vars(student)[name] for name in names if name in vars(student)}
    for name in names:
        setattr(student, name, BUILDERS[name])
    try:
        yield
    finally:
        for name in names:
            if name in saved:
                setattr(student, name, saved[name])
            elif name in vars(student):
                delattr(student, name)
