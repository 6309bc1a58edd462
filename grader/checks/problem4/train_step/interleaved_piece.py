"""CHILD side of 4.4: the grader's interleaved builder for 4.4's fallback run, as Megatron-LM's
orders for the sizes 4.4's cases call it with, written out (``stages.schedule_call``; tests
check them against the parent's ``expected_orders``). Every child holds what the forkserver
preloads, so an algorithm here would be 4.2's answer for any size; these few orders are not."""
from __future__ import annotations

import re

from grader.checks.problem4.pieces import as_actions, check_sizes, grader_one_f_one_b

# (K, M, v): device d's actions, "<stage><F or B><microbatch>" each
ORDERS = {
    (1, 3, 2): ("0F0 1F0 1B0 0F1 0B0 1F1 1B1 0F2 0B1 1F2 1B2 0B2",),
    (2, 2, 2): ("0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1", "1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1"),
    (2, 2, 3): ("0F0 0F1 2F0 2F1 4F0 4F1 4B0 4B1 2B0 2B1 0B0 0B1", "1F0 1F1 3F0 3F1 5F0 5B0 5F1 5B1 3B0 3B1 1B0 1B1"),
    (2, 4, 2): ("0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
                "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3"),
    (3, 3, 2): ("0F0 0F1 0F2 3F0 3F1 3F2 3B0 3B1 3B2 0B0 0B1 0B2", "1F0 1F1 1F2 4F0 4F1 4F2 4B0 4B1 4B2 1B0 1B1 1B2",
                "2F0 2F1 2F2 5F0 5B0 5F1 5B1 5F2 5B2 2B0 2B1 2B2"),
}
ACTION = re.compile(r"(\d+)([FB])(\d+)")


def grader_interleaved(num_stages: int, num_microbatches: int, num_chunks: int) -> list:
    """The grader's interleaved builder, with its contract's ValueError (M a multiple of K):
    plain 1F1B for v = 1, Megatron-LM's order for 4.4's sizes, LookupError for any other
    valid size (4.4 asks for none)."""
    check_sizes(num_stages=num_stages, num_microbatches=num_microbatches, num_chunks=num_chunks)
    if num_microbatches % num_stages:
        raise ValueError(f"num_microbatches ({num_microbatches}) must be a multiple of num_stages ({num_stages})")
    if num_chunks == 1:
        return grader_one_f_one_b(num_stages, num_microbatches)
    key = (num_stages, num_microbatches, num_chunks)
    if key not in ORDERS:
        raise LookupError(f"the grader's interleaved_one_f_one_b stand-in holds only 4.4's sizes, not {key}")
    return as_actions([[(int(s), kind, int(m)) for s, kind, m in ACTION.findall(row)] for row in ORDERS[key]])
