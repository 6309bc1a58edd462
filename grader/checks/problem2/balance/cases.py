"""The calls of 2.4-balance and 2.4-arguments, shared by the child (which makes them) and the parent
(which judges exactly these). Every rule of the contract has cases on both sides, every run;
seeded random cost vectors come on top."""
from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

OUTPUT_LAYER = 3.3  # the lecture's anchor: the output layer costs about 3.3 ordinary layers
LECTURE = [1] * 7 + [OUTPUT_LAYER]
RANDOM_CASES = 36
MAX_LAYERS, MAX_STAGES = 64, 16  # the contract's largest sizes
CUT_SECONDS = 1.0  # CPU seconds one call may take before the child stops it (the contract's sizes need milliseconds)


def _shared(rng: random.Random) -> list[float]:
    return [round(rng.uniform(0.1, 4), 3) for _ in range(9)]


def balance_cases(seed: int) -> list[tuple[list, int]]:
    """(costs, num_stages) for 2.4-balance, each passed as a new list: the lecture's case and its
    mirror image (same sizes, another answer: a cache keyed on the sizes shows), one layer, one
    stage, a stage per layer, all zeros, all equal (ties everywhere), integer-valued floats, costs
    of other scales (FLOPs, seconds, huge ints, one layer far larger than the rest), the largest
    sizes, one cost vector split on every K, then seeded random vectors."""
    rng = random.Random(seed * 2_000_003 + 24)
    cases: list[tuple[list, int]] = [
        (LECTURE, 4), (LECTURE[::-1], 4), ([5], 1), ([0, 0, 0, 0], 2), ([2.5, 0, 0, 7], 4), ([2] * 9, 4),
        ([1.5] * 6, 6), ([3.0, 1.0, 2.0, 2.0, 4.0], 3), ([c * 2.54e12 for c in LECTURE], 3),
        ([c * 1e-6 for c in (3, 1, 4, 1, 5, 9, 2, 6)], 4), ([10**20, 1, 10**20 + 7, 3, 10**19], 3),
        ([1e-3] * 5 + [1e9] + [1e-3] * 5, 3), ([0.1 * (i % 7) + 1 for i in range(MAX_LAYERS)], MAX_STAGES),
        ([rng.uniform(0, 5) for _ in range(MAX_LAYERS)], 1), ([rng.randint(0, 9) for _ in range(MAX_STAGES)], MAX_STAGES),
    ]
    shared = _shared(rng)
    cases += [(shared, k) for k in (3, 1, 9, 2, 5)]
    for _ in range(RANDOM_CASES):
        layers = rng.randint(2, 20)
        kind = rng.choice(("transformer", "ints", "floats", "heavy"))
        if kind == "transformer":
            costs = [round(rng.uniform(0.9, 1.1), 4) for _ in range(layers - 1)] + [round(rng.uniform(2.5, 4), 2)]
        elif kind == "ints":
            costs = [rng.choice((0, 1, 2, 3, 5, 8)) for _ in range(layers)]
        elif kind == "floats":
            costs = [rng.uniform(0, 10) for _ in range(layers)]
        else:
            costs = [rng.expovariate(1.0) ** 2 for _ in range(layers)]
        cases.append((costs, rng.randint(1, min(layers, 8))))
    return cases


def case_key(index: int, costs, num_stages) -> list:
    return [index, len(costs), repr(num_stages)]


# What the contract admits besides a list of Python numbers (2.4-arguments): (form, costs, num_stages).
# Values exact in float32, so every form holds the same costs.
ADMITTED: list[tuple[str, list, int]] = [("tuple", LECTURE, 4), ("generator", [2, 7, 1, 8, 2, 8], 3), ("numpy.float64 array", [0.5, 3.25, 1, 2, 4.5], 2),
            ("numpy.int64 array", [3, 1, 4, 1, 5, 9, 2, 6], 3), ("list of numpy.float32", [1.5, 0.25, 2, 2, 0.75], 3),
            ("num_stages a numpy.int64", [4, 4, 1, 1, 1, 1], 2)]
FRESH_CASE: tuple[list, int] = ([2, 1, 1, 2, 3], 2)  # called twice, its first result changed in between
REUSED_CASE = (LECTURE, 4)  # called with one list object, then with the same object holding the costs reversed


def admitted_call(form: str, costs: list, num_stages):
    """The arguments of an ADMITTED case, as the caller passes them."""
    if form == "tuple":
        return tuple(costs), num_stages
    if form == "generator":
        return (cost for cost in costs), num_stages
    if form.startswith("numpy.") and form.endswith("array"):
        return np.array(costs, dtype=np.float64 if "float" in form else np.int64), num_stages
    if form == "list of numpy.float32":
        return [np.float32(cost) for cost in costs], num_stages
    return list(costs), np.int64(num_stages)


# Arguments the contract rejects with ValueError at the call, each run after a valid call equal
# to it where there is one (a cache hit must not skip the checks): empty, negative, nan, inf, not a
# real number, a bool, K out of 1..len(costs) on both sides, K not an int.
BAD_CALLS: list[tuple[Any, Any]] = [
    ([], 1), ([1, -1, 2], 2), ([1, math.nan, 2], 2), ([1, math.inf], 1), (["1", 2], 1), ([1, True, 2], 2),
    ([1, np.True_], 1), ([1, None], 1), ([[1], 2], 1), ([1, 1j], 1), ([1, 2, 3], 0), ([1, 2, 3], 4), ([1, 2, 3], -1),
    ([1, 2, 3], True), ([1, 2, 3], 2.0), ([1, 2, 3], "2"), ([1, 2, 3], None),
]
TWIN_CALLS = [([1, 1, 2], 2), ([1, 1], 1), ([1, 2, 3], 1), ([1, 2, 3], 2)]


def bad_key(costs: list, num_stages) -> list:
    return [repr(costs), repr(num_stages)]
