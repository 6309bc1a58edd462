"""The grader's own Problem 2 piece that a 2.2 check's child may put in place of the student's.

Every 2.2 criterion has ``fallback = "clock_cycles"`` in the rubric: it runs first with
``params["pieces"] == "own"`` (the student's ``Pipe`` with the student's own ``clock_cycles``)
and, only if that fails, again with ``"grader"``: then :func:`student_pipeline` puts the
grader's schedule into the submitted module (``Pipe.forward`` looks ``clock_cycles`` up by name
when it runs), so a mistake in 2.1 costs 2.1's criteria only. The parent judges against a
schedule of its own; this one is here only because the child must run it.
"""
from __future__ import annotations

from types import ModuleType

from grader.checks.recording import provided


def grader_clock_cycles(num_microbatches: int, num_stages: int):
    """The GPipe waves, each ``[(i, j), ...]`` with ``i + j == k`` by increasing stage ``j``."""
    for k in range(num_microbatches + num_stages - 1 if num_microbatches else 0):
        yield [(k - j, j) for j in range(max(0, k - num_microbatches + 1), min(k, num_stages - 1) + 1)]


def student_pipeline(params: dict) -> tuple[ModuleType, ModuleType]:
    """The submitted ``minitorch.pipeline`` (with the grader's ``clock_cycles`` in it when
    ``params["pieces"] == "grader"``) and the grader's copy of ``minitorch.runtime``."""
    import minitorch.pipeline as pipeline

    if params.get("pieces") == "grader":
        pipeline.clock_cycles = grader_clock_cycles
    return pipeline, provided("minitorch.runtime")
