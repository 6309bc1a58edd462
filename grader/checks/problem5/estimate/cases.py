"""The plans 5.1's checks ask ``estimate`` about (both sides use them): one deterministic case
on each side of every rule of the contract, every run, then seeded random plans on top.

A case is ``{"name", "model", "cluster", "batch", "t", "p", "microbatch", "call"}``; ``call``
says how the child passes the arguments: ``"positional"``, ``"keywords"`` (every argument by
name) or ``"default"`` (``microbatch`` left out: its default, 1).
"""
from __future__ import annotations

import random

from grader.checks.problem5.plans import divisors

SMALL = {"layers": 4, "hidden": 256, "heads": 8, "seq_len": 128, "vocab": 1000}
WIDE = {"layers": 6, "hidden": 768, "heads": 12, "seq_len": 512, "vocab": 32000}
TWO_LAYERS = {"layers": 2, "hidden": 1280, "heads": 10, "seq_len": 256, "vocab": 5000}
ONE_T = {"layers": 128, "hidden": 25600, "heads": 160, "seq_len": 2048, "vocab": 51200}  # lecture 6.2


def cluster(gpus: int, per_node: int, **speeds) -> dict:
    """A cluster of A100-like GPUs (the Cluster defaults), with ``speeds`` replaced."""
    return {"gpus": gpus, "gpus_per_node": per_node, "peak_flops": 312e12, "efficiency": 0.75, "memory_bytes": 80e9,
            "nvlink_bytes_per_s": 300e9, "ib_bytes_per_s": 25e9, **speeds}


INTEGER_SPEEDS = {"peak_flops": 100 * 10**12, "efficiency": 1, "memory_bytes": 40 * 10**9,
                  "nvlink_bytes_per_s": 200 * 10**9, "ib_bytes_per_s": 20 * 10**9}
FAST = {"peak_flops": 1e18, "efficiency": 0.9, "nvlink_bytes_per_s": 9e11, "ib_bytes_per_s": 4e11}

# (name: the inputs in words, model, cluster, batch, t, p, microbatch, call)
FIXED = [
    ("one GPU", SMALL, cluster(1, 1), 1, 1, 1, 1, "default"),
    ("t = 8 on 8-GPU nodes, p = 2, m = 3, microbatches of 2", SMALL, cluster(16, 8), 6, 8, 2, 2, "keywords"),
    ("t = 5 on 4-GPU nodes, p = 2, m = 2", TWO_LAYERS, cluster(20, 4), 4, 5, 2, 1, "positional"),
    ("t = 3 on 8-GPU nodes, p = 2, m = 1", WIDE, cluster(24, 8), 4, 3, 2, 1, "positional"),
    ("t = 2 on 1-GPU nodes, p = 2, m = 5", SMALL, cluster(4, 1), 5, 2, 2, 1, "default"),
    ("the 1T model, t = 16 on 8-GPU nodes, p = 32", ONE_T, cluster(3072, 8), 3072, 16, 32, 1, "positional"),
    ("p = 6 of 6 layers, m = 4", WIDE, cluster(24, 8), 8, 2, 6, 1, "keywords"),
    ("p = 6 of 6 layers, m = 6", WIDE, cluster(24, 8), 24, 1, 6, 1, "default"),
    ("p = 4, m = 1, microbatches of 2", SMALL, cluster(16, 8), 8, 1, 4, 2, "keywords"),
    ("p = 2, m = 3, microbatches of 3", SMALL, cluster(16, 8), 36, 2, 2, 3, "keywords"),
    ("t = p = 1 on 24 GPUs (d = 24)", WIDE, cluster(24, 8), 48, 1, 1, 1, "positional"),
    ("t = 8 of 8 heads, p = 1", SMALL, cluster(8, 8), 4, 8, 1, 1, "positional"),
    ("a cluster given in ints", SMALL, cluster(8, 4, **INTEGER_SPEEDS), 4, 2, 2, 1, "positional"),
    ("a small model on a fast cluster (steps of microseconds)", SMALL, cluster(8, 8, **FAST), 6, 2, 2, 1, "positional"),
    ("the 1T model, t = 8, p = 64 (lecture 6.2)", ONE_T, cluster(3072, 8), 3072, 8, 64, 1, "default"),
]
REPEATED = 1  # the last fixed case repeats FIXED[REPEATED] after the others: calls keep no state
RANDOM_CASES = 24


def _case(name, model, cluster_, batch, t, p, microbatch, call) -> dict:
    return {"name": name, "model": model, "cluster": cluster_, "batch": batch, "t": t, "p": p, "microbatch": microbatch,
            "call": call}


def _random_model(rng: random.Random) -> dict:
    heads = rng.choice([4, 6, 8, 12, 16, 24, 32, 40, 48, 64])
    return {"layers": rng.choice([2, 4, 6, 8, 12, 16, 24, 32, 48, 64]), "hidden": heads * rng.choice([32, 64, 128]),
            "heads": heads, "seq_len": rng.choice([128, 512, 1024, 2048, 4096]), "vocab": rng.randint(1000, 260_000)}


def random_cluster(rng: random.Random, nodes: int | None = None) -> dict:
    per_node = rng.choice([2, 4, 6, 8, 8, 16])
    return cluster(per_node * (nodes or rng.choice([1, 2, 4, 8])), per_node, peak_flops=rng.uniform(50e12, 1000e12),
                   efficiency=rng.uniform(0.3, 0.9), memory_bytes=rng.uniform(8e9, 160e9),
                   nvlink_bytes_per_s=rng.uniform(100e9, 900e9), ib_bytes_per_s=rng.uniform(10e9, 100e9))


def _random_case(rng: random.Random) -> dict:
    model, cluster_ = _random_model(rng), random_cluster(rng)
    choices = [(t, p) for t in divisors(cluster_["gpus"]) for p in divisors(model["layers"])
               if cluster_["gpus"] % (t * p) == 0 and model["heads"] % t == 0]
    t, p = rng.choice(choices)
    microbatches = rng.choice([1, 2, 3, max(1, p - 1), p, p + 1, 2 * p + 1, rng.randint(1, 64)])
    microbatch = rng.choice([1, 1, 2, 3, 4])
    batch = cluster_["gpus"] // (t * p) * microbatch * microbatches
    return _case("a seeded random plan", model, cluster_, batch, t, p, microbatch, rng.choice(["positional", "keywords"]))


def plan_cases(seed: int) -> list[dict]:
    """The fixed cases, the repeated one, then RANDOM_CASES drawn from ``seed``."""
    rng = random.Random(seed)
    fixed = [_case(*row) for row in FIXED]
    repeated = {**fixed[REPEATED], "name": fixed[REPEATED]["name"] + ", again after the other cases"}
    return [*fixed, repeated, *(_random_case(rng) for _ in range(RANDOM_CASES))]


def key(index: int, case: dict) -> list:
    """What names a case in an observation: the parent regenerates the rest from the seed."""
    return [index, case["batch"], case["t"], case["p"], case["microbatch"], case["call"]]
