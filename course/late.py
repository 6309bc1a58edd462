"""Late work as data: one assignment's due date and late policy in one file (``--late-policy FILE``),
applied to every student at every build of the gradebook (course.gradebook), beside the manual
adjustments of course.adjustments.

The file is TOML::

    due = 2025-03-14T23:59:00-05:00   # with its UTC offset, or a local time and `timezone = "America/Chicago"`
    grace_minutes = 15                # submitted this long after the due date: on time
    penalty_per_day = 10              # percent of the raw score per day late; a started day counts whole
    max_penalty = 50                  # at most this percent in all (default 100)
    late_days = 4                     # optional budget: days a student may be late without penalty this term
    canvas_submissions = "submissions.json"  # optional: Canvas's submissions (its API's JSON), for their times

    [extensions]                      # a later due date (or days added) per student, with the reason
    lovelaceada_101 = { due = 2025-03-17T23:59:00-05:00, reason = "medical note" }
    turingalan_102 = { days = 2, reason = "conference travel" }

    [late_days_used]                  # late days each student spent on earlier assignments
    hopperg = 2

    [submitted]                       # times no source gave (wins over every source)
    lovelaceada_101 = 2025-03-15T10:30:00-05:00

A student's submission time comes from, first to last: ``[submitted]``; Canvas's submissions
JSON (``canvas_submissions``, matched by Canvas user id); the source itself (Gradescope's
``submission_metadata.json`` ``created_at`` in a student's folder, the ``Submission Time`` of
Gradescope's grades export). Canvas's download gives no time, only its ``_LATE`` mark: a
student it marks late without a time from elsewhere is flagged ``late_time_unknown`` (review),
one it does not mark is on time. Days late count from the student's own due date (an
extension's), each started day whole, once the grace period is past; late days of the budget
left are spent first, the rest cost ``penalty_per_day`` each, up to ``max_penalty``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from course.canvas import OptionsError
from course.discovery import Student
from course.outcomes import StudentGrade
from grader.tomlcompat import tomllib

DAY = timedelta(days=1)
KEYS = {"due", "timezone", "grace_minutes", "penalty_per_day", "max_penalty", "late_days", "canvas_submissions",
        "extensions", "late_days_used", "submitted"}
UNKNOWN_LATE = "late_time_unknown"  # the source marks it late and no source says when
UNKNOWN = "submitted_unknown"  # no source says when, nor whether it was late
SOURCE_LATE = ("late", "late=")  # the flags a source puts on late work: Canvas's mark, Gradescope's lateness


class LatePolicyError(OptionsError):
    """The late policy file cannot be used; the message names the key."""


@dataclass(frozen=True)
class Extension:
    due: datetime
    reason: str


@dataclass(frozen=True)
class Lateness:
    """How late one student's work was under the policy, and what it costs."""

    due: datetime  # the student's own: the extension's, or the assignment's
    extension: Extension | None
    submitted: datetime | None
    days_late: int = 0
    late_days_spent: int = 0
    late_days_left: int | None = None  # after this assignment; None: no budget
    penalty: float = 0.0  # percent of the raw score
    capped: bool = False
    unknown: str = ""  # UNKNOWN_LATE or UNKNOWN when the time is not known
    per_day: float = 0.0

    def flags(self) -> list[str]:
        """The gradebook's flags: ``late=Nd``, ``extension``, ``late_days_used=N``, or why it is unknown."""
        if self.unknown == UNKNOWN_LATE:
            return [UNKNOWN_LATE, "needs_review"]
        return ([self.unknown] if self.unknown else []) + ([f"late={self.days_late}d"] if self.days_late else []) + (
            ["extension"] if self.extension else []) + (
            [f"late_days_used={self.late_days_spent}"] if self.late_days_spent else [])

    def reason(self) -> str:
        """What happened, in words a student and a TA read the same way."""
        extension = f"extension to {shown(self.due)} ({self.extension.reason})" if self.extension else ""
        if self.submitted is None:
            said = ("the source marks it late but says no time: add it under [submitted] in the late policy"
                    if self.unknown == UNKNOWN_LATE else "no submission time: not judged late" if self.unknown
                    else "on time (the source does not mark it late)")
            return "; ".join(filter(None, [extension, said]))
        submitted = f"submitted {shown(self.submitted.astimezone(self.due.tzinfo))}"
        if not self.days_late:
            grace = " (within the grace period)" if self.submitted > self.due else ""
            return "; ".join(filter(None, [extension, f"{submitted}: on time{grace}"]))
        days = f"{self.days_late} day{'s' if self.days_late != 1 else ''}"
        text = f"{submitted}, {days} after {'it' if extension else 'the due date ' + shown(self.due)}"
        if self.late_days_spent:
            text += f"; {self.late_days_spent} late day{'s' if self.late_days_spent != 1 else ''} used ({self.late_days_left} left)"
        if self.penalty:
            text += f": -{self.penalty:g}% ({self.per_day:g}% a day{', capped' if self.capped else ''})"
        else:
            text += ": no penalty"
        return "; ".join(filter(None, [extension, text]))


@dataclass(frozen=True)
class Policy:
    """The file's due date, rule, extensions, late days spent and submission times."""

    path: Path
    due: datetime
    grace: timedelta = timedelta(0)
    penalty_per_day: float = 0.0
    max_penalty: float = 100.0
    late_days: int | None = None
    extensions: dict[str, Extension] = field(default_factory=dict)
    late_days_used: dict[str, int] = field(default_factory=dict)
    submitted: dict[str, datetime] = field(default_factory=dict)
    canvas_times: dict[str, datetime] = field(default_factory=dict)  # Canvas user id -> submitted_at

    def time_of(self, student: str, canvas_id: str, from_source: datetime | None) -> datetime | None:
        """The student's submission time: the file's, Canvas's submissions, the source's, or None."""
        return self.submitted.get(student) or (self.canvas_times.get(canvas_id) if canvas_id else None) or from_source

    def judge(self, student: str, submitted: datetime | None, source_late: bool, from_canvas: bool) -> Lateness:
        """``student``'s lateness; ``source_late``: the source marked it late; ``from_canvas``: the
        source is Canvas's download, which marks every late submission (so no mark is on time)."""
        extension = self.extensions.get(student)
        due = extension.due if extension else self.due
        left = None if self.late_days is None else max(0, self.late_days - self.late_days_used.get(student, 0))
        if submitted is None:
            unknown = UNKNOWN_LATE if source_late else "" if from_canvas else UNKNOWN
            return Lateness(due, extension, None, late_days_left=left, unknown=unknown)
        late = submitted - due
        days = 0 if late <= self.grace else math.ceil(late / DAY)
        spent = min(days, left) if left is not None else 0
        wanted = (days - spent) * self.penalty_per_day
        return Lateness(due, extension, submitted, days, spent, None if left is None else left - spent,
                        min(wanted, self.max_penalty), wanted > self.max_penalty, per_day=self.penalty_per_day)


def shown(when: datetime) -> str:
    return f"{when:%Y-%m-%d %H:%M} (UTC{when:%z})"


def parse_time(value: object, zone: tzinfo | None, where: str) -> datetime:
    """A TOML date-time (or an ISO 8601 string) as an aware datetime; a local one in ``zone``.

    Raises:
        LatePolicyError: not a date-time, or a local one without a ``timezone``.
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise LatePolicyError(f"{where}: {value!r} is not a date and time (e.g. 2025-03-14T23:59:00-05:00)") from None
    if not isinstance(value, datetime):
        kind = "a date without a time" if isinstance(value, date) else repr(value)
        raise LatePolicyError(f"{where}: {kind}: give a date and time, e.g. 2025-03-14T23:59:00-05:00")
    if value.tzinfo is None:
        if zone is None:
            raise LatePolicyError(f"{where}: {value} has no UTC offset: write one (2025-03-14T23:59:00-05:00) or set "
                                  "timezone = \"Area/City\" in the file")
        value = value.replace(tzinfo=zone)
    return value


def _number(table: dict, key: str, where: str, default: float, low: float, high: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise LatePolicyError(f"{where}: {key} = {value!r}: expected a number from {low:g} to {high:g}")
    return float(value)


def _table(data: dict, key: str, where: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise LatePolicyError(f"{where}: [{key}] must be a table of students")
    return value


def _extension(value: object, due: datetime, zone: tzinfo | None, where: str) -> Extension:
    if not isinstance(value, dict) or ("due" in value) == ("days" in value) or set(value) - {"due", "days", "reason"}:
        raise LatePolicyError(f"{where}: expected {{ due = <date and time>, reason = \"...\" }} or "
                              "{ days = N, reason = \"...\" }")
    if "days" in value:
        days = _number(value, "days", where, 0, 0, 365)
        return Extension(due + timedelta(days=days), str(value.get("reason") or f"{days:g} days"))
    return Extension(parse_time(value["due"], zone, f"{where} due"), str(value.get("reason") or "extension"))


def read(path: Path) -> Policy:
    """The policy at ``path``.

    Raises:
        LatePolicyError: unreadable, an unknown key, a bad date, number or table.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise LatePolicyError(f"{path}: cannot read it: {error}") from None
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise LatePolicyError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})")
    zone = _zone(data.get("timezone"), path)
    if "due" not in data:
        raise LatePolicyError(f"{path}: no due date (due = 2025-03-14T23:59:00-05:00)")
    due = parse_time(data["due"], zone, f"{path}: due")
    budget = data.get("late_days")
    extensions = {str(k): _extension(v, due, zone, f"{path}: [extensions] {k}") for k, v in _table(data, "extensions", str(path)).items()}
    used = {str(k): int(_number({"days": v}, "days", f"{path}: [late_days_used] {k}", 0, 0, 365))
            for k, v in _table(data, "late_days_used", str(path)).items()}
    submitted = {str(k): parse_time(v, zone, f"{path}: [submitted] {k}") for k, v in _table(data, "submitted", str(path)).items()}
    canvas = data.get("canvas_submissions")
    return Policy(
        path, due, timedelta(minutes=_number(data, "grace_minutes", str(path), 0, 0, 7 * 24 * 60)),
        _number(data, "penalty_per_day", str(path), 0, 0, 100), _number(data, "max_penalty", str(path), 100, 0, 100),
        None if budget is None else int(_number(data, "late_days", str(path), 0, 0, 365)), extensions, used, submitted,
        canvas_times(path.parent / canvas) if isinstance(canvas, str) else {},
    )


def _zone(name: object, path: Path) -> tzinfo | None:
    if name is None:
        return None
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise LatePolicyError(f"{path}: timezone {name!r}: not a time zone name like \"America/Chicago\"") from None


def canvas_times(path: Path) -> dict[str, datetime]:
    """``{Canvas user id: submitted_at}`` from Canvas's submissions JSON (its API's "list assignment
    submissions" answer, a list of objects with ``user_id`` and ``submitted_at``).

    Raises:
        LatePolicyError: unreadable or not that list.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise LatePolicyError(f"canvas_submissions {path}: cannot read it: {error}") from None
    if not isinstance(data, list) or not all(isinstance(s, dict) and "user_id" in s for s in data):
        raise LatePolicyError(f"canvas_submissions {path}: expected Canvas's list of submissions (objects with user_id "
                              "and submitted_at)")
    return {str(s["user_id"]): parse_time(s["submitted_at"], None, f"{path}: user {s['user_id']}")
            for s in data if s.get("submitted_at")}


def judge_all(policy: Policy, outcomes: list[StudentGrade], students: list[Student], progress=print) -> dict[str, Lateness]:
    """Every student's lateness under ``policy``: each outcome's ``submitted`` set to the time used,
    the source's late marks (``late``, ``late=H:M:S``) replaced by the policy's flags; one line
    of what it found."""
    by_name = {s.name: s for s in students}
    judged = {}
    for outcome in outcomes:
        student = by_name.get(outcome.student)
        canvas_id = student.canvas_id if student else ""
        source = (student.submitted_at if student else "") or outcome.submitted
        when = policy.time_of(outcome.student, canvas_id, parse_time(source, None, outcome.student) if source else None)
        marked = any(f == SOURCE_LATE[0] or f.startswith(SOURCE_LATE[1]) for f in outcome.flags)
        lateness = policy.judge(outcome.student, when, marked, bool(canvas_id))
        outcome.submitted = when.isoformat() if when else ""
        kept = [f for f in outcome.flags if f != SOURCE_LATE[0] and not f.startswith(SOURCE_LATE[1])]
        outcome.flags = list(dict.fromkeys([*kept, *lateness.flags()]))
        judged[outcome.student] = lateness
    progress(summary(policy, judged))
    strangers = sorted(({*policy.extensions, *policy.late_days_used, *policy.submitted}) - set(judged))
    if strangers:
        progress(f"late policy: no student named {', '.join(strangers)} in this class ({policy.path}); "
                 "name them as the gradebook's student column does")
    return judged


def summary(policy: Policy, judged: dict[str, Lateness]) -> str:
    """``late policy (FILE): 3 late (2 with a penalty), 1 extension, 1 without a time: ada``."""
    late = [name for name, j in judged.items() if j.days_late]
    penalised = sum(1 for j in judged.values() if j.penalty)
    extended = sum(1 for j in judged.values() if j.extension)
    unknown = sorted(name for name, j in judged.items() if j.unknown)
    parts = [f"{len(late)} late ({penalised} with a penalty)", f"{extended} with an extension"]
    if unknown:
        parts.append(f"{len(unknown)} without a submission time: {', '.join(unknown)}")
    return f"late policy ({policy.path}): " + ", ".join(parts)


def badges(flags: list[str]) -> list[tuple[str, str]]:
    """A gradebook row's late-work flags as the dashboard shows them: ``(kind, text)``, kind
    ``late`` or ``extension``; the source's own marks (``late``, Gradescope's ``late=H:M:S``) too."""
    shown = []
    for flag in flags:
        name, _, value = flag.partition("=")
        if flag == "late":
            shown.append(("late", "late"))
        elif name == "late" and value.endswith("d") and value[:-1].isdigit():
            shown.append(("late", f"{value[:-1]} day{'s' if value != '1d' else ''} late"))
        elif name == "late":
            shown.append(("late", f"late {value}"))
        elif flag == UNKNOWN_LATE:
            shown.append(("late", "late, time unknown"))
        elif flag == "extension":
            shown.append(("extension", "extension"))
        elif name == "late_days_used":
            shown.append(("extension", f"{value} late day{'s' if value != '1' else ''} used"))
        elif flag == UNKNOWN:
            shown.append(("late", "no submission time"))
    return shown
