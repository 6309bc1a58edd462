"""2.4-balance and 2.4-arguments, parent side: every split against the least slowest stage found
the judge's own way (``expected.py``: exact arithmetic; ties may go either way), and the
conventions: the argument forms the contract admits, a new list of Python ints on every call, the
caller's costs untouched, ValueError at the call. Observed in ``observe.py``."""
from __future__ import annotations

from grader.checks.judging import Fail, expect_cases
from grader.checks.problem2.balance.cases import (
    ADMITTED,
    BAD_CALLS,
    CUT_SECONDS,
    FRESH_CASE,
    REUSED_CASE,
    bad_key,
    balance_cases,
    case_key,
)
from grader.checks.problem2.balance.expected import exact_costs, least_slowest_stage, stage_costs


def _costs_text(costs) -> str:
    text = "[" + ", ".join(f"{c:.6g}" if isinstance(c, float) else repr(c) for c in costs) + "]"
    return text if len(text) <= 240 else text[:237] + "...]"


def _judge_split(call: str, costs: list, num_stages: int, entry) -> None:
    """The split ``entry`` holds is K non-empty consecutive stages of every layer, and optimal."""
    if entry["cut"]:
        raise Fail(f"{call} was still running after {CUT_SECONDS:g} s of CPU time (the contract's sizes need "
                   "milliseconds): does a search stop only when two costs are closer than a fixed tolerance? Costs of "
                   "other scales (FLOPs near 1e12, seconds near 1e-6) never get there, or stop at once")
    if entry["error"] is not None:
        raise Fail(f"{call} raised {entry['error']}; expected a split into {num_stages} stages")
    sizes = entry["sizes"]
    if not isinstance(sizes, list) or not all(type(n) is int for n in sizes):
        raise Fail(f"{call} returned {entry['type']} {sizes}; expected a list of {num_stages} ints (layers per stage)")
    if len(sizes) != num_stages or min(sizes, default=0) < 1 or sum(sizes) != len(costs):
        raise Fail(f"{call} returned {sizes}; expected {num_stages} stages of at least one layer each, {len(costs)} "
                   "layers in all")
    exact, scale = exact_costs(costs)
    least, example = least_slowest_stage(exact, num_stages)
    stages = stage_costs(exact, sizes)
    slowest = max(stages)
    if slowest - least > 1e-9 * (sum(exact) or scale):  # the student's float sums may round a tie either way
        stage = stages.index(slowest)
        first = sum(sizes[:stage])
        raise Fail(f"{call} returned {sizes}: its slowest stage, stage {stage} (layers {first}-{first + sizes[stage] - 1}), "
                   f"costs {slowest / scale:.6g}; the least possible is {least / scale:.6g}, e.g. {example}")


def judge_balance(seed: int, params: dict, observation) -> None:
    """Every split is K non-empty consecutive stages of all the layers whose slowest stage is the
    least possible; a list object whose costs changed between two calls gets the new answer."""
    cases = balance_cases(seed)
    entries = expect_cases(observation["cases"], [case_key(i, costs, k) for i, (costs, k) in enumerate(cases)],
                           "balance_stages")
    for index, ((costs, num_stages), entry) in enumerate(zip(cases, entries)):
        _judge_split(f"balance_stages({_costs_text(costs)}, {num_stages}) (case {index})", costs, num_stages, entry)
    costs, k = REUSED_CASE
    first, again = observation["reused"][0], observation["reused"][1]
    _judge_split(f"balance_stages({_costs_text(costs)}, {k})", costs, k, first)
    _judge_split(f"balance_stages(costs, {k}) called again with the same list object, its costs now reversed "
                 f"({_costs_text(costs[::-1])}): each call depends only on its arguments' values", costs[::-1], k, again)


def _judge_container(call: str, entry) -> None:
    if entry["type"] != "list":
        raise Fail(f"{call} returned a {entry['type']}; expected a new list")
    if entry["kinds"] not in ([], ["int"]):
        raise Fail(f"{call} returned sizes of type {', '.join(entry['kinds'])} ({entry['sizes']}); expected Python ints")


def _slowest(costs: list, sizes) -> int | None:
    """The largest stage cost of ``sizes`` (exact, over :func:`exact_costs`' denominator), or None
    when ``sizes`` is not a split of ``costs`` into non-empty consecutive stages."""
    if not isinstance(sizes, list) or not all(type(n) is int and n >= 1 for n in sizes) or sum(sizes) != len(costs):
        return None
    return max(stage_costs(exact_costs(costs)[0], sizes))


def _judge_like(call: str, costs: list, entry, twin: str, other) -> None:
    """``entry`` holds a split as slow as the one ``other`` (the call ``twin``) holds: admitted forms
    and repeated calls give what a list of the same costs gets, right or wrong (whether that is
    the least possible is 2.4-balance's; ties may break either way)."""
    theirs = None if other["cut"] or other["error"] is not None else _slowest(costs, other["sizes"])
    if theirs is None:
        return  # a list of the same costs fails too: 2.4-balance's
    if entry["cut"] or entry["error"] is not None:
        what = f"raised {entry['error']}" if entry["error"] is not None else f"was still running after {CUT_SECONDS:g} s"
        raise Fail(f"{call} {what}; the contract admits it ({twin} returned {other['sizes']})")
    exact, scale = exact_costs(costs)
    mine = _slowest(costs, entry["sizes"])
    if mine is None or abs(mine - theirs) > 1e-9 * (sum(exact) or scale):
        raise Fail(f"{call} returned {entry['sizes']}; {twin} returned {other['sizes']}: the same costs must get an "
                   "equally good split")


def judge_balance_arguments(seed: int, params: dict, observation) -> None:
    """The argument forms the contract admits give the split a list of the same costs gets; every
    result is a new list of Python ints, never the caller's sequence nor an earlier result; the
    caller's costs stay as they were; every bad argument raises ValueError at the call, even right
    after a valid call equal to it."""
    admitted = expect_cases(observation["admitted"], [form for form, _, _ in ADMITTED], "balance_stages with other argument types")
    for (form, costs, k), entry in zip(ADMITTED, admitted):
        twin = f"balance_stages({_costs_text(costs)}, {k})"
        call = (f"balance_stages({_costs_text(costs)}, numpy.int64({k}))" if form.startswith("num_stages")
                else f"balance_stages({_costs_text(costs)} as a {form}, {k})")
        _judge_like(call, costs, entry, f"{twin} as a list", entry["as_list"])
        _judge_container(call, entry)
        if entry["aliased"] or not entry["unchanged"]:
            raise Fail(f"{call} {'returned' if entry['aliased'] else 'changed'} the caller's costs; the contract leaves "
                       "them as they were and returns a new list")
    fresh = observation["fresh"]
    costs, k = FRESH_CASE
    call = f"balance_stages({_costs_text(costs)}, {k})"
    if fresh["first"]["error"] is None and not fresh["first"]["cut"]:
        _judge_container(call, fresh["first"])
    if fresh["aliased"] or not fresh["unchanged"]:
        raise Fail(f"{call} {'returned' if fresh['aliased'] else 'changed'} the caller's costs; the contract leaves them "
                   "as they were and returns a new list (work on a copy)")
    if fresh["same_object"]:
        raise Fail(f"{call} called twice returned the same list object both times (a cache?): a caller that changes "
                   "its result would change the next caller's. Return a new list on every call")
    _judge_like(f"{call} called again after the caller changed the first result", costs, fresh["second"], "the first call",
                fresh["first"])
    for entry in expect_cases(observation["calls"], [bad_key(costs, k) for costs, k in BAD_CALLS],
                              "balance_stages with bad arguments"):
        call = f"balance_stages({entry['case'][0]}, {entry['case'][1]})"
        if entry["cut"]:
            raise Fail(f"{call} was still running after {CUT_SECONDS:g} s of CPU time; expected ValueError at the call")
        if entry["error"] is None:
            raise Fail(f"{call} {entry['message']}; expected ValueError (see the contract: finite real costs >= 0, an int "
                       "1 <= K <= len(costs)), also right after a valid call equal to it")
        if entry["error"] != "ValueError":
            raise Fail(f"{call} raised {entry['error']}: {entry['message']}; expected ValueError")
