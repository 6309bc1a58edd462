"""The calls 4.2's checks make, known to both sides: ``[K, M, v]`` sizes and argument cases."""
from __future__ import annotations

import random

import numpy as np

# M a multiple of K; both sides of every rule: K = 1, M = K (one group), v = 1 (plain 1F1B),
# v = K, v > K, several groups, the largest sizes
FIXED = [[1, 1, 1], [1, 3, 2], [1, 2, 4], [2, 2, 2], [2, 4, 2], [2, 6, 4], [3, 6, 3], [4, 4, 2], [4, 8, 1],
         [4, 8, 2], [4, 8, 4], [5, 15, 3], [6, 6, 2], [8, 32, 4]]
# Called twice, the first result emptied in between (a new list on every call)
FRESH = [[4, 8, 2], [2, 4, 1]]


def cases(seed: int) -> list:
    """The fixed sizes, then six drawn from the seed (more of the same rules)."""
    rng = random.Random(seed + 1)
    drawn = []
    for _ in range(6):
        k = rng.randint(1, 6)
        drawn.append([k, k * rng.randint(1, 4), rng.randint(1, 4)])
    return FIXED + drawn


# (label, arguments): each must raise ValueError at the call (the judge says what is wrong with it)
BAD = [
    ("(4, 6, 2)", (4, 6, 2)), ("(3, 4, 2)", (3, 4, 2)), ("(8, 12, 4)", (8, 12, 4)), ("(4, 2, 2)", (4, 2, 2)),
    ("(4, 6, 1)", (4, 6, 1)), ("(3, 5, 1)", (3, 5, 1)), ("(2, 3, 1)", (2, 3, 1)), ("(4, 8, 0)", (4, 8, 0)),
    ("(0, 8, 2)", (0, 8, 2)), ("(4, 0, 2)", (4, 0, 2)), ("(2, 4, -1)", (2, 4, -1)), ("(4, 8, 2.0)", (4, 8, 2.0)),
    ("(4.0, 8, 2)", (4.0, 8, 2)), ("(4, 8, True)", (4, 8, True)), ("(True, 2, 2)", (True, 2, 2)),
    ("(1, True, 1)", (1, True, 1)), ("(4, '8', 2)", (4, "8", 2)), ("(4, 8, None)", (4, 8, None)),
    ("(4, 8, numpy.int64(2))", (4, 8, np.int64(2))), ("(numpy.int64(2), 4, 2)", (np.int64(2), 4, 2)),
]
# (label, arguments): valid, the smallest and a large one included, and the int twins of the bad
# calls (called first: a cache keyed on equal values cannot answer a bad call unchecked); each must return
VALID = [("(1, 1, 1)", (1, 1, 1)), ("(4, 8, 2)", (4, 8, 2)), ("(3, 6, 1)", (3, 6, 1)), ("(8, 16, 8)", (8, 16, 8)),
         ("(4, 8, 1)", (4, 8, 1)), ("(1, 2, 2)", (1, 2, 2)), ("(2, 4, 2)", (2, 4, 2))]
