"""CHILD side of 4.1: the student's ``one_f_one_b`` called on the cases, its results read as facts."""
from __future__ import annotations

from grader.checks.problem4 import reading
from grader.checks.problem4.one_f_one_b import cases


def _student():
    from minitorch import pipeline

    return pipeline.one_f_one_b


def _schedules(seed: int) -> dict:
    function = _student()
    return {"schedules": [{"case": case, **reading.read_schedule(function(*case))} for case in cases.cases(seed)],
            "fresh": [{"case": case, **reading.read_fresh(function, tuple(case))} for case in cases.FRESH]}


def observe_makespan(seed: int, params: dict) -> dict:
    """Every case's schedule, and each fresh-result case called twice."""
    return _schedules(seed)


def observe_peak(seed: int, params: dict) -> dict:
    """Every case's schedule (judged on its peak in-flight microbatches)."""
    function = _student()
    return {"schedules": [{"case": case, **reading.read_schedule(function(*case))} for case in cases.cases(seed)]}


def observe_arguments(seed: int, params: dict) -> dict:
    """What each valid call, then each bad call did (dicts keep this order)."""
    function = _student()
    return {"valid": [{"case": label, **reading.outcome(lambda args=args: function(*args))} for label, args in cases.VALID],
            "bad": [{"case": label, **reading.outcome(lambda args=args: function(*args))} for label, args in cases.BAD]}
