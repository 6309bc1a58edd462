"""Helpers of the Problem 2 check tests (tests/grader/checks/test_problem2*.py): run one check in
process along the grader's path, with the student's module patched for one test."""
from __future__ import annotations

import pytest
from grading_helpers import observe_and_judge

from grader.checks.judging import Fail
from grader.rubric import load_rubric

SEED = 7
CRITERIA = {c.id: c for c in load_rubric().criteria if c.check.startswith("problem2.")}
CHECKS = {c.name: c for c in CRITERIA.values()}


def run(name: str, pieces: str = "own", seed: int = SEED):
    """The check ``name`` (``"schedule"``, ``"forward"``, ...) on the (patched) answer key; a
    failure raises :class:`Fail`."""
    criterion = CHECKS[name]
    return observe_and_judge(criterion.check, None, seed, {**criterion.params, "pieces": pieces})


def fails(name: str, match: str, pieces: str = "own") -> Fail:
    with pytest.raises(Fail, match=match) as failure:
        run(name, pieces)
    return failure.value


def patcher(monkeypatch):
    """``student(name, value)``: replaces an attribute of the answer key's pipeline module for one
    test (the 2.2 checks' second run puts the grader's clock_cycles there: undone too)."""
    from minitorch import pipeline

    monkeypatch.setattr(pipeline, "clock_cycles", pipeline.clock_cycles)
    return lambda name, value: monkeypatch.setattr(pipeline, name, value)


def right_waves(m, k):
    """The right waves, one at a time."""
    for wave in range(m + k - 1 if m else 0):
        yield [(wave - j, j) for j in range(max(0, wave - m + 1), min(wave, k - 1) + 1)]
