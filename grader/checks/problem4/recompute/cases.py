"""The cases of 4.3's checks, known to both sides: what each recomputation case passes."""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

BATCH, WIDTH = 24, 32  # activations (24 x 32 float64 = 6144 bytes) differ in size from weights (32 x 32)


@dataclass(frozen=True)
class RecomputeCase:
    """``layers`` layers cut into ``segments`` (None: the default round(sqrt(n))).

    ``kind``: "grader" (the grader's layer: linear, tanh, dropout), "frozen" (every other
    one with frozen parameters), "no-params" (modules without parameters), "functions"
    (every ``function_every``-th layer a plain callable), "unused" (every other layer holds
    a parameter its forward never uses: the plain run gives it no gradient), "shared" (a
    module twice in a row, a weight of two modules, a module in two segments:
    ``layers.shared_layers``). ``input_grad``:
    whether the input requires grad; ``non_leaf``: the input is computed from another
    tensor (the output of an earlier layer) and retains its gradient. ``shape``: the
    input's leading dims (the last is WIDTH). ``dtype``, ``transposed`` (a non-contiguous
    input), ``container`` (how the layers are passed), ``warm_up`` (the same layers were
    used once before with another input shape and segment count), ``repeat`` (the very
    same call was made once before, forward and backward, and an optimizer step has
    changed the parameters since), ``keyword`` (segments passed as ``segments=``),
    ``accumulate`` (gradients already there before the backward) and ``via_grad``
    (gradients taken with ``torch.autograd.grad``, which must leave every ``.grad`` alone)
    are the other things the contract allows."""

    layers: int
    segments: int | None
    dropout: float
    kind: str = "grader"
    function_every: int = 0
    input_grad: bool = True
    shape: tuple = (BATCH,)
    dtype: str = "float64"
    transposed: bool = False
    container: str = "list"
    warm_up: bool = False
    keyword: bool = False
    accumulate: bool = False
    via_grad: bool = False
    non_leaf: bool = False
    repeat: bool = False

    def describe(self) -> str:
        words = [f"{self.layers} layers, segments={self.segments}, dropout p={self.dropout}"]
        words += {"frozen": ["every other layer frozen"], "no-params": ["modules without parameters"],
                  "functions": [f"every {self.function_every}. layer a plain function"],
                  "unused": ["every other layer with a parameter its forward does not use"],
                  "shared": ["a module repeated (twice in a row, and in the first and the last segment), a "
                             "weight shared by two modules"]}.get(self.kind, [])
        if not self.input_grad:
            words.append("an input that does not require grad")
        if self.non_leaf:
            words.append("an input that is not a leaf (computed from another tensor) and retains its gradient")
        if self.shape != (BATCH,) or self.dtype != "float64" or self.transposed:
            layout = "non-contiguous " if self.transposed else ""
            words.append(f"a {layout}{self.dtype} input of shape {(*self.shape, WIDTH)}")
        if self.container != "list":
            words.append(f"layers passed as a {self.container}")
        if self.warm_up:
            words.append("the layers used once before with another input shape and segment count")
        if self.repeat:
            words.append("the same call made once before, forward and backward, then the parameters changed by an "
                         "optimizer step")
        if self.accumulate:
            words.append("gradients already there from an earlier backward")
        if self.via_grad:
            words.append("gradients taken with torch.autograd.grad (no .grad may change)")
        return ", ".join(words)


RECOMPUTE_CASES = [
    RecomputeCase(16, None, 0.25), RecomputeCase(12, 3, 0.0), RecomputeCase(9, 2, 0.5), RecomputeCase(6, 6, 0.3),
    RecomputeCase(5, 1, 0.2),
    RecomputeCase(7, None, 0.2),  # round(sqrt(7)) = 3 segments; int(sqrt(7)) = 2
    RecomputeCase(10, None, 0.2),  # round(sqrt(10)) = 3 segments; ceil(sqrt(10)) = 4
    RecomputeCase(8, 3, 0.2, kind="functions", function_every=2, input_grad=False),
    RecomputeCase(6, 2, 0.2, kind="frozen", container="tuple", warm_up=True),
    RecomputeCase(4, 2, 0.3, kind="no-params", input_grad=True, container="ModuleList"),
    RecomputeCase(5, 2, 0.2, shape=(), dtype="float32", container="Sequential"),
    RecomputeCase(4, None, 0.2, shape=(2, 3), transposed=True, warm_up=True),
    RecomputeCase(4, 2, 0.0, input_grad=False, transposed=True),
    RecomputeCase(1, None, 0.2, keyword=True),  # the smallest: one layer, round(sqrt(1)) = 1 segment
    RecomputeCase(3, 1, 0.2, kind="no-params", input_grad=False),  # nothing requires grad: neither does the output
    RecomputeCase(6, 3, 0.2, accumulate=True, keyword=True, warm_up=True),
    RecomputeCase(6, 2, 0.2, kind="frozen", via_grad=True, container="ModuleList"),
    RecomputeCase(5, 5, 0.1, dtype="float32", shape=(1,), accumulate=True, input_grad=False),
    RecomputeCase(6, 2, 0.2, kind="unused"),  # autograd finds no path to those parameters
    RecomputeCase(5, 2, 0.2, non_leaf=True),  # x's gradient reaches it once, through the first segment
    RecomputeCase(6, 3, 0.2, repeat=True),  # a second training step on the same batch: nothing kept from the first
    # the same module twice in one segment (the smallest), in two segments; a weight in two modules
    RecomputeCase(2, 1, 0.0, kind="shared"), RecomputeCase(2, 2, 0.2, kind="shared"),
    RecomputeCase(8, 2, 0.2, kind="shared", container="ModuleList", accumulate=True),
    RecomputeCase(9, 2, 0.1, kind="shared", via_grad=True, input_grad=False, container="Sequential"),
]


def recompute_cases(seed: int) -> list:
    """The fixed cases, then three drawn from everything the contract allows (seeded)."""
    rng = random.Random(seed + 2)
    drawn = []
    for _ in range(3):
        layers = rng.randint(1, 12)
        kind = rng.choice(["grader", "frozen", "no-params", "functions"])
        drawn.append(RecomputeCase(
            layers, rng.choice([None, rng.randint(1, layers)]), rng.choice([0.0, 0.1, 0.5]), kind=kind,
            function_every=2 if kind == "functions" else 0, input_grad=rng.random() < 0.7,
            shape=rng.choice([(), (1,), (BATCH,), (2, 3)]), dtype=rng.choice(["float64", "float32"]),
            transposed=rng.random() < 0.3, warm_up=rng.random() < 0.3,
            container=rng.choice(["list", "tuple"] if kind == "functions" else ["list", "tuple", "ModuleList", "Sequential"]),
            keyword=rng.random() < 0.5, accumulate=rng.random() < 0.3, via_grad=rng.random() < 0.2,
        ))
    return RECOMPUTE_CASES + drawn


MEMORY_CASES = [0, 1, 2]  # indices into RECOMPUTE_CASES with 2 <= segments < layers
# The grader's own layers with a leaf input that requires grad: plain functions, other kinds of
# layers, other inputs and repeated calls are 4.3-bit-identical's concern, not this criterion's
COUNT_CASES = [index for index, case in enumerate(RECOMPUTE_CASES)
               if case.kind == "grader" and case.input_grad and not case.non_leaf and not case.repeat]
# 4.3-caller-unchanged: (label, input requires grad, every other layer frozen, segments)
CALLER_CASES = [
    ("an input that does not require grad", False, False, 2),
    ("an input that requires grad", True, False, 2),
    ("an input that requires grad, every other layer frozen", True, True, 1),
    ("an input that does not require grad, every other layer frozen", False, True, 4),
]
# 4.3-arguments: (label, layers, x, segments), each must raise ValueError at the call; the
# layers and x are named, the child builds them (see observe)
BAD = [
    ("([], x)", "[]", "x", None), ("([tanh], x, segments=0)", "[tanh]", "x", 0),
    ("([tanh] * 3, x, segments=4)", "[tanh] * 3", "x", 4), ("([tanh] * 3, x, segments=-1)", "[tanh] * 3", "x", -1),
    ("([tanh], x, segments=1.5)", "[tanh]", "x", 1.5), ("([tanh] * 3, x, segments=2.0)", "[tanh] * 3", "x", 2.0),
    ("([tanh] * 3, x, segments=True)", "[tanh] * 3", "x", True), ("([tanh] * 3, x, segments='2')", "[tanh] * 3", "x", "2"),
    ("([tanh] * 3, x, segments=numpy.int64(2))", "[tanh] * 3", "x", np.int64(2)),
    ("([3], x)", "[3]", "x", None), ("([tanh, 3], x)", "[tanh, 3]", "x", None), ("([tanh], [[1.0]])", "[tanh]", "[[1.0]]", None),
]
# Valid calls at the edges of the same rules, and the int twins of the bad segments (called
# first: a cache keyed on equal values cannot answer a bad call unchecked); each must return
VALID = [("([tanh] * 3, x, segments=3)", "[tanh] * 3", "x", 3), ("([tanh] * 3, x, segments=1)", "[tanh] * 3", "x", 1),
         ("([tanh] * 3, x, segments=2)", "[tanh] * 3", "x", 2), ("([tanh], x)", "[tanh]", "x", None)]
