"""CHILD side of 4.2: the student's ``interleaved_one_f_one_b`` called on the cases, its results
read as facts. With ``params["pieces"] == "grader"`` (the rubric's fallback, only after the
student's own pieces failed) the grader's ``one_f_one_b`` is bound in the student's module:
a builder that hands v = 1 on to its own ``one_f_one_b`` is then judged on 4.2's code alone."""
from __future__ import annotations

from grader.checks.problem4 import reading
from grader.checks.problem4.interleaved import cases
from grader.checks.problem4.pieces import grader_builders, grader_one_f_one_b


def _module():
    from minitorch import pipeline

    return pipeline


def observe_schedule(seed: int, params: dict) -> dict:
    """Every case's schedule, and each fresh-result case called twice."""
    student = _module()
    with grader_builders(student, {"one_f_one_b": grader_one_f_one_b}, params.get("pieces", "own")):
        function = student.interleaved_one_f_one_b
        return {"schedules": [{"case": case, **reading.read_schedule(function(*case))} for case in cases.cases(seed)],
                "fresh": [{"case": case, **reading.read_fresh(function, tuple(case))} for case in cases.FRESH]}


def observe_arguments(seed: int, params: dict) -> dict:
    """What each valid call, then each bad call did (dicts keep this order)."""
    student = _module()
    with grader_builders(student, {"one_f_one_b": grader_one_f_one_b}, params.get("pieces", "own")):
        function = student.interleaved_one_f_one_b
        return {
            "valid": [{"case": label, **reading.outcome(lambda args=args: function(*args))} for label, args in cases.VALID],
            "bad": [{"case": label, **reading.outcome(lambda args=args: function(*args))} for label, args in cases.BAD],
        }
