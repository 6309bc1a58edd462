"""How the Problem 2 observers word what the student's code raised (child side)."""
from __future__ import annotations


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
