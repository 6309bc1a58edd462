"""The calls the 2.1 checks make, shared by the child (which makes them) and the parent (which
judges exactly these). Every rule of the contract has cases on both of its sides, every run."""
from __future__ import annotations

import numpy as np

# Every M in 0..6 with every K in 1..5 (K = 1, M < K, M = K, M > K), then larger and lopsided
# sizes: each call comes after calls with other sizes, so state kept across calls shows.
SCHEDULE_CASES = [(m, k) for m in range(7) for k in range(1, 6)] + [(16, 4), (3, 8), (40, 3), (1, 12)]
SHOWN_CASE = (3, 3)  # the docstring's example: called again while another call runs, and after its waves were changed
INTERRUPTING_CASE = (4, 2)

# Arguments the contract admits besides Python ints: NumPy integers (each pair must still hold Python
# ints), each judged against the same call with Python ints (M = 0 is 2.1-no-microbatches').
ADMITTED_CASES = [(np.int64(3), np.int64(3)), (np.int32(5), 2), (4, np.int64(1))]

# Arguments the contract rejects with ValueError: M < 0, K == 0 and K < 0 each on their own (a
# check of one argument must not hide behind the other), then values that are not ints.
INVALID_CASES = [(-1, 3), (2, 0), (2, -1), (0, -2), (0, 0), (-3, -1),
                 (True, 3), (3, True), (False, 2), (2.0, 3), (3, 2.0), (np.float64(2.0), 3), ("3", 3), (3, None)]
# Run first, each equal (and of equal hash) to an invalid case: a cache hit must not skip the checks.
TWIN_CASES = [(1, 3), (3, 1), (0, 2), (2, 3), (3, 2)]

# The work done before the first wave at M = K = 2048 against that at (2048, 1) plus (1, 2048):
# work that grows with M + K (state per microbatch or per stage, a fixed cost per call) is about
# the same at both; work that grows with M * K is 1,000 times more. Each size is called once (a
# cache of an earlier call must not hide the work).
EDGE_WORK_CASES = [(2048, 1), (2049, 1), (1, 2048), (1, 2049)]
SQUARE_WORK_CASES = [(2048, 2048), (2047, 2049), (2049, 2047)]
WORK_CUT_SECONDS = 0.5  # CPU seconds a first wave may take before the child stops waiting for it


def case_key(m, k) -> list[str]:
    """How a call's arguments are named in an observation (NumPy values keep their type)."""
    return [repr(m), repr(k)]
