"""The grader's ``estimate`` for 5.2's second run (the rubric's ``fallback = "estimate"``): a
stand-in whose times and memory are made up, case by case, so that each rule of best_plan's
contract decides the case. Both sides build the same tables from the seed; they are case
inputs (a made-up estimate, not the cost model).

Every time is a whole number of UNITs and every memory a whole number of bytes, so sums are
exact in any order: "at most the limit" is tried at the limit and one byte past it. In each
designed table the target plan is the fastest that fits; one or two faster plans do not fit;
the first plan that fits in t-major and in p-major order, and the smallest in memory, are
slower; where the plans allow, decoys that fit are slower in total but have the least compute,
or would be the fastest without one communication term.
"""
from __future__ import annotations

import random

from grader.checks.problem5.estimate.cases import cluster as a_cluster
from grader.checks.problem5.plans import MODEL_FIELDS, valid_plan, valid_plans

UNIT = 2.0**-12  # seconds
LIMIT = float(2**36)  # bytes per GPU of every stand-in cluster
TARGET_STEP = 1000  # units
TERMS = ("compute_s", "bubble_s", "tensor_parallel_s", "pipeline_s", "data_parallel_s")

TWENTY_FOUR = {"layers": 12, "hidden": 768, "heads": 12, "seq_len": 512, "vocab": 32000}
SIXTEEN = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 50000}
SMALL = {"layers": 4, "hidden": 256, "heads": 8, "seq_len": 128, "vocab": 1000}

# (design, model, cluster, batch, microbatch, call): the design says which plan is the target
CASES = [
    ("any plan", TWENTY_FOUR, a_cluster(24, 8, memory_bytes=LIMIT), 48, 1, "positional"),
    ("t not a power of two", TWENTY_FOUR, a_cluster(24, 6, memory_bytes=LIMIT), 48, 2, "keywords"),
    ("t spans nodes", SIXTEEN, a_cluster(32, 8, memory_bytes=LIMIT), 64, 1, "default"),
    ("t inside a node, not dividing it", TWENTY_FOUR, a_cluster(24, 8, memory_bytes=LIMIT), 24, 1, "positional"),
    ("one layer per stage", SIXTEEN, a_cluster(32, 8, memory_bytes=LIMIT), 32, 1, "keywords"),
    ("t = p = 1", TWENTY_FOUR, a_cluster(24, 8, memory_bytes=LIMIT), 96, 2, "keywords"),
    ("d = 1", SIXTEEN, a_cluster(16, 4, memory_bytes=LIMIT), 16, 1, "positional"),
    ("at the limit", TWENTY_FOUR, a_cluster(24, 6, memory_bytes=LIMIT), 72, 3, "keywords"),
    ("a tie", SIXTEEN, a_cluster(32, 8, memory_bytes=LIMIT), 128, 2, "positional"),
    ("one GPU", SMALL, a_cluster(1, 1, memory_bytes=LIMIT), 1, 1, "default"),
    ("none fits", TWENTY_FOUR, a_cluster(24, 8, memory_bytes=LIMIT), 48, 1, "positional"),
    ("none valid", SIXTEEN, a_cluster(32, 8, memory_bytes=LIMIT), 3, 2, "keywords"),
]
REPEATED = 1  # CASES[REPEATED] again after the others: calls keep no state
TARGETS = {
    "t not a power of two": lambda t, p, node, layers, gpus: t & (t - 1) != 0,
    "t spans nodes": lambda t, p, node, layers, gpus: t > node,
    "t inside a node, not dividing it": lambda t, p, node, layers, gpus: t <= node and node % t != 0,
    "one layer per stage": lambda t, p, node, layers, gpus: p == layers,
    "t = p = 1": lambda t, p, node, layers, gpus: t == p == 1,
    "d = 1": lambda t, p, node, layers, gpus: t * p == gpus,
}


def search_cases() -> list[dict]:
    rows = [dict(zip(("design", "model", "cluster", "batch", "microbatch", "call"), row)) for row in CASES]
    return [*rows, {**rows[REPEATED]}]


def key(index: int, case: dict) -> list:
    return [index, case["design"], case["batch"], case["microbatch"], case["call"]]


def _target(rng: random.Random, case: dict, plans: list[tuple[int, int]]) -> tuple[int, int] | None:
    if case["design"] == "none fits":
        return None
    if case["design"] == "one GPU":
        return plans[0]
    model, cluster_ = case["model"], case["cluster"]
    wanted = TARGETS.get(case["design"], lambda *plan: True)
    shortcuts = {plans[0], min(plans, key=lambda plan: (plan[1], plan[0]))}
    chosen = [(t, p) for t, p in plans if wanted(t, p, cluster_["gpus_per_node"], model["layers"], cluster_["gpus"])]
    return rng.choice([plan for plan in chosen if plan not in shortcuts] or chosen)


def designed_table(seed: int, index: int, case: dict) -> dict[tuple[int, int], dict]:
    """Each valid plan's Estimate fields, designed so the case's target is the fastest that fits."""
    rng = random.Random(f"{seed}/{index}/{case['design']}")
    plans = valid_plans(case["model"], case["cluster"], case["batch"], case["microbatch"])
    if not plans:
        return {}
    target = _target(rng, case, plans)
    others = [plan for plan in plans if plan != target]
    rng.shuffle(others)
    faster, slower = others[:2], others[2:]
    steps = {target: TARGET_STEP} if target else {}
    memory = {target: LIMIT if case["design"] == "at the limit" else float(rng.randint(2**35, 2**36 - 2**32))} if target else {}
    for rank, plan in enumerate(faster):  # faster than the target, and too big: one byte past the limit
        steps[plan] = rng.randint(TARGET_STEP // 2, TARGET_STEP - 1)
        memory[plan] = LIMIT + 1 if rank == 0 else float(rng.randint(2**36 + 2**30, 2**37))
    for step_units, plan in zip(rng.sample(range(TARGET_STEP + 1, 4 * TARGET_STEP), len(slower)), slower):
        steps[plan] = step_units
        memory[plan] = float(rng.randint(2**34, 2**37))
    if target is None:  # nothing fits: the smallest is one byte past the limit
        memory = {plan: max(size, LIMIT + 1) for plan, size in memory.items()}
        memory[min(memory, key=memory.__getitem__)] = LIMIT + 1
        return {plan: _fields(rng, case, plan, steps[plan], memory[plan], None) for plan in plans}
    slower_left = [plan for plan in slower if plan != target]
    for plan in (plans[0], min(plans, key=lambda plan: (plan[1], plan[0]))):  # the first fitting ones are slower
        if plan in slower_left:
            memory[plan] = float(rng.randint(2**34, 2**36 - 2**33))
    if slower_left:
        memory[slower_left[-1]] = float(2**32)  # the smallest in memory is slower
    if case["design"] == "a tie" and slower_left:
        steps[slower_left[0]], memory[slower_left[0]] = TARGET_STEP, float(2**35)
    decoys = _decoys(case, slower_left[1:-1])
    for plan in decoys:
        memory[plan] = min(memory[plan], float(2**36 - 2**33))
    return {plan: _fields(rng, case, plan, steps[plan], memory[plan], decoys.get(plan)) for plan in plans}


def _dimensions(case: dict, plan: tuple[int, int]) -> dict[str, int]:
    t, p = plan
    return {"bubble_s": p, "tensor_parallel_s": t, "pipeline_s": p, "data_parallel_s": case["cluster"]["gpus"] // (t * p)}


def _decoys(case: dict, candidates: list[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """Up to one slower fitting plan per communication term, nearly all its time in that term."""
    decoys: dict[tuple[int, int], str] = {}
    for term in ("tensor_parallel_s", "pipeline_s", "data_parallel_s"):
        plan = next((plan for plan in candidates if plan not in decoys and _dimensions(case, plan)[term] > 1), None)
        if plan is not None:
            decoys[plan] = term
    return decoys


def _fields(rng: random.Random, case: dict, plan: tuple[int, int], step_units: int, memory: float,
            decoy: str | None) -> dict:
    """An Estimate's fields for ``plan``: ``step_units`` split over the terms whose dimension is
    over 1 (a decoy's all but one unit in its term), ``memory`` split into state and activations."""
    t, p = plan
    d = case["cluster"]["gpus"] // (t * p)
    units = dict.fromkeys(TERMS, 0)
    if decoy is not None:
        units["compute_s"], units[decoy] = 1, step_units - 1
    else:
        units["compute_s"] = step_units * 3 // 5
        open_terms = [term for term, size in _dimensions(case, plan).items() if size > 1] or ["compute_s"]
        left = step_units - units["compute_s"]
        cuts = sorted(rng.randint(0, left) for _ in open_terms[1:])
        for term, low, high in zip(open_terms, [0, *cuts], [*cuts, left]):
            units[term] += high - low
    state = float(int(memory * rng.uniform(0.3, 0.7)))
    return {"t": t, "p": p, "d": d, "microbatches": case["batch"] // (d * case["microbatch"]),
            **{term: units[term] * UNIT for term in TERMS}, "state_bytes": state, "activation_bytes": memory - state,
            "flops_per_gpu": units["compute_s"] * UNIT * 1e14, "memory_limit": float(case["cluster"]["memory_bytes"])}


def _off_table(seed: int, index: int, case: dict, batch: int, plan: tuple[int, int], microbatch: int) -> dict:
    """Fields for a call the case did not ask for (another batch or microbatch): seeded, made up."""
    rng = random.Random(f"{seed}/{index}/{batch}/{plan}/{microbatch}")
    other = {**case, "batch": batch, "microbatch": microbatch}
    return _fields(rng, other, plan, rng.randint(1, 4 * TARGET_STEP), float(rng.randint(2**33, 2**37)), None)


def stand_in_estimate(seed: int, index: int, case: dict, estimate_class):
    """The stand-in ``estimate(model, cluster, batch, t, p, microbatch=1)`` for one case: the
    contract's ValueError for arguments that are not ints >= 1 and for invalid plans, else a
    new ``estimate_class`` (the provided Estimate) of the case's table."""
    table = designed_table(seed, index, case)

    def estimate(model, cluster, batch, t, p, microbatch=1):  # the contract's parameter names: keywords work
        for value in (batch, t, p, microbatch):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"not an int >= 1: {value!r}")
        sizes = {field: getattr(model, field) for field in MODEL_FIELDS}
        if not valid_plan(sizes, {"gpus": cluster.gpus}, batch, t, p, microbatch):
            raise ValueError(f"(t, p) = ({t}, {p}) is not a valid plan for batch {batch}, microbatch {microbatch}")
        if (batch, microbatch) == (case["batch"], case["microbatch"]) and (t, p) in table:
            return estimate_class(**table[(t, p)])
        return estimate_class(**_off_table(seed, index, case, batch, (t, p), microbatch))

    return estimate
