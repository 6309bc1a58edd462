"""The searches 5.2's first run asks ``best_plan`` for, with the student's own ``estimate``
(both sides use them): real models and clusters, one deterministic case for each rule of the
contract, every run, then seeded random ones on top. Each fixed case's memory limit was chosen
with the cost model so that the rule decides it (tests/grader/checks/test_problem5_best_plan.py
proves each one); a limit between two plans' memory leaves a margin of 1% on both sides, so a
correct estimate within the contract's tolerance finds the same plans fitting.

A case is ``{"name", "model", "cluster", "batch", "microbatch", "call"}``; ``call`` is
``"positional"``, ``"keywords"`` or ``"default"`` (``microbatch`` left out: its default, 1).
"""
from __future__ import annotations

import random

from grader.checks.problem5.estimate.cases import SMALL, cluster, random_cluster

TWELVE_HEADS = {"layers": 4, "hidden": 768, "heads": 12, "seq_len": 1024, "vocab": 32000}
TWO_LAYERS = {"layers": 2, "hidden": 512, "heads": 8, "seq_len": 1024, "vocab": 32000}
GPT3 = {"layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048, "vocab": 51200}

# (name: the inputs in words, model, cluster, batch, microbatch, call)
FIXED = [
    ("12 heads on 6-GPU nodes of 215 MB", TWELVE_HEADS, cluster(24, 6, memory_bytes=215e6), 96, 1, "default"),
    ("12 heads on 8-GPU nodes of 253 MB, microbatches of 2", TWELVE_HEADS, cluster(24, 8, memory_bytes=253e6), 96, 2,
     "keywords"),
    ("12 heads on 6-GPU nodes of 176,633,856 bytes, microbatches of 2", TWELVE_HEADS,
     cluster(24, 6, memory_bytes=176633856.0), 96, 2, "keywords"),
    ("2 layers on 4-GPU nodes of 63.9 MB", TWO_LAYERS, cluster(16, 4, memory_bytes=63.9e6), 32, 1, "positional"),
    ("2 layers on 6-GPU nodes of 87.6 MB", TWO_LAYERS, cluster(24, 6, memory_bytes=87.6e6), 24, 1, "default"),
    ("GPT-3 on 1024 GPUs of 80 GB, batch 1536 (lecture 6.3)", GPT3, cluster(1024, 8), 1536, 1, "positional"),
    ("one GPU", SMALL, cluster(1, 1), 1, 1, "default"),
    ("12 heads on 6-GPU nodes of 50 MB", TWELVE_HEADS, cluster(24, 6, memory_bytes=50e6), 96, 1, "positional"),
    ("a batch of 3 in microbatches of 2", SMALL, cluster(8, 8), 3, 2, "keywords"),
]
REPEATED = 0  # FIXED[REPEATED] again after the others: calls keep no state
RANDOM_CASES = 3


def _case(name, model, cluster_, batch, microbatch, call) -> dict:
    return {"name": name, "model": model, "cluster": cluster_, "batch": batch, "microbatch": microbatch, "call": call}


def _random_case(rng: random.Random) -> dict:
    heads = rng.choice([4, 6, 8, 12, 16])
    model = {"layers": rng.choice([2, 4, 6, 8, 12]), "hidden": heads * rng.choice([32, 64, 128]), "heads": heads,
             "seq_len": rng.choice([256, 1024, 2048]), "vocab": rng.randint(1000, 60_000)}
    cluster_ = random_cluster(rng, nodes=rng.choice([1, 2, 3, 4]))
    cluster_["memory_bytes"] = 10 ** rng.uniform(7, 10)
    microbatch = rng.choice([1, 2])
    batch = cluster_["gpus"] * microbatch * rng.choice([1, 2, 3, 4, 8])
    call = rng.choice(["positional", "keywords"])
    return _case("a seeded random search", model, cluster_, batch, microbatch, call)


def search_cases(seed: int) -> list[dict]:
    """The fixed cases, the repeated one, then RANDOM_CASES drawn from ``seed``."""
    rng = random.Random(seed + 5)
    fixed = [_case(*row) for row in FIXED]
    repeated = {**fixed[REPEATED], "name": fixed[REPEATED]["name"] + ", again after the other cases"}
    return [*fixed, repeated, *(_random_case(rng) for _ in range(RANDOM_CASES))]


def key(index: int, case: dict) -> list:
    return [index, case["batch"], case["microbatch"], case["call"]]
