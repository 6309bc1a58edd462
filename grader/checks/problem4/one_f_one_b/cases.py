"""The calls 4.1's checks make, known to both sides: ``[K, M]`` sizes and argument cases."""
from __future__ import annotations

import random

import numpy as np

# Both sides of every rule: K = 1, M = 1, M < K, M = K, M = K + 1, M = K - 1, M much larger than K
FIXED = [[1, 1], [1, 4], [2, 1], [2, 2], [3, 4], [4, 2], [4, 4], [4, 8], [5, 3], [6, 5], [7, 13], [8, 32]]
# Called twice, the first result emptied in between (a new list on every call)
FRESH = [[4, 8], [3, 2]]


def cases(seed: int) -> list:
    """The fixed sizes, then eight drawn from the seed (more of the same rules)."""
    rng = random.Random(seed)
    return FIXED + [[rng.randint(1, 8), rng.randint(1, 24)] for _ in range(8)]


# (label, arguments): each must raise ValueError at the call (the judge says what is wrong with it)
BAD = [
    ("(0, 4)", (0, 4)), ("(4, 0)", (4, 0)), ("(-1, 3)", (-1, 3)), ("(3, -2)", (3, -2)), ("(2.0, 4)", (2.0, 4)),
    ("(4, 3.0)", (4, 3.0)), ("(True, 4)", (True, 4)), ("(4, True)", (4, True)), ("(1, False)", (1, False)),
    ("('4', 8)", ("4", 8)), ("(4, None)", (4, None)), ("(numpy.int64(4), 8)", (np.int64(4), 8)),
    ("(4, numpy.int32(8))", (4, np.int32(8))),
]
# (label, arguments): valid, the smallest and a large one included, and the int twins of the bad
# calls (2.0 == 2, True == 1, numpy.int64(4) == 4): called first, so that a cache keyed on equal
# values cannot answer a bad call without checking it. Each must return.
VALID = [("(1, 1)", (1, 1)), ("(4, 8)", (4, 8)), ("(3, 5)", (3, 5)), ("(16, 64)", (16, 64)), ("(2, 4)", (2, 4)),
         ("(4, 3)", (4, 3)), ("(1, 4)", (1, 4)), ("(4, 1)", (4, 1))]
