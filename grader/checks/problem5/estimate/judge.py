"""5.1, PARENT side: each field of the student's estimates against the grader's own cost
model (:mod:`grader.checks.problem5.expected`), and the kinds the contract states."""
from __future__ import annotations

import math

from grader.checks.judging import Fail, Malformed, expect_cases
from grader.checks.problem5.estimate.cases import key, plan_cases
from grader.checks.problem5.expected import reference, step
from grader.checks.problem5.judge_common import RELATIVE, close, describe, returned_estimate, value
from grader.checks.problem5.plans import COMMUNICATION_FIELDS, COMPUTE_FIELDS, COUNT_FIELDS, MEMORY_FIELDS


def _entries(seed: int, observation, what: str, raised_too: bool = True) -> list[tuple[dict, dict, str]]:
    """(case, observed fields, the call in words) for every case, in order; without
    ``raised_too``, the cases whose call raised are left out (another criterion's mistake)."""
    cases = plan_cases(seed)
    entries = expect_cases(observation["plans"], [key(i, case) for i, case in enumerate(cases)], what)
    return [(case, returned_estimate(entry, describe(case)), f"{describe(case)} [{case['name']}]")
            for case, entry in zip(cases, entries) if raised_too or entry["raised"] is None]


def _own_counts(fields) -> tuple[int, int] | None:
    """The submission's (d, m) when they are whole numbers >= 1, else None (the grader's own)."""
    d, m = fields["d"]["value"], fields["microbatches"]["value"]
    if all(type(v) in (int, float) and math.isfinite(v) and v >= 1 and v == int(v) for v in (d, m)):
        return int(d), int(m)
    return None


def _link(case: dict) -> str:
    node = case["cluster"]["gpus_per_node"]
    return f"; t = {case['t']} {'spans nodes' if case['t'] > node else 'fits in a node'} of {node} GPUs"


def _judge_fields(seed: int, observation, fields: tuple, own_counts: bool, what: str) -> None:
    for case, got, call in _entries(seed, observation, what):
        counts = _own_counts(got) if own_counts else None
        want = reference(case["model"], case["cluster"], case["batch"], case["t"], case["p"], case["microbatch"], counts)
        for field in fields:
            scale = want["memory_limit"] if field.endswith("bytes") or field == "memory_limit" else step(want)
            found = value(got, field, call)
            if not close(found, want[field], scale):
                given = f" (with your d = {counts[0]}, m = {counts[1]})" if counts else ""
                if field == "tensor_parallel_s":
                    given += _link(case)
                raise Fail(f"{call}: {field} = {found!r}, the cost model gives {want[field]:.6g}{given}; "
                           f"each term must be within relative {RELATIVE:g}")


def judge_memory(seed: int, params: dict, observation) -> None:
    _judge_fields(seed, observation, MEMORY_FIELDS, True, "estimate's memory")


def judge_compute_bubble(seed: int, params: dict, observation) -> None:
    for case, got, call in _entries(seed, observation, "estimate's compute and bubble"):
        want = reference(case["model"], case["cluster"], case["batch"], case["t"], case["p"], case["microbatch"])
        for field in COUNT_FIELDS:
            if value(got, field, call) != want[field]:
                raise Fail(f"{call}: {field} = {got[field]['value']!r}, expected {want[field]}")
    _judge_fields(seed, observation, COMPUTE_FIELDS, False, "estimate's compute and bubble")


def judge_communication(seed: int, params: dict, observation) -> None:
    _judge_fields(seed, observation, COMMUNICATION_FIELDS, True, "estimate's communication")


def judge_kinds(seed: int, params: dict, observation) -> None:
    """A new Estimate at each call; t, p, d and microbatches are ints (a bool is not one), every
    other field a float."""
    judged = _entries(seed, observation, "estimate's kinds", raised_too=False)
    if not judged:
        raise Fail("estimate raised ValueError for every valid plan the grader tried: no Estimate to judge")
    _judge_fresh(seed, observation)
    for _, got, call in judged:
        for field, found in got.items():
            wanted = "int" if field in COUNT_FIELDS else "float"
            if not _is_kind(found["kind"], wanted):
                raise Fail(f"{call}: {field} = {found['value']!r} is of type {found['kind']}; the contract makes "
                           f"{'t, p, d and microbatches ints' if wanted == 'int' else 'every field but the counts a float'}")


def _judge_fresh(seed: int, observation) -> None:
    """A call repeated with equal arguments returns a new object, not the one the first call
    returned (kept between calls). Where an object comes back for other arguments too, the kept
    result is a wrong value: the criteria of the values judge that mistake, this one does not."""
    cases = plan_cases(seed)
    repeats = []
    for index, (case, entry) in enumerate(zip(cases, observation["plans"])):
        earlier = entry["same_as"]
        if earlier is None:
            continue
        if type(earlier) is not int or not 0 <= earlier < index:
            raise Malformed(f"estimate's kinds: case {index} came back naming case {earlier!r} as an earlier one")
        if _arguments(cases[earlier]) != _arguments(case):
            return
        repeats.append(case)
    if repeats:
        raise Fail(f"{describe(repeats[0])} [{repeats[0]['name']}] returned the very Estimate object that the same "
                   "call returned earlier: a result kept between calls; the contract keeps no state between calls, so "
                   "each call returns a new Estimate")


def _arguments(case: dict) -> tuple:
    return tuple(repr(case[k]) for k in ("model", "cluster", "batch", "t", "p", "microbatch"))


def _is_kind(kind: str, wanted: str) -> bool:
    """A plain int (a bool is not one), or a float (numpy's float64 is one: it is a float)."""
    return kind == "int" if wanted == "int" else kind in ("float", "numpy.float64")
