"""5.2, CHILD side: what the student's ``best_plan`` returns. ``params["pieces"]`` says with
which ``estimate`` (see the rubric's ``fallback``): ``"own"``, the student's own, on the real
searches of :mod:`.cases`; ``"grader"`` (the default), the stand-in of :mod:`.stand_in` bound
as the student module's ``estimate`` for each call, on its designed searches."""
from __future__ import annotations

from grader.checks.problem5.best_plan import cases as own_cases
from grader.checks.problem5.best_plan import stand_in
from grader.checks.problem5.plans import objects, read_estimate
from grader.checks.recording import provided


def call_best_plan(best_plan, case: dict):
    """``best_plan`` called on ``case`` the way the case says (positional, keywords, default)."""
    model, cluster = objects(case["model"], case["cluster"])
    if case["call"] == "keywords":
        return best_plan(model=model, cluster=cluster, batch=case["batch"], microbatch=case["microbatch"])
    if case["call"] == "default":
        return best_plan(model, cluster, case["batch"])
    return best_plan(model, cluster, case["batch"], case["microbatch"])


def _returned(value, index: int, kept: list) -> dict:
    """``value`` (what search ``index`` returned) read as plain data; ``same_as``: the index of the
    earlier search that returned the very same object (None when none did). ``kept`` holds the
    (index, Estimate) returned so far, alive, so no identity is reused."""
    if value is None:
        return {"none": True, "same_as": None}
    same_as = next((earlier for earlier, returned in kept if returned is value), None)
    kept.append((index, value))
    return {"none": False, "same_as": same_as, **read_estimate(value)}


def observe_best_plan(seed: int, params: dict) -> dict:
    """Per case, what best_plan returned: ``{"none": True}`` or an Estimate read as plain data."""
    from minitorch import pipeline

    kept: list = []
    if params.get("pieces", "grader") == "own":
        searches = own_cases.search_cases(seed)
        return {"searches": [{"case": own_cases.key(index, case),
                              **_returned(call_best_plan(pipeline.best_plan, case), index, kept)}
                             for index, case in enumerate(searches)]}
    estimate_class = provided("minitorch.cost_model").Estimate
    submitted = pipeline.estimate
    entries = []
    try:
        for index, case in enumerate(stand_in.search_cases()):
            pipeline.estimate = stand_in.stand_in_estimate(seed, index, case, estimate_class)
            entries.append({"case": stand_in.key(index, case),
                            **_returned(call_best_plan(pipeline.best_plan, case), index, kept)})
    finally:
        pipeline.estimate = submitted
    return {"searches": entries}
