"""CHILD side, 4.1 and 4.2: what a schedule function returned and what a call did, as facts.

Nothing here judges: the kinds of every level of a schedule are recorded as type names
(``"Action"`` for the provided ``minitorch.schedules.Action``), the parent decides what the
contract admits.
"""
from __future__ import annotations

from typing import Any

from grader.checks.recording import integer_value, provided

MAX_ACTIONS = 100_000  # a schedule longer than this is not read further (every case has far fewer)


def type_name(value) -> str:
    """``int``, ``list``, ``numpy.int64``, ``Action`` (the provided one only)."""
    kind = type(value)
    if kind is provided("minitorch.schedules").Action:
        return "Action"
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"




def read_schedule(schedule) -> dict:
    """``{"rows": [[stage, kind, microbatch], ...] per device or None, "unreadable": why not
    (a fact) or "", "types": {"schedule", "rows", "actions", "numbers", "kinds": type names}}``."""
    types: dict[str, set] = {"schedule": {type_name(schedule)}, "rows": set(), "actions": set(), "numbers": set(),
                             "kinds": set()}
    facts: dict[str, Any] = {"rows": None, "unreadable": "", "types": types}
    if isinstance(schedule, (str, bytes)) or not hasattr(schedule, "__iter__"):
        facts["unreadable"] = f"not iterable: {type_name(schedule)}"
        return _plain(facts)
    rows, count = [], 0
    for device, row in enumerate(schedule):
        types["rows"].add(type_name(row))
        if isinstance(row, (str, bytes)) or not hasattr(row, "__iter__"):
            facts["unreadable"] = f"[{device}] is a {type_name(row)}"
            return _plain(facts)
        plain = []
        for step, action in enumerate(row):
            types["actions"].add(type_name(action))
            try:
                stage, kind, microbatch = action
            except (TypeError, ValueError):
                facts["unreadable"] = f"[{device}][{step}] is {_short(action)}"
                return _plain(facts)
            types["numbers"].update((type_name(stage), type_name(microbatch)))
            types["kinds"].add(type_name(kind))
            stage, microbatch = integer_value(stage), integer_value(microbatch)
            if stage is None or microbatch is None or type(kind) is not str:
                facts["unreadable"] = f"[{device}][{step}] is {_short(action)}"
                return _plain(facts)
            plain.append([stage, kind[:8], microbatch])
            count += 1
            if count > MAX_ACTIONS:
                facts["unreadable"] = f"more than {MAX_ACTIONS} actions"
                return _plain(facts)
        rows.append(plain)
    facts["rows"] = rows
    return _plain(facts)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(facts: dict[str, Any]) -> dict:
    return {**facts, "types": {level: sorted(names) for level, names in facts["types"].items()}}


def read_fresh(function, arguments: tuple) -> dict:
    """Call ``function(*arguments)`` twice, emptying what the first call returned in between
    (as a caller that edits its schedule would): both readings, and whether the second
    result is the first list or holds one of its rows."""
    first = function(*arguments)
    reading = read_schedule(first)
    rows = list(first) if isinstance(first, list) else []
    for row in rows:
        if isinstance(row, list):
            row.clear()
    if isinstance(first, list):
        first.clear()
    second = function(*arguments)
    shared = sum(1 for row in second for earlier in rows if row is earlier) if isinstance(second, list) else 0
    return {"first": reading, "again": read_schedule(second), "same_list": second is first, "shared_rows": shared}


def outcome(call) -> dict:
    """What ``call()`` did: ``{"raised": None}`` when it returned (a lazy result is run
    through first, so a late error still counts as raised after the call), else the
    exception's class name, whether it is a ValueError, and its message."""
    try:
        result = call()
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - a fact for the parent
        return {"raised": type(error).__name__, "value_error": isinstance(error, ValueError),
                "message": message_of(error)}
    try:
        if hasattr(result, "__iter__") and not isinstance(result, (str, bytes, dict)):
            list(result)
    except Exception as error:  # noqa: BLE001 - raised while the result was read
        return {"raised": type(error).__name__, "value_error": False, "message": "(raised after the call) " + message_of(error)}
    return {"raised": None, "value_error": False, "message": ""}


def message_of(error: BaseException) -> str:
    try:
        return str(error)[:200]
    except Exception:  # noqa: BLE001 - a student's exception whose __str__ raises
        return "(its message could not be read)"
