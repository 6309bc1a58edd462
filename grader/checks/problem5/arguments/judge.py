"""5.1-arguments and 5.2-arguments, PARENT side: a ValueError at the call for every argument
outside the contract, and none inside it (convention criteria: the exception's class, 1 point
each)."""
from __future__ import annotations

from grader.checks.judging import Fail, expect_cases
from grader.checks.problem5.arguments.cases import argument_cases, key

WHY = {
    "t=3": "t p = 6 does not divide the 16 GPUs", "p=8": "p does not divide the 12 layers",
    "p=5": "p does not divide the 12 layers", "t=8": "t does not divide the 12 heads",
    "batch=20": "the batch does not split into d = 4 shares of whole microbatches",
    "batch=33": "the batch does not split into d = 4 shares of whole microbatches",
    "microbatch=3": "the batch does not split into d = 4 shares of whole microbatches",
}
CONTRACT = {"estimate": "ints >= 1, a bool or a numpy integer is not one, and a valid plan",
            "best_plan": "ints >= 1, a bool or a numpy integer is not one"}
INSIDE = {"estimate": "ints >= 1, a valid plan", "best_plan": "ints >= 1"}


def _why(label: str, name: str) -> str:
    return WHY.get(label, "not an int >= 1") if name == "estimate" else "not an int >= 1"


def judge_calls(function: str, observation) -> None:
    cases = argument_cases(function)
    for case, entry in zip(cases, expect_cases(observation["calls"], [key(case) for case in cases], "argument errors")):
        label, name, _, valid = case
        if valid:
            if entry["raised"] is not None:
                raise Fail(f"{name}(model, cluster, ...) with {label} raised {entry['raised']}, but these arguments "
                           f"are inside the contract ({INSIDE[name]}): expected a result")
            continue
        if entry["value_error"]:
            continue
        outcome = f"returned {entry['returned']}" if entry["raised"] is None else f"raised {entry['raised']}"
        bad = label.split("=", 1)[0]
        raise Fail(f"{name}(model, cluster, ...) with {label} {outcome}; expected ValueError at the call "
                   f"({bad}: {_why(label, name)}; the contract: {CONTRACT[name]})")


def judge_estimate(seed: int, params: dict, observation) -> None:
    judge_calls("estimate", observation)


def judge_best_plan(seed: int, params: dict, observation) -> None:
    judge_calls("best_plan", observation)
