"""The PARENT side's toolkit: what judges use to read an observation and to fail a criterion.

Nothing here runs in a criterion's child: a child holds no judge, no expected value and no
message (see :mod:`grader.checks`). Judges raise :class:`Fail` with a message in the
student's terms; :func:`observed` wraps the observation so that data of the wrong shape fails
the criterion as :class:`Malformed` instead of crashing the grader.
"""
from __future__ import annotations

from dataclasses import dataclass

# The child's clock reads inside the grader's run of it; a little slack for the two reads of each clock.
CLOCK_SLACK_SECONDS = 0.05


class Fail(Exception):
    """A student-facing reason why a criterion failed, with optional JSON-able ``details``."""

    def __init__(self, message: str, details: dict | None = None):
        super().__init__(message)
        self.details = details or {}


@dataclass(frozen=True)
class Outside:
    """What the grader measured of a child's run from its own process, where the student's code
    cannot reach: ``wall_seconds`` from the child's start to its report, on the grader's clock.
    A judge that takes an ``outside`` parameter is given it."""

    wall_seconds: float


def within_outside(claimed_seconds: float, outside: Outside | None, what: str) -> None:
    """Fail as tampered when the times the child reported add up to more than passed outside
    it: the grader's clock inside the student's process was rewritten (a tracer that skips a
    sleep and reports it slept, a clock read through a replaced function)."""
    if outside is None or claimed_seconds <= outside.wall_seconds + CLOCK_SLACK_SECONDS:
        return
    raise Fail(
        f"your code's process reported {what} of {claimed_seconds:.2f} s in all, but its whole run took "
        f"{outside.wall_seconds:.2f} s as the grader measured it from outside: the times recorded inside your "
        "process were changed, so what this criterion observed cannot be trusted; it scores 0 and the course "
        "staff will review it",
        {"tampered": [f"{what} (longer than the run, measured outside)"]},
    )


class Malformed(Fail):
    """The observation is not shaped as the check's observe function builds it: something in
    the child (the student's code) changed what came back. A failure, not a grader error."""


def _where(path: str) -> str:
    return f"{path} (the data your code's run handed back to the grader)"


class ObservedDict(dict):
    """A dict of the observation: a missing key is :class:`Malformed`, naming where."""

    path = "observation"

    def __missing__(self, key):
        raise Malformed(f"the grader could not read what your code produced: {_where(self.path)} has no {key!r}")

    def __iter__(self):  # keys iterated where the check expects a list of entries stay checked
        for key in dict.__iter__(self):
            yield observed(key, f"{self.path}, key {key!r},") if type(key) is str else key


class ObservedList(list):
    """A list of the observation: an index out of range is :class:`Malformed`, naming where."""

    path = "observation"

    def __getitem__(self, index):
        try:
            return super().__getitem__(index)
        except IndexError:
            raise Malformed(
                f"the grader could not read what your code produced: {_where(self.path)} has {len(self)} "
                f"entries, no entry {index}"
            ) from None
        except TypeError:
            raise Malformed(
                f"the grader could not read what your code produced: {_where(self.path)} is a list where "
                f"the grader expected a mapping (looked up {index!r})"
            ) from None


class ObservedStr(str):
    """A string of the observation: used as a mapping, a list or a tensor, it is
    :class:`Malformed` (a string where the check's observe function puts something else)."""

    path = "observation"

    def __getitem__(self, index):
        if isinstance(index, (int, slice)):
            return str.__getitem__(self, index)
        raise Malformed(f"the grader could not read what your code produced: {_where(self.path)} is a string "
                        f"({str(self)[:40]!r}) where the grader expected a mapping")

    def __getattr__(self, name):
        raise Malformed(f"the grader could not read what your code produced: {_where(self.path)} is a string "
                        f"({str(self)[:40]!r}) where the grader expected a tensor or an object with .{name}")


def observed(value, path: str = "observation"):
    """``value`` (an observation, plain data) with dicts and lists that fail as
    :class:`Malformed` instead of KeyError / IndexError, so a judge given data of the wrong
    shape fails the criterion with a reason rather than crashing as a grader error."""
    wrapped: ObservedDict | ObservedList | ObservedStr
    if type(value) is dict:
        wrapped = ObservedDict({key: observed(item, f"{path}[{key!r}]") for key, item in value.items()})
    elif type(value) is list:
        wrapped = ObservedList(observed(item, f"{path}[{index}]") for index, item in enumerate(value))
    elif type(value) is str:
        wrapped = ObservedStr(value)
    else:
        return value
    wrapped.path = path
    return wrapped


def expect_tensor(value, what: str):
    """``value`` if it is a tensor, else :class:`Malformed` saying what came back instead."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise Malformed(f"{what}: your code returned {_kind(value)} where a tensor was expected")
    return value


def _kind(value) -> str:
    if value is None:
        return "None"
    text = repr(value)
    return f"a {type(value).__name__} ({text[:60] + '...' if len(text) > 60 else text})"


def _as_plain_case(case):
    if isinstance(case, (list, tuple)):
        return tuple(_as_plain_case(item) for item in case)
    if isinstance(case, dict):
        return tuple(sorted((str(key), _as_plain_case(dict.__getitem__(case, key))) for key in dict.keys(case)))
    return str(case) if isinstance(case, str) else case


def expect_cases(entries, asked: list, what: str, key: str = "case") -> list:
    """``entries``, one per case, after checking that they are exactly the cases the parent
    asked for, in order: entry ``i`` is a mapping whose ``key`` equals ``asked[i]`` (lists and
    tuples compare alike). A judge calls this before it judges any value, so an observation
    that leaves out, adds, reorders or relabels cases is :class:`Malformed`, never judged on
    the cases it chose to send."""
    if not isinstance(entries, list):
        raise Malformed(f"{what}: the grader could not read what your code produced: "
                        f"{_where(getattr(entries, 'path', 'observation'))} is {_kind(entries)}, not a list of cases")
    if len(entries) != len(asked):
        raise Malformed(f"{what}: the grader asked for {len(asked)} cases and got {len(entries)} back "
                        f"({_where(getattr(entries, 'path', 'observation'))})")
    for index, (entry, case) in enumerate(zip(entries, asked)):
        if not isinstance(entry, dict) or key not in dict.keys(entry):
            raise Malformed(f"{what}: case {index} came back without its {key!r} "
                            f"({_where(getattr(entries, 'path', 'observation'))})")
        if _as_plain_case(dict.__getitem__(entry, key)) != _as_plain_case(case):
            raise Malformed(f"{what}: case {index} came back as {dict.__getitem__(entry, key)!r}, "
                            f"but the grader asked for {case!r}")
    return entries

