"""How the Problem 2 observers record numbers the student's code returned (child side)."""
from __future__ import annotations

import operator


def integer_value(value) -> int | None:
    """``value`` as an int when it is an integer of any type (3, 3.0, NumPy's 3), else None: the
    value is judged by one criterion, the type (recorded apart) by another."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    try:
        return operator.index(value)
    except TypeError:
        return None


def error_message(error: BaseException, limit: int = 300) -> str:
    """The message of an exception the student's code raised, also when its ``str()`` raises (as
    Python's own tracebacks say it)."""
    try:
        return str(error)[:limit]
    except BaseException:  # noqa: BLE001 - an exception whose text cannot be had is still reported
        return "<exception str() failed>"


def error_text(error: BaseException | None, limit: int = 300) -> str | None:
    """``Type: message`` of an exception the student's code raised; None for no exception."""
    return None if error is None else f"{type(error).__name__}: {error_message(error, limit)}"
