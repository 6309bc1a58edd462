"""What grading one student gave, as the gradebook's row: shared by batch, Slurm, the
gradebook and the dashboard (each imports it; it imports none of them).

:class:`StudentGrade` is one row; :func:`apply_report` fills its scores and report flags from
a student's JSON report; :func:`default_rows` and :func:`write_csv` write the gradebook CSV,
every cell through :func:`escape_cell`; :func:`problem_key` orders problem ids (2.10 after 2.9).
:func:`save_rows` leaves the gradebook's final rows beside the reports (:data:`ROWS_FILE`), so the
dashboard shows every flag the CSV has, whichever flow (batch or Slurm) wrote it.
"""
from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from course import anonymous
from grader.layout import STUDENT_FILES
from grader.protocol import one_line, write_atomic

# The gradebook's rows, beside the students' reports: no student's file can have this name
# (student files are named by course.discovery.safe_file_name, which never writes "@").
ROWS_FILE = "gradebook@class.json"


@dataclass
class StudentGrade:
    """What grading one student produced: a row of the gradebook."""

    student: str
    path: Path
    report_path: Path
    status: str = "graded"
    score: float | None = None
    max_score: float | None = None
    problems: dict[str, float] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    seconds: float = 0.0
    detail: str = ""
    changes: list[dict] = field(default_factory=list)  # what a regrade changed (course.regrade)
    submitted: str = ""  # when, as the source says (ISO 8601; course.late), or ""
    # The course's score, set at each build of the gradebook (course.gradebook.apply_adjustments):
    final: float | None = None  # after the adjustment (late penalty, override); the raw total is `score`
    adjustment: str = ""  # "penalty 20%", "override 85", "" for none
    reason: str = ""  # the adjustment's, or what the late policy found (an extension, on time)

    def course_score(self) -> float | None:
        """The score the course records: the adjusted one where there is an adjustment, else the raw total."""
        return self.final if self.adjustment else self.score


def apply_report(outcome: StudentGrade, report: dict) -> None:
    """Scores per problem, total, max_score and the report's own flags: ``needs_review``
    whenever the report asks for a person, whatever the reason."""
    for criterion in report["criteria"]:
        problem = criterion["problem"]
        outcome.problems[problem] = outcome.problems.get(problem, 0) + criterion["earned"]
    outcome.score = sum(c["earned"] for c in report["criteria"])
    max_score = report.get("max_score")
    outcome.max_score = max_score if isinstance(max_score, (int, float)) else None
    files = report["files"] if isinstance(report.get("files"), dict) else {}
    outcome.flags += [f"missing:{name}" for name in STUDENT_FILES if name not in files]
    errors = sum(1 for c in report["criteria"] if c.get("status") == "error")
    if errors:
        outcome.flags += [f"criterion_errors={errors}", "needs_review"]
    findings = report.get("policy_findings")
    if isinstance(findings, list) and findings:
        outcome.flags.append(f"policy_findings={len(findings)}")
    reasons = report.get("review_reasons")
    if (report.get("needs_review") is True or (isinstance(reasons, list) and reasons)) and "needs_review" not in outcome.flags:
        outcome.flags.append("needs_review")
    blocked = report.get("blocked_points")
    if isinstance(blocked, (int, float)) and blocked:
        outcome.flags.append(f"blocked_points={blocked:g}")


def escape_cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as text, on one line: control characters and line
    breaks escaped (a student's name is a folder's), formula-like starts given a leading quote."""
    text = "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
    text = one_line(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text  # (a tab or CR start is escaped already)


def one_line_each(progress: Callable[[str], object]) -> Callable[[str], object]:
    """``progress`` (``print``, a test's ``list.append``) given every line through
    :func:`grader.protocol.one_line`: the lines name students, files and folders of
    submissions, which must not start lines of their own or reach the terminal as control
    characters (idempotent: a line shown once is shown the same again)."""
    return lambda line: progress(one_line(line))


def problem_key(problem: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in problem.split("."))


def report_cell(report_path: Path, base: Path | None) -> str:
    """``report_path`` as the CSV's ``report`` column gives it: relative to ``base`` (the CSV's
    folder), so the CSV and its reports folder can move together; absolute where no relative
    path exists (another drive on Windows)."""
    if base is None:
        return str(report_path)
    try:
        return os.path.relpath(report_path, base)
    except ValueError:
        return str(Path(report_path).resolve())


def default_rows(outcomes: list[StudentGrade], base: Path | None = None, adjusted: bool = False,
                 late: bool = False, pseudonyms: dict[str, str] | None = None) -> list[list[object]]:
    """The gradebook CSV's rows; report paths relative to ``base`` (the CSV's folder). ``adjusted``
    (adjustments or a late policy): ``adjustment`` and ``final`` after the grader's raw ``total``,
    the adjustment's ``reason`` last; ``late`` (a late policy): the ``submitted`` time too.
    ``pseudonyms`` (anonymous grading): students named by pseudonym, no report paths."""
    problems = sorted({p for o in outcomes for p in o.problems}, key=problem_key)
    final = ["adjustment", "final"] if adjusted else []
    after = (["submitted"] if late else []) + (["reason"] if adjusted else [])
    rows: list[list[object]] = [["student", *problems, "total", *final, "max_score", "status", "flags", "report", *after]]
    for o in outcomes:
        scores = [o.problems.get(p) if o.score is not None else None for p in problems]
        course = [o.adjustment, o.course_score()] if adjusted else []
        tail = ([o.submitted] if late else []) + ([o.reason] if adjusted else [])
        if pseudonyms is None:
            rows.append([o.student, *scores, o.score, *course, o.max_score, o.status, ";".join(o.flags),
                         report_cell(o.report_path, base), *tail])
        else:
            rows.append([pseudonyms[o.student], *scores, o.score, *course, o.max_score, o.status,
                         ";".join(anonymous.flags(o.flags, pseudonyms)), "", *tail])
    return rows


def write_csv(path: Path, rows: list[list]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([[escape_cell(cell) for cell in row] for row in rows])


def save_rows(reports: Path, outcomes: list[StudentGrade]) -> None:
    """The gradebook's rows as the CSV has them, into ``reports``/:data:`ROWS_FILE`."""
    rows = [{"student": o.student, "status": o.status, "score": o.score, "max_score": o.max_score, "flags": o.flags,
             "detail": o.detail, "report": o.report_path.name, "final": o.course_score(), "adjustment": o.adjustment,
             "reason": o.reason, "submitted": o.submitted} for o in outcomes]
    reports.mkdir(parents=True, exist_ok=True)
    write_atomic(reports / ROWS_FILE, json.dumps(rows, indent=1) + "\n")


def load_rows(reports: Path) -> dict[str, dict]:
    """``{report file name: row}`` from :func:`save_rows`; empty when there is none or it is unreadable."""
    try:
        rows = json.loads((reports / ROWS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {row["report"]: row for row in rows if isinstance(row, dict) and isinstance(row.get("report"), str)
            and isinstance(row.get("student"), str) and isinstance(row.get("flags"), list)} if isinstance(rows, list) else {}
