"""2.4-balance and 2.4-arguments, child side: calls the student's ``balance_stages`` (each call
under a CPU-time cut) and records what it returned (the values, their types, the container),
what it raised, and the caller's costs afterwards. Judged in ``judge.py``."""
from __future__ import annotations

import itertools
from typing import Any

from grader.checks.problem2.balance.cases import (
    ADMITTED,
    BAD_CALLS,
    CUT_SECONDS,
    FRESH_CASE,
    REUSED_CASE,
    TWIN_CALLS,
    admitted_call,
    bad_key,
    balance_cases,
    case_key,
)
from grader.checks.problem2.cpu_cut import call_with_cut
from grader.checks.problem2.recorded import error_message, error_text
from grader.checks.recording import integer_value


def _call(balance_stages, costs, num_stages, limit: int) -> tuple[dict, object]:
    """One call under the CPU cut: what it returned (its sizes as ints where they are integers, their
    types, the container) or raised, and the object it returned."""
    outcome = call_with_cut(lambda: balance_stages(costs, num_stages), CUT_SECONDS)
    entry: dict[str, Any] = {"error": error_text(outcome.error), "cut": outcome.cut, "type": None, "sizes": None, "kinds": []}
    if outcome.error is None and not outcome.cut:
        result = outcome.value
        entry["type"] = type(result).__name__
        try:
            items = list(itertools.islice(result, limit + 1))  # an endless iterator is cut off
        except TypeError:
            entry["sizes"] = repr(result)[:200]
        else:
            entry["sizes"] = [integer_value(n) if integer_value(n) is not None else repr(n)[:40] for n in items]
            entry["kinds"] = sorted({type(n).__name__ for n in items})
    return entry, outcome.value


def observe_balance(seed: int, params: dict):
    """Calls the student's ``balance_stages`` on every case of :func:`balance_cases` (each a new list),
    then twice with one list object whose costs change in between."""
    from minitorch.pipeline import balance_stages

    entries = [{"case": case_key(index, costs, k), **_call(balance_stages, list(costs), k, len(costs))[0]}
               for index, (costs, k) in enumerate(balance_cases(seed))]
    costs, k = list(REUSED_CASE[0]), REUSED_CASE[1]
    first, _ = _call(balance_stages, costs, k, len(costs))
    costs.reverse()
    again, _ = _call(balance_stages, costs, k, len(costs))
    return {"cases": entries, "reused": [first, again]}


def _admitted(balance_stages) -> list:
    """Each form of ADMITTED, and the same costs as a list of Python numbers."""
    entries = []
    for form, costs, k in ADMITTED:
        given, num_stages = admitted_call(form, costs, k)
        entry, result = _call(balance_stages, given, num_stages, len(costs))
        unchanged = list(given) == list(costs) if form != "generator" else True
        as_list, _ = _call(balance_stages, list(costs), k, len(costs))
        entries.append({"case": form, **entry, "aliased": result is given, "unchanged": bool(unchanged), "as_list": as_list})
    return entries


def _fresh(balance_stages) -> dict:
    """Two calls with equal arguments, the first result changed in between (a cache that hands out
    its own list shows), and the caller's list after each."""
    costs, k = FRESH_CASE
    given = list(costs)
    first, result = _call(balance_stages, given, k, len(costs))
    seen = {"first": first, "aliased": result is given, "unchanged": given == list(costs)}
    if isinstance(result, list):
        result.append(99)
        result[0] = -1
    second, again = _call(balance_stages, list(costs), k, len(costs))
    return {**seen, "second": second, "same_object": again is result and result is not None}


def observe_balance_arguments(seed: int, params: dict):
    """The forms of arguments the contract admits (their results, and the caller's costs after), two
    equal calls (is the result new each time?), then every bad call, each after a valid call equal
    to it (what it raised)."""
    from minitorch.pipeline import balance_stages

    admitted, fresh = _admitted(balance_stages), _fresh(balance_stages)
    for costs, k in TWIN_CALLS:
        call_with_cut(lambda costs=costs, k=k: balance_stages(list(costs), k), CUT_SECONDS)
    calls = []
    for costs, num_stages in BAD_CALLS:
        outcome = call_with_cut(lambda costs=costs, k=num_stages: balance_stages(list(costs), k), CUT_SECONDS)
        entry = {"case": bad_key(costs, num_stages), "error": None, "message": "", "cut": outcome.cut}
        if outcome.error is not None:
            entry["error"], entry["message"] = type(outcome.error).__name__, error_message(outcome.error)
        elif not outcome.cut:
            entry["message"] = f"returned {outcome.value!r}"[:300]
        calls.append(entry)
    return {"admitted": admitted, "fresh": fresh, "calls": calls}
