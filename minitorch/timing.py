"""One timing protocol for everything timed in this kit (provided).

Speed claims are ratios of a baseline and a candidate measured side by side:

1. warm up both;
2. run ``repeats`` pairs, alternating which of the two goes first, synchronising every
   device before and after each run;
3. after each pair call ``check()``: a fast but wrong candidate fails loudly;
4. the figure is the median of the paired ratios ``baseline_time / candidate_time``
   (> 1 means the candidate is faster);
5. when the ratios spread more than ``max_spread`` (relative to the median), the whole
   measurement is repeated, at most ``max_attempts`` times, and the result is marked
   ``conclusive=False`` if it never settles. It is never silently passed or failed.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


def synchronize_all() -> None:
    """Wait for every CUDA device (a no-op on CPU-only machines)."""
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)


@dataclass
class PairedTiming:
    """Raw times (seconds) and ratios of one paired measurement."""

    baseline_seconds: list[float] = field(default_factory=list)
    candidate_seconds: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    attempts: int = 0
    conclusive: bool = False

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> float:
        """(max - min) / median of the ratios: 0.1 means they vary by 10% of the median."""
        return (max(self.ratios) - min(self.ratios)) / self.median_ratio

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "median_ratio": self.median_ratio, "spread": self.spread}


def _timed(fn: Callable[[], Any]) -> float:
    synchronize_all()
    start = time.perf_counter()
    fn()
    synchronize_all()
    return time.perf_counter() - start


def time_paired(
    baseline: Callable[[], Any],
    candidate: Callable[[], Any],
    *,
    repeats: int = 5,
    warmup: int = 1,
    check: Callable[[], None] | None = None,
    max_spread: float = 0.25,
    max_attempts: int = 3,
) -> PairedTiming:
    """Measure ``baseline`` against ``candidate`` with the protocol above.

    Args:
        baseline, candidate: zero-argument callables doing one unit of work each.
        repeats: pairs per attempt (>= 5 for reported figures).
        warmup: untimed runs of each before the first attempt.
        check: called after every pair; it should raise when the candidate's result
            differs from the baseline's (e.g. compare updated parameters).
        max_spread: an attempt whose ratios spread more than this is retried.
        max_attempts: attempts before giving up with ``conclusive=False``.

    Raises:
        ValueError: ``repeats < 1``, ``warmup < 0`` or ``max_attempts < 1``.
    """
    if repeats < 1 or warmup < 0 or max_attempts < 1:
        raise ValueError(
            f"need repeats >= 1, warmup >= 0, max_attempts >= 1; got {repeats}, {warmup}, {max_attempts}"
        )
    for _ in range(warmup):
        baseline()
        candidate()
    result = PairedTiming()
    for attempt in range(1, max_attempts + 1):
        result = PairedTiming(attempts=attempt)
        for pair in range(repeats):
            if pair % 2 == 0:
                baseline_time, candidate_time = _timed(baseline), _timed(candidate)
            else:
                candidate_time, baseline_time = _timed(candidate), _timed(baseline)
            if check is not None:
                check()
            result.baseline_seconds.append(baseline_time)
            result.candidate_seconds.append(candidate_time)
            result.ratios.append(baseline_time / candidate_time)
        if result.spread <= max_spread:
            result.conclusive = True
            break
    return result
