"""The timed forward of 2.2-concurrency, shared by the child and the parent: its sizes come from the
criterion's params; the child measures again (up to ``attempts`` times) only while a forward takes
longer than :func:`time_limit`."""
from __future__ import annotations


def concurrency_params(params: dict) -> tuple[int, int, float, int]:
    """(stages, microbatches, seconds each stage sleeps per microbatch, attempts)."""
    return (int(params.get("stages", 3)), int(params.get("microbatches", 4)), float(params.get("sleep", 0.08)),
            int(params.get("attempts", 3)))


def time_limit(stages: int, microbatches: int, sleep: float) -> float:
    """Halfway between a pipeline's (M + K - 1) stage steps and a serial M * K."""
    return (microbatches + stages - 1 + microbatches * stages) / 2 * sleep
