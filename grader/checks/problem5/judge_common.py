"""What Problem 5's judges share (PARENT side only): how a call reads in a message, and the
reading of an observed estimate's fields."""
from __future__ import annotations

import math

from grader.checks.judging import Fail
from grader.checks.problem5.plans import CLUSTER_FIELDS, MODEL_FIELDS

RELATIVE = 1e-6  # the contract's tolerance per term
ZERO = 1e-9  # a zero term: within this share of the step time (or of the memory limit)


def describe(case: dict, call: str = "estimate") -> str:
    """The call a case stands for, in the student's terms."""
    model = ", ".join(f"{k}={case['model'][k]}" for k in MODEL_FIELDS)
    cluster = ", ".join(f"{k}={case['cluster'][k]:.4g}" for k in CLUSTER_FIELDS)
    plan = f", t={case['t']}, p={case['p']}" if "t" in case else ""
    microbatch = "" if case.get("call") == "default" else f", microbatch={case['microbatch']}"
    return f"{call}(Model({model}), Cluster({cluster}), batch={case['batch']}{plan}{microbatch})"


def close(got, expected: float, scale: float) -> bool:
    """Within the contract's tolerance: relative 1e-6, or for a zero term 1e-9 of ``scale``."""
    if type(got) not in (int, float) or not math.isfinite(got):
        return False
    if expected == 0:
        return abs(got) <= ZERO * scale
    return abs(got - expected) <= RELATIVE * abs(expected)


def returned_estimate(entry, call: str) -> dict:
    """The observed fields of an estimate (``{field: {"value", "kind", "shown"}}``), or Fail
    saying what came back instead."""
    if entry["raised"] is not None:
        raised = entry["raised"]
        raise Fail(f"{call} raised {raised['type']} ({raised['message']}), but the plan is valid")
    if not entry["estimate"]:
        raise Fail(f"{call} returned {entry['returned']} where a minitorch.cost_model.Estimate was expected")
    return entry["fields"]


def value(fields, field: str, call: str):
    """A field's value as a plain number, or Fail naming what it is instead."""
    found = fields[field]
    if found["value"] is None:
        raise Fail(f"{call} returned an Estimate whose {field} is {found['shown']}, not a number")
    return found["value"]
