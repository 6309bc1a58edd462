"""The work ``clock_cycles`` does before it hands out its first wave (child side: it measures,
the parent judges).

Work is the CPU time of the whole process (every thread: torch's and numpy's own threads
count), not wall time: a busy machine hardly changes it. It sees what Python's traced
allocations miss: a schedule built in torch tensors, or every wave computed and thrown away
before the first is handed out. A call still working after ``cut`` CPU seconds is stopped
(by a CPU-time timer whose signal raises in the main thread), so an eager schedule at a large
size costs the check seconds, not minutes.
"""
from __future__ import annotations

import signal
import time

# Captured when this module is imported, before any student code: rebinding time.process_time
# or signal.setitimer later changes nothing this measurement calls.
_process_time = time.process_time
_setitimer, _set_handler = signal.setitimer, signal.signal
_PROFILE_TIMER, _PROFILE_SIGNAL = signal.ITIMER_PROF, signal.SIGPROF


class _Cut(BaseException):
    """Raised by the CPU-time timer in the main thread: the call ran past its cut."""


def _stop(signum, frame):
    raise _Cut


def first_wave_work(clock_cycles, m, k, cut: float) -> dict:
    """CPU seconds from calling ``clock_cycles(m, k)`` until it handed out its first wave
    (or ended, or raised), whether it was cut off at ``cut`` seconds, and its error."""
    previous = _set_handler(_PROFILE_SIGNAL, _stop)
    error, was_cut = None, False
    started = _process_time()
    try:
        try:
            _setitimer(_PROFILE_TIMER, cut)
            next(iter(clock_cycles(m, k)), None)
        finally:
            _setitimer(_PROFILE_TIMER, 0)
    except _Cut:
        was_cut = True
    except NotImplementedError:
        raise
    except Exception as raised:  # noqa: BLE001 - e.g. a MemoryError of a schedule built whole: judged with its case
        error = f"{type(raised).__name__}: {str(raised)[:200]}"
    finally:
        seconds = _process_time() - started
        _set_handler(_PROFILE_SIGNAL, previous)
    return {"case": [m, k], "seconds": seconds, "cut": was_cut, "error": error}


def work_before_first_wave(clock_cycles, edges: list, squares: list, cut: float) -> dict:
    """:func:`first_wave_work` for every size of ``edges``, then for those of ``squares`` until one is cut off."""
    measured = {"edges": [first_wave_work(clock_cycles, m, k, cut) for m, k in edges], "squares": []}
    for m, k in squares:
        measured["squares"].append(first_wave_work(clock_cycles, m, k, cut))
        if measured["squares"][-1]["cut"]:
            break
    return measured
