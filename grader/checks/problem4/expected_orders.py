"""PARENT side, 4.1, 4.2 and 4.4: the grader's own 1F1B and Megatron-LM orders that schedules
are judged against (never the answer key). No child imports this module: the pieces a
fallback run binds in the student's module are the child side's (``pieces.py``,
``train_step/interleaved_piece.py``)."""
from __future__ import annotations

from grader.checks.problem4.pieces import one_f_one_b_rows

# The lecture's 1F1B order is the grader's own 1F1B piece's (a child-side module holding no
# hidden material: the parent may read it, never the other way round).
reference_one_f_one_b = one_f_one_b_rows


def reference_interleaved(num_stages: int, num_microbatches: int, num_chunks: int, all_forwards_first: bool = False) -> list:
    """Megatron-LM's interleaved order as ``(stage, kind, microbatch)`` rows (``v = 1``: 1F1B).
    ``all_forwards_first``: every forward is a warm-up one (Megatron-LM's rule when M == K in
    its releases that have it: all forwards, then all backwards)."""
    if num_chunks == 1 and not all_forwards_first:
        return reference_one_f_one_b(num_stages, num_microbatches)
    K, v, total = num_stages, num_chunks, num_microbatches * num_chunks

    def kth(k: int, device: int, kind: str) -> tuple:
        group, rest = divmod(k, K * v)
        chunk = rest // K if kind == "F" else v - 1 - rest // K
        return (chunk * K + device, kind, group * K + rest % K)

    rows = []
    for device in range(K):
        warmup = total if all_forwards_first else min(2 * (K - device - 1) + (v - 1) * K, total)
        row = [kth(k, device, "F") for k in range(warmup)]
        for k in range(total - warmup):
            row += [kth(warmup + k, device, "F"), kth(k, device, "B")]
        rows.append(row + [kth(k, device, "B") for k in range(total - warmup, total)])
    return rows


def megatron_orders(num_stages: int, num_microbatches: int, num_chunks: int) -> list[tuple[str, list]]:
    """``(whose, rows)`` of every order 4.2's contract admits as Megatron-LM's: its warm-up
    rule and, when M == K (one group), its all-forwards-first rule as well."""
    whose = "the 1F1B order" if num_chunks == 1 else "Megatron-LM's order"
    orders = [(whose, reference_interleaved(num_stages, num_microbatches, num_chunks))]
    if num_microbatches == num_stages:
        orders.append(("Megatron-LM's order for M = K (all forwards first)",
                       reference_interleaved(num_stages, num_microbatches, num_chunks, all_forwards_first=True)))
    return orders
