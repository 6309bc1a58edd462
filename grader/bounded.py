"""A call in the grader's own process under a time bound: ``bounded(function, seconds)``.

The judges run in the grader's process on data a student's code produced; an observation that
fits every reader bound can still make a judge's comparison run for minutes. The bound raises
:class:`TooSlow` inside the call (an asynchronous exception delivered to the calling thread
between two Python bytecodes), so the judge stops and the grader goes on with the next
criterion. A single C call (one torch kernel) is not interrupted; the readers bound the
tensors such a call could be given.
"""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


class TooSlow(BaseException):
    """The bounded call ran past its time (a BaseException: a judge's own ``except Exception`` cannot swallow it)."""


def bounded(function: Callable[[], T], seconds: float) -> T:
    """``function()``, or :class:`TooSlow` raised inside it once ``seconds`` of wall time passed."""
    target, lock, state = threading.get_ident(), threading.Lock(), {"done": False, "fired": False}

    def expire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                _set_async_exc(target, ctypes.py_object(TooSlow))

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        return function()
    finally:
        with lock:
            state["done"] = True
            timer.cancel()
            if state["fired"]:  # delivered, or still pending: never let it reach the caller's next line
                _set_async_exc(target, ctypes.py_object())
