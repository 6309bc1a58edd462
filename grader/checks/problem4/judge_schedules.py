"""PARENT side, 4.1 and 4.2: schedules read back, simulated and judged as their contracts say.

Simulated with the grader's own copy of ``minitorch.schedules``; kinds, freshness and
argument checks judged from the child's facts (see :mod:`.reading`).
"""
from __future__ import annotations

import math

from grader.checks.judging import Fail, expect_cases

T_F, T_B = 1.0, 2.0  # F takes 1 unit, B 2 units, as in the lecture
T_COMM = 0.5  # the transfer delay the schedules are also simulated with
# What the contracts return: a new list of lists of the provided Action, stage and microbatch ints.
EXPECTED_TYPES = {"schedule": ["list"], "rows": ["list"], "actions": ["Action"], "numbers": ["int"], "kinds": ["str"]}
LEVELS = {"schedule": "the schedule", "rows": "each device's row", "actions": "each action",
          "numbers": "stage and microbatch", "kinds": "kind"}


def schedule_rows(reading, call: str, num_devices: int, judge_types: bool = True) -> list:
    """The rows of a reading, after checking it holds one row per device and, with ``judge_types``,
    that it is a list of lists of ``Action`` with int stages and microbatches (``Action(d,
    "F", m)``: what the provided printers and the executor take; other criteria than the
    one that judges the kinds read the numbers alone)."""
    if reading["unreadable"]:
        raise Fail(f"{call} must return a list with one list of Action(stage, kind, microbatch) per device; "
                   f"what it returned is not: {str(reading['unreadable'])[:120]}")
    for level, expected in (EXPECTED_TYPES.items() if judge_types else ()):
        found = [str(name) for name in reading["types"][level]]
        if level in ("rows", "actions", "numbers", "kinds") and not found:
            continue  # no rows, or empty rows: the simulator says what is missing
        if found != expected:
            raise Fail(f"{call}: {LEVELS[level]} must be {' or '.join(expected)} (the contract's Action(d, \"F\" or "
                       f"\"B\", m) in a new list per device, in a new list); got {', '.join(found)[:120]}")
    rows = reading["rows"]
    if len(rows) != num_devices:
        raise Fail(f"{call} returned {len(rows)} device lists, expected one per device ({num_devices})")
    return rows


def simulate(rows: list, call: str, num_microbatches: int, num_chunks: int, t_b: float = T_B,
             t_comm: float = 0.0):
    """The grader's simulation of ``rows``; :class:`Fail` naming the call when it is not valid."""
    from minitorch import schedules

    actions = [[schedules.Action(*action) for action in row] for row in rows]
    try:
        return schedules.simulate(actions, T_F, t_b, t_comm=t_comm, num_microbatches=num_microbatches,
                                  num_chunks=num_chunks)
    except ValueError as error:
        raise Fail(f"{call} is not a valid schedule: {error}") from None


def picture(timeline) -> str:
    from minitorch import schedules

    if timeline.makespan > 60 or timeline.num_devices > 6:
        return ""
    return "\nyour schedule, simulated:\n" + schedules.render_ascii(timeline, width=200)


def no_slower_with_transfers(rows: list, reference: list, call: str, num_microbatches: int, num_chunks: int,
                             whose: str) -> None:
    """With a delay on every transfer, the schedule is no slower than ``reference`` (an order
    that only ties with instant transfers shows here); equal is right."""
    timeline = simulate(rows, call, num_microbatches, num_chunks, T_B, T_COMM)
    ours = simulate([list(map(list, row)) for row in reference], "the grader's reference", num_microbatches,
                    num_chunks, T_B, T_COMM)
    if timeline.makespan > ours.makespan + 1e-9:
        raise Fail(
            f"{call}: with a transfer delay of {T_COMM:g} units between devices (F = 1, B = 2), one step takes "
            f"{timeline.makespan:g} units; {whose} takes {ours.makespan:g}. With instant transfers the two tie: "
            f"your order leaves no room for the transfers{picture(timeline)}"
        )


def judge_fresh(entries, cases: list, function: str, num_devices_of) -> None:
    """Every fresh-result case: the same call again, after the caller emptied the first
    result, returns a new list with the same schedule."""
    for case, entry in zip(cases, expect_cases(entries, cases, function)):
        call = f"{function}({', '.join(map(str, case))})"
        first = schedule_rows(entry["first"], call, num_devices_of(case))
        if entry["same_list"] or entry["shared_rows"]:
            shared = "the same list" if entry["same_list"] else f"{entry['shared_rows']} of the same row lists"
            raise Fail(f"{call} called twice returns {shared} both times: a caller that edits the schedule it got "
                       "changes what the next call returns; the contract says each call returns a new list of lists")
        again = schedule_rows(entry["again"], f"{call} (called again)", num_devices_of(case))
        if again != first:
            raise Fail(f"{call} called again, after the caller emptied the lists the first call returned, returns "
                       "another schedule: each call must build a new one from its arguments alone")


def judge_arguments(function: str, bad: list, wrong: dict, valid: list, observation) -> None:
    """Every bad call raised a ValueError (at the call); every valid call returned."""
    labels = [label for label, _ in bad]
    for label, entry in zip(labels, expect_cases(observation["bad"], labels, function)):
        if entry["raised"] is None:
            raise Fail(f"{function}{label}: {wrong[label]}, expected ValueError at the call; it returned")
        if entry["value_error"] is not True:
            raise Fail(f"{function}{label}: {wrong[label]}, expected ValueError at the call; got "
                       f"{str(entry['raised'])[:60]}: {str(entry['message'])[:200]}")
    labels = [label for label, _ in valid]
    for label, entry in zip(labels, expect_cases(observation["valid"], labels, function)):
        if entry["raised"] is not None:
            raise Fail(f"{function}{label} is valid but raised {str(entry['raised'])[:60]}: "
                       f"{str(entry['message'])[:200]}")


def same_makespan(timeline, expected: float) -> bool:
    return math.isclose(timeline.makespan, expected, rel_tol=1e-9)
