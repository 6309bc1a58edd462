"""The failing stages of 2.2-exceptions, 2.2-exception-unchanged and 2.2-base-exception, shared by
the child and the parent: (stages, rows, split_size, failing stage, failing microbatch).

``EXCEPTION_CASES`` raise an ``Exception``: in the middle of a wave that has a pair to take back
after it, in the last wave (after every other pair ran), in the first wave (nothing else may run).
``BASE_EXCEPTION_CASES`` raise a ``BaseException`` that is not an ``Exception`` (as
KeyboardInterrupt is not): first in a wave with a pair after it, and alone in the first wave.
``SEVERAL_CASES``: (stages, rows, split_size, failures), each failure a (stage, microbatch) and no
stage failing twice: two stages failing in one wave, three in one wave (the first of them in
schedule order is the lowest stage, the highest microbatch), and two in different waves (the
first wave's error is the one; the later wave must not run). Listed out of schedule order.
``TIMEOUT_CASE``: a Pipe with a short ``timeout`` whose stage ``stage`` is held, once, on
microbatch ``microbatch`` until the forward has returned or raised: the last wave, so that any
submit beyond the schedule's is a call retried.
"""
from __future__ import annotations

from typing import Any

EXCEPTION_CASES = [(3, 6, 2, 1, 1), (3, 6, 2, 2, 2), (3, 6, 2, 0, 0), (1, 3, 1, 0, 1)]
BASE_EXCEPTION_CASES = [(3, 6, 2, 1, 2), (3, 6, 2, 0, 1), (2, 4, 2, 0, 0)]
SEVERAL_CASES = [(2, 2, 1, ((1, 0), (0, 1))), (3, 6, 2, ((2, 0), (1, 1), (0, 2))), (3, 6, 2, ((0, 2), (1, 0)))]
TIMEOUT_CASE: dict[str, Any] = {"stages": 2, "rows": 4, "split": 2, "stage": 1, "microbatch": 1, "timeout": 0.5}
KINDS = {"exception": EXCEPTION_CASES, "base_exception": BASE_EXCEPTION_CASES}
TAGS = {"exception": 600, "base_exception": 650, "several": 670, "timeout": 690}  # seeds of each case's stages and batch: TAGS[kind] + index
GOOD_BATCH = 700  # the next forward's batch: GOOD_BATCH + the case's tag
