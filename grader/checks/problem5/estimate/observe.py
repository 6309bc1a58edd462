"""5.1, CHILD side: the student's ``estimate`` of every plan of :mod:`.cases`, recorded as
plain numbers with their kinds. The four criteria of 5.1 observe the same calls; each judge
reads its own fields."""
from __future__ import annotations

from grader.checks.problem5.estimate.cases import key, plan_cases
from grader.checks.problem5.plans import objects, read_estimate


def call_estimate(estimate, case: dict):
    """``estimate`` called on ``case`` the way the case says (positional, keywords, default)."""
    model, cluster = objects(case["model"], case["cluster"])
    batch, t, p, microbatch = case["batch"], case["t"], case["p"], case["microbatch"]
    if case["call"] == "keywords":
        return estimate(model=model, cluster=cluster, batch=batch, t=t, p=p, microbatch=microbatch)
    if case["call"] == "default":
        return estimate(model, cluster, batch, t, p)
    return estimate(model, cluster, batch, t, p, microbatch)


def record_estimates(seed: int) -> dict:
    """Per case: what ``estimate`` returned (see ``read_estimate``), or the ValueError it raised,
    and ``same_as``: the index of an earlier case whose call returned the very same object (None
    when none did). Other exceptions propagate: the harness reports them with the student's traceback."""
    from minitorch import pipeline

    entries: list[dict] = []
    returned: list[tuple] = []  # (index, Estimate): kept alive, so no identity is reused
    for index, case in enumerate(plan_cases(seed)):
        entry: dict = {"case": key(index, case), "raised": None, "same_as": None}
        try:
            result = call_estimate(pipeline.estimate, case)
        except ValueError as error:
            entry["raised"] = {"type": type(error).__name__, "message": str(error)[:300]}
        else:
            entry.update(read_estimate(result))
            if entry["estimate"]:
                entry["same_as"] = next((earlier for earlier, value in returned if value is result), None)
                returned.append((index, result))
        entries.append(entry)
    return {"plans": entries}


def observe_memory(seed: int, params: dict) -> dict:
    return record_estimates(seed)


def observe_compute_bubble(seed: int, params: dict) -> dict:
    return record_estimates(seed)


def observe_communication(seed: int, params: dict) -> dict:
    return record_estimates(seed)


def observe_kinds(seed: int, params: dict) -> dict:
    return record_estimates(seed)
