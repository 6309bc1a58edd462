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
