"""The calls 5.1-arguments (``estimate``) and 5.2-arguments (``best_plan``) make (both sides use
them): every Raises clause, one argument outside the contract at a time, at and one past each
limit, and calls inside it (at the limits) that must not raise. A case is ``[label, function,
overrides, valid]``: the call is the function's base call with ``overrides``; the label names the
value in words (the value itself may be a numpy integer, which an observation cannot hold)."""
from __future__ import annotations

MODEL = {"layers": 12, "hidden": 768, "heads": 12, "seq_len": 1024, "vocab": 50_000}
CLUSTER = {"gpus": 16, "gpus_per_node": 8, "peak_flops": 312e12, "efficiency": 0.75, "memory_bytes": 80e9,
           "nvlink_bytes_per_s": 300e9, "ib_bytes_per_s": 25e9}
BASE_CALLS = {"estimate": {"batch": 32, "t": 2, "p": 2, "microbatch": 2}, "best_plan": {"batch": 32, "microbatch": 2}}


def _numpy_int(value: int):
    import numpy

    return numpy.int64(value)


def _outside(function: str) -> list[tuple[str, dict]]:
    if function == "estimate":
        return [
            ("t=3", {"t": 3}), ("p=8", {"p": 8}), ("p=5", {"p": 5}), ("t=8", {"t": 8}), ("batch=20", {"batch": 20}),
            ("batch=33", {"batch": 33}), ("microbatch=3", {"microbatch": 3}), ("t=0", {"t": 0}), ("p=-2", {"p": -2}),
            ("microbatch=0", {"microbatch": 0}), ("batch=0", {"batch": 0}), ("batch=-32", {"batch": -32}),
            ("t=True", {"t": True}), ("microbatch=True", {"microbatch": True}), ("p=2.0", {"p": 2.0}),
            ("batch=32.0", {"batch": 32.0}), ("microbatch='2'", {"microbatch": "2"}), ("t=None", {"t": None}),
            ("t=numpy.int64(2)", {"t": _numpy_int(2)}), ("batch=numpy.int64(32)", {"batch": _numpy_int(32)}),
        ]
    return [
        ("batch=0", {"batch": 0}), ("batch=-1", {"batch": -1}), ("batch=True", {"batch": True}),
        ("batch=32.0", {"batch": 32.0}), ("batch='32'", {"batch": "32"}), ("batch=numpy.int64(32)", {"batch": _numpy_int(32)}),
        ("microbatch=0", {"microbatch": 0}), ("microbatch=1.5", {"microbatch": 1.5}),
        ("microbatch=False", {"microbatch": False}), ("microbatch=None", {"microbatch": None}),
    ]


def _inside(function: str) -> list[tuple[str, dict]]:
    if function == "estimate":
        return [("t=2, p=2, batch=32, microbatch=2", {}), ("t=4, p=4, batch=2, microbatch=2", {"t": 4, "p": 4, "batch": 2}),
                ("t=1, p=1, batch=16, microbatch=1", {"t": 1, "p": 1, "batch": 16, "microbatch": 1}),
                ("t=1, p=2, batch=32, microbatch=2", {"t": 1}), ("t=2, p=2, batch=32, microbatch=1", {"microbatch": 1})]
    return [("batch=32, microbatch=2", {}), ("batch=1, microbatch=1", {"batch": 1, "microbatch": 1}),
            ("batch=1, microbatch=2", {"batch": 1})]


# Outside cases equal (==, with equal hashes) to a call of _inside: asked again after it, a result
# kept from the valid call must not answer them (a cache consulted before the checks).
EQUAL_TO_INSIDE = {"estimate": ["t=True", "microbatch=True", "p=2.0", "batch=32.0", "t=numpy.int64(2)",
                                "batch=numpy.int64(32)"],
                   "best_plan": ["batch=True", "batch=32.0", "batch=numpy.int64(32)"]}
AGAIN = ", right after a valid call equal to it"


def argument_cases(function: str) -> list[list]:
    """``function``'s cases ("estimate" or "best_plan"): those outside the contract, those inside
    it, then again those outside it that equal one inside it."""
    outside = _outside(function)
    again = [(label + AGAIN, overrides) for label, overrides in outside if label in EQUAL_TO_INSIDE[function]]
    return ([[label, function, overrides, False] for label, overrides in outside]
            + [[label, function, overrides, True] for label, overrides in _inside(function)]
            + [[label, function, overrides, False] for label, overrides in again])


def key(case: list) -> list:
    return [case[0], case[1], case[3]]
