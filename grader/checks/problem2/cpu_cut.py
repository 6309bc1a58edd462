"""Calls into the student's code under a bound on CPU time (child side).

CPU time of the whole process (every thread: torch's and numpy's own threads count), not wall
time, so a busy machine hardly changes it. A call still running after ``cut`` CPU seconds is
stopped by a CPU-time timer whose signal raises in the main thread (at the next Python
instruction: a long torch operation finishes first), so a search that never ends or a schedule
built whole costs the check a second, not its whole time limit.
"""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Any

# Captured when this module is imported, before any student code: rebinding time.process_time
# or signal.setitimer later changes nothing this module calls.
_process_time = time.process_time
_setitimer, _set_handler = signal.setitimer, signal.signal
_PROFILE_TIMER, _PROFILE_SIGNAL = signal.ITIMER_PROF, signal.SIGPROF


class _Cut(BaseException):
    """Raised by the CPU-time timer in the main thread: the call ran past its cut."""


# After the cut the timer fires again every this many CPU seconds until the call ends: Python
# ignores an exception raised inside a __del__ or a gc callback, so one signal may be swallowed.
RETRY_SECONDS = 0.05
_armed = [False]


def _stop(signum, frame):
    if _armed[0]:
        raise _Cut


def _disarm() -> None:
    """Stop the timer; a cut that lands while stopping it is spent, not raised further."""
    while True:
        try:
            _armed[0] = False
            _setitimer(_PROFILE_TIMER, 0)
            return
        except _Cut:
            continue


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None  # what the call raised (an Exception; NotImplementedError propagates)
    cut: bool = False  # stopped after ``cut`` CPU seconds
    seconds: float = 0.0  # CPU seconds it took


def call_with_cut(function, cut: float) -> Outcome:
    """``function()`` stopped after ``cut`` CPU seconds: its value or error, whether it was cut, its CPU time."""
    previous = _set_handler(_PROFILE_SIGNAL, _stop)
    outcome = Outcome()
    started = _process_time()
    try:
        try:
            _armed[0] = True
            _setitimer(_PROFILE_TIMER, cut, RETRY_SECONDS)
            outcome.value = function()
        finally:
            _disarm()
    except _Cut:  # a repeat landing here is rare and harmless: the call ran past its cut, a failing case
        outcome.cut = True
    except NotImplementedError:
        raise
    except Exception as raised:  # noqa: BLE001 - the caller records it with its case
        outcome.error = raised
    finally:
        _disarm()
        outcome.seconds = _process_time() - started
        _set_handler(_PROFILE_SIGNAL, previous)
    return outcome
