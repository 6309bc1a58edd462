"""5.2, PARENT side: the plan best_plan returned against the fastest valid plan that fits, by
the grader's own cost model (the student's own ``estimate``) or by the stand-in's tables (the
grader's ``estimate``: ``params["pieces"]``, see the rubric's ``fallback``)."""
from __future__ import annotations

from grader.checks.judging import Fail, Malformed, expect_cases
from grader.checks.problem5.best_plan import cases as own_cases
from grader.checks.problem5.best_plan import stand_in
from grader.checks.problem5.expected import acceptable_best, memory, reference_plans, step
from grader.checks.problem5.judge_common import RELATIVE, close, describe, value
from grader.checks.problem5.plans import COUNT_FIELDS, MEMORY_FIELDS


def _plan_words(values: dict) -> str:
    fits = "" if memory(values) <= values["memory_limit"] else ", does not fit"
    return f"t = {values['t']}, p = {values['p']} ({step(values):.6g} s, {memory(values):,.0f} bytes{fits})"


def _judge_search(call: str, entry, plans: list[dict], exact: bool, why_none: str) -> None:
    """``entry`` (what best_plan returned) against ``plans`` (every valid plan's fields)."""
    best = acceptable_best(plans)
    if not best:
        if not entry["none"]:
            raise Fail(f"{call} returned an Estimate, but {why_none}: expected None")
        return
    fastest = next(v for v in plans if (v["t"], v["p"]) == best[0])
    expected = f"the fastest valid plan that fits is {_plan_words(fastest)}"
    if entry["none"]:
        raise Fail(f"{call} returned None, but plans fit: {expected}")
    if not entry["estimate"]:
        raise Fail(f"{call} returned {entry['returned']} where a minitorch.cost_model.Estimate or None was expected")
    chosen = (value(entry["fields"], "t", call), value(entry["fields"], "p", call))
    if chosen not in best:
        detail = next((_plan_words(v) for v in plans if (v["t"], v["p"]) == chosen), "not a valid plan")
        raise Fail(f"{call} returned t = {chosen[0]}, p = {chosen[1]} ({detail}); {expected}")
    mine = next(v for v in plans if (v["t"], v["p"]) == chosen)
    for field, want in mine.items():
        got = value(entry["fields"], field, call)
        same = got == want if exact or field in COUNT_FIELDS else close(got, want, _scale(mine, field))
        if not same:
            raise Fail(f"{call} returned the plan t = {chosen[0]}, p = {chosen[1]}, but its Estimate's {field} is "
                       f"{got!r} where estimate gives {want!r} for that plan: return the Estimate of the plan")


def _scale(values: dict, field: str) -> float:
    return values["memory_limit"] if field in MEMORY_FIELDS else step(values)


def judge_best_plan(seed: int, params: dict, observation) -> None:
    if params.get("pieces", "grader") == "own":
        _judge_own(seed, observation)
    else:
        _judge_stand_in(seed, observation)


def _judge_own(seed: int, observation) -> None:
    cases = own_cases.search_cases(seed)
    keys = [own_cases.key(index, case) for index, case in enumerate(cases)]
    seeded = len(own_cases.FIXED) + 1
    calls = [f"{describe(case, 'best_plan')} [{case['name']}]" for case in cases]
    for index, (case, entry) in enumerate(zip(cases, expect_cases(observation["searches"], keys, "best_plan"))):
        plans = reference_plans(case["model"], case["cluster"], case["batch"], case["microbatch"])
        if index >= seeded and _undecided(plans):
            continue  # a seeded limit within the estimate's tolerance of a plan's memory decides nothing
        why_none = "no plan is valid" if not plans else f"none of the {len(plans)} valid plans fits"
        _judge_search(calls[index], entry, plans, False, why_none)
        _judge_fresh(index, entry, calls)


def _undecided(plans: list[dict]) -> bool:
    return any(abs(memory(v) - v["memory_limit"]) <= 10 * RELATIVE * v["memory_limit"] for v in plans)


def _judge_stand_in(seed: int, observation) -> None:
    cases = stand_in.search_cases()
    keys = [stand_in.key(index, case) for index, case in enumerate(cases)]
    calls = [f"{describe(case, 'best_plan')} with the grader's estimate in place of yours [{case['design']}]"
             for case in cases]
    for index, (case, entry) in enumerate(zip(cases, expect_cases(observation["searches"], keys, "best_plan"))):
        table = stand_in.designed_table(seed, index, case)
        why_none = "no plan is valid" if not table else f"none of the {len(table)} valid plans fits"
        _judge_search(calls[index], entry, list(table.values()), True, why_none)
        _judge_fresh(index, entry, calls)


def _judge_fresh(index: int, entry, calls: list[str]) -> None:
    """The Estimate a search returns is not one an earlier call returned: none is kept between calls."""
    earlier = entry["same_as"]
    if earlier is None:
        return
    if type(earlier) is not int or not 0 <= earlier < index:
        raise Malformed(f"best_plan: search {index} came back naming search {earlier!r} as an earlier one")
    raise Fail(f"{calls[index]} returned the very Estimate object that an earlier call returned ({calls[earlier]}): "
               "a result kept between calls; the contract keeps no state between calls, and the Estimate is the one "
               "estimate returns for the plan when best_plan runs")

