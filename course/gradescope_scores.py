"""Gradescope's scores back into the course's gradebook: ``python -m course import-gradescope``.

    python -m course import-gradescope SCORES.csv --csv grades.csv [--student-is sid|email]
        [--html class.html] [--canvas FILE --assignment HEADER [--roster EXPORT.csv] [--name-is KIND]]
        [--adjustments FILE]

SCORES.csv is the assignment's "Download Grades" CSV (Gradescope: the assignment's Review
Grades page > Download Grades > CSV): one row per student, ``First Name`` and ``Last Name``
(older exports: ``Name``), ``SID``, ``Email``, then ``Total Score``, ``Max Points``, ``Status``
(``Graded``, ``Ungraded`` or ``Missing``), ``Submission ID``, ``Submission Time``,
``Lateness (H:M:S)``, ``View Count``, ``Submission Count`` and one column per question.

Each row becomes a row of the course's gradebook, written as ``batch`` writes one
(course.gradebook.finish): the CSV, the dashboard (totals only: each criterion's result stays
on Gradescope), Canvas's import, the course's adjustments and late policy (each row's
``Submission Time`` is its submission time). The student is named by their SID
(``--student-is email``: their email); the row's flags say where it came from (``gradescope``),
``late=H:M:S`` when Gradescope recorded lateness, ``submissions=N``, and ``no_submission`` for
a student Gradescope lists as Missing (no score: Canvas's cell stays empty).
"""
from __future__ import annotations

import argparse
import csv
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from course import gradebook
from course.batch import add_gradebook_arguments, gradebook_options, usage_error
from course.canvas import OptionsError, RosterError
from course.discovery import Student, safe_file_name
from course.outcomes import StudentGrade

REQUIRED = ("SID", "Email", "Total Score", "Max Points", "Status")
STATUSES = {"Graded": "graded", "Ungraded": "ungraded", "Missing": "missing"}
FLAG = "gradescope"


class ScoresError(ValueError):
    """The file is not Gradescope's Download Grades CSV, or a row of it cannot be used; the message says which."""


@dataclass(frozen=True)
class ScoreRow:
    """One student of Gradescope's export."""

    student: str
    name: str
    score: float | None
    max_points: float | None
    status: str
    lateness: str
    submissions: str
    submitted: str = ""  # the Submission Time, ISO 8601 ("" when none): for the late policy (course.late)


def _number(text: str, where: str) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ScoresError(f"{where}: {text!r} is not a number") from None


def _row(row: dict[str, str], where: str, student_is: str) -> ScoreRow:
    key = "Email" if student_is == "email" else "SID"
    student = (row.get(key) or "").strip() or (row.get("Email") or "").strip()
    if not student:
        raise ScoresError(f"{where}: no {key} and no Email: who is it?")
    status = (row.get("Status") or "").strip()
    if status not in STATUSES:
        raise ScoresError(f"{where}: Status {status!r}: expected one of {', '.join(STATUSES)}")
    name = (row.get("Name") or f"{row.get('First Name') or ''} {row.get('Last Name') or ''}").strip()
    return ScoreRow(student, name, _number(row["Total Score"], f"{where} Total Score"),
                    _number(row["Max Points"], f"{where} Max Points"), STATUSES[status],
                    (row.get("Lateness (H:M:S)") or "").strip(), (row.get("Submission Count") or "").strip(),
                    _time(row.get("Submission Time") or "", f"{where} Submission Time"))


def _time(text: str, where: str) -> str:
    """Gradescope's ``2024-05-01 23:50:00 -0700`` as ISO 8601; "" for none.

    Raises:
        ScoresError: a time that is not one.
    """
    text = text.strip()
    if not text:
        return ""
    for parse in (lambda: datetime.strptime(text, "%Y-%m-%d %H:%M:%S %z"), lambda: datetime.fromisoformat(text)):
        try:
            when = parse()
        except ValueError:
            continue
        if when.tzinfo is not None:
            return when.isoformat()
    raise ScoresError(f"{where}: {text!r} is not a time with its UTC offset (2024-05-01 23:50:00 -0700)")


def read(path: Path, student_is: str = "sid") -> list[ScoreRow]:
    """The export's rows, in its order.

    Raises:
        ScoresError: unreadable, a missing column, a bad number or status, a student twice.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise ScoresError(f"{path}: no column {', '.join(repr(c) for c in missing)}: expected Gradescope's "
                                  "Download Grades CSV (the assignment's Review Grades > Download Grades > CSV)")
            rows = [_row(row, f"{path}:{number}", student_is) for number, row in enumerate(reader, 2)]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ScoresError(f"{path}: cannot read it: {error}") from None
    seen: set[str] = set()
    for row in rows:
        if row.student in seen:
            raise ScoresError(f"{path}: {row.student} has two rows")
        seen.add(row.student)
    return rows


def outcome(row: ScoreRow, path: Path, reports: Path) -> StudentGrade:
    """The gradebook's row for one student of the export."""
    flags = [FLAG]
    if row.lateness and row.lateness.strip("0:"):
        flags.append(f"late={row.lateness}")
    if row.submissions:
        flags.append(f"submissions={row.submissions}")
    if row.status == "missing":
        flags.append("no_submission")
    elif row.status == "ungraded":
        flags.append("needs_review")
    score = row.score if row.status == "graded" else None
    return StudentGrade(row.student, path, reports / f"{safe_file_name(row.student)}.json", status=row.status,
                        score=score, max_score=row.max_points, flags=flags, detail=row.name, submitted=row.submitted)


def import_scores(path: Path, csv_path: Path, options: gradebook.Options, student_is: str = "sid",
                  progress=print) -> list[StudentGrade]:
    """Gradescope's export at ``path`` as the course's gradebook ``csv_path`` (and what
    ``options`` asks for besides); the rows.

    Raises:
        ScoresError, OptionsError, RosterError: the export or the options cannot be used.
    """
    rows = read(path, student_is)
    reports = gradebook.reports_folder(csv_path)
    reports.mkdir(parents=True, exist_ok=True)
    outcomes = [outcome(row, path, reports) for row in rows]
    students = [Student(o.student, path, [], submitted_at=o.submitted) for o in outcomes]
    gradebook.check(options, students)
    progress(f"Gradescope: {len(outcomes)} students from {path}")
    return gradebook.finish(outcomes, students, csv_path, options, f"gradescope-{secrets.token_hex(4)}", progress)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``import-gradescope`` command's arguments."""
    parser.add_argument("scores", type=Path, help="Gradescope's Download Grades CSV of the assignment")
    parser.add_argument("--csv", type=Path, required=True, help="the gradebook CSV to write")
    parser.add_argument("--student-is", choices=("sid", "email"), default="sid",
                        help="name each student by their SID (default) or their email")
    add_gradebook_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """``python -m course import-gradescope``."""
    if not args.scores.is_file():
        return usage_error("import-gradescope", f"{args.scores}: no such file")
    try:
        outcomes = import_scores(args.scores, args.csv, gradebook_options(args), args.student_is)
    except (ScoresError, OptionsError, RosterError) as error:
        return usage_error("import-gradescope", str(error))
    print(f"imported {len(outcomes)} students -> {args.csv}")
    return 0
