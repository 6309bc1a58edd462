"""Per-student adjustments a course makes to the grader's scores: late penalties, extensions
and manual overrides (``--adjustments FILE``), applied to the gradebook every time it is
written, the grader's raw score kept beside them. The late policy's penalties
(course.late, ``--late-policy``) are adjustments too: :func:`combine` puts a student's two
together, the row kept by hand deciding where it says something.

The file is a CSV a TA keeps by hand, one row per student who needs one::

    student,late_penalty,override,reason
    lovelaceada_101,10,,2 days late (10%)
    turingalan_102,0,,extension to Friday (no penalty)
    hopperg,,85,regrade request #12: 2.2-backward passed by hand

``late_penalty`` is a percentage taken off the raw total (it replaces the late policy's, with
its reason); ``override`` replaces the total (after a regrade request): it survives later
regrades because it is applied again after each, and the changelog records it once. An empty
cell means none.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

from course.canvas import OptionsError

COLUMNS = ("student", "late_penalty", "override", "reason")


class AdjustmentsError(OptionsError):
    """The adjustments file cannot be used; the message names the row."""


@dataclass(frozen=True)
class Adjustment:
    late_penalty: float | None = None  # percent of the raw total; None: the row says none
    override: float | None = None      # the total, set by hand
    reason: str = ""

    def final(self, raw: float | None) -> float | None:
        """The score the course records for a raw total (None: no trustworthy score)."""
        if self.override is not None:
            return self.override
        if raw is None:
            return None
        return round(raw * (1 - (self.late_penalty or 0) / 100), 4)

    def describe(self) -> str:
        """The gradebook's ``adjustment`` cell: ``penalty 20%``, ``override 85``, or empty for none."""
        if self.override is not None:
            return f"override {self.override:g}"
        return f"penalty {self.late_penalty:g}%" if self.late_penalty else ""

    def flags(self) -> list[str]:
        return ([f"late_penalty={self.late_penalty:g}%"] if self.late_penalty else []) + (
            [f"override={self.override:g}"] if self.override is not None else [])


def combine(policy: Adjustment | None, manual: Adjustment | None) -> Adjustment | None:
    """One student's adjustment from the late policy's and the row kept by hand: the row's
    override or late penalty, where it gives one, replaces the policy's penalty (and its reason
    comes first); otherwise the policy's stands."""
    if manual is None or policy is None:
        return manual or policy
    if manual.override is None and manual.late_penalty is None:
        return replace(policy, reason="; ".join(filter(None, [manual.reason, policy.reason])))
    return replace(manual, reason="; ".join(filter(None, [manual.reason, f"late policy: {policy.reason}"])))


def _number(text: str, where: str, low: float, high: float) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise AdjustmentsError(f"{where}: {text!r} is not a number") from None
    if not low <= value <= high:
        raise AdjustmentsError(f"{where}: {value:g} is not between {low:g} and {high:g}")
    return value


def read(path: Path) -> dict[str, Adjustment]:
    """``{student: adjustment}`` from the file.

    Raises:
        AdjustmentsError: unreadable, a missing column, a bad number, a student twice.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise AdjustmentsError(f"{path}: no column {', '.join(missing)}; the header is {','.join(COLUMNS)}")
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise AdjustmentsError(f"{path}: cannot read it: {error}") from None
    found: dict[str, Adjustment] = {}
    for number, row in enumerate(rows, 2):
        student = (row["student"] or "").strip()
        where = f"{path}:{number}"
        if not student:
            continue
        if student in found:
            raise AdjustmentsError(f"{where}: {student} has a row already")
        found[student] = Adjustment(
            _number(row["late_penalty"] or "", f"{where} late_penalty", 0, 100),
            _number(row["override"] or "", f"{where} override", 0, 1e6),
            (row["reason"] or "").strip(),
        )
    return found
