"""The work ``clock_cycles`` does before it hands out its first wave (child side: it measures,
the parent judges): the CPU time from the call to the first wave, cut off after a bound. It sees
what Python's traced allocations miss: a schedule built in torch tensors, or every wave computed
and thrown away before the first is handed out."""
from __future__ import annotations

from grader.checks.problem2.cpu_cut import call_with_cut
from grader.checks.problem2.recorded import error_text


def first_wave_work(clock_cycles, m, k, cut: float) -> dict:
    """CPU seconds from calling ``clock_cycles(m, k)`` until it handed out its first wave
    (or ended, or raised), whether it was cut off at ``cut`` seconds, and its error."""
    outcome = call_with_cut(lambda: next(iter(clock_cycles(m, k)), None), cut)
    return {"case": [m, k], "seconds": outcome.seconds, "cut": outcome.cut, "error": error_text(outcome.error)}


def work_before_first_wave(clock_cycles, edges: list, squares: list, cut: float) -> dict:
    """:func:`first_wave_work` for every size of ``edges``, then for those of ``squares`` until one is cut off."""
    measured = {"edges": [first_wave_work(clock_cycles, m, k, cut) for m, k in edges], "squares": []}
    for m, k in squares:
        measured["squares"].append(first_wave_work(clock_cycles, m, k, cut))
        if measured["squares"][-1]["cut"]:
            break
    return measured
