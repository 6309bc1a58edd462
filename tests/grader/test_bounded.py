"""Every judge runs under a time bound of its own: an observation that makes a judge's
comparisons run for minutes is the student's failure with a clear message, never a stuck grader."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from grader import grading
from grader.bounded import TooSlow, bounded
from grader.checks import selftest
from grader.rubric import load_rubric


def spin() -> None:
    while True:
        pass


def test_a_bounded_call_is_stopped_and_nothing_reaches_the_caller_later():
    started = time.monotonic()
    with pytest.raises(TooSlow):
        bounded(spin, 0.3)
    assert time.monotonic() - started < 5
    assert bounded(lambda: 42, 0.2) == 42
    time.sleep(0.4)  # a timer that fired after the call returned must not raise here


def test_a_judges_own_except_exception_cannot_swallow_the_bound():
    def stubborn() -> None:
        while True:
            try:
                spin()
            except Exception:  # noqa: BLE001 - what a judge might do
                pass

    with pytest.raises(TooSlow):
        bounded(stubborn, 0.3)


def test_a_judge_that_runs_past_its_bound_fails_the_criterion_for_review(monkeypatch):
    monkeypatch.setattr(grading, "JUDGE_SECONDS", 0.5)
    monkeypatch.setattr(selftest, "judge_pieces", lambda seed, params, observation: spin())
    criterion = replace(load_rubric().criteria[0], check="selftest:pieces", params={})
    status, message, details = grading.judge_observation(criterion, 1, {"pieces": "own"})
    assert status == "failed" and "did not finish within 0.5 s" in message
    assert grading.JUDGE_ERROR in details  # the report flags it for review
