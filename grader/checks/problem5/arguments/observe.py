"""5.1-arguments and 5.2-arguments, CHILD side: what ``estimate`` and ``best_plan`` raise for
each call of :mod:`.cases`."""
from __future__ import annotations

from grader.checks.problem5.arguments.cases import BASE_CALLS, CLUSTER, MODEL, argument_cases, key
from grader.checks.problem5.plans import objects
from grader.checks.recording import describe


def record_calls(function: str) -> dict:
    """Per case: ``raised`` (the exception's type name, or None when the call returned),
    ``value_error`` (whether it is a ValueError) and, for a returned call, what it returned."""
    from minitorch import pipeline

    entries = []
    for case in argument_cases(function):
        label, name, overrides, _ = case
        arguments = {**BASE_CALLS[name], **overrides}
        model, cluster = objects(MODEL, CLUSTER, "argument case")
        entry: dict = {"case": key(case), "raised": None, "value_error": False, "returned": None}
        try:
            entry["returned"] = describe(getattr(pipeline, name)(model, cluster, **arguments))
        except NotImplementedError:  # a stub: the harness says which one
            raise
        except Exception as error:  # any type: the judge says which one it was
            entry.update(raised=type(error).__name__, value_error=isinstance(error, ValueError))
        entries.append(entry)
    return {"calls": entries}


def observe_estimate(seed: int, params: dict) -> dict:
    return record_calls("estimate")


def observe_best_plan(seed: int, params: dict) -> dict:
    return record_calls("best_plan")
