"""Grade a folder of submissions into a gradebook CSV: ``python -m grader batch``.

    python -m grader batch FOLDER --csv grades.csv [--jobs N] [--timeout S]
                                  [--canvas [--assignment HEADER] [--roster EXPORT.csv]] [--html FILE]
                                  [--similarity-threshold SHARE] [--public-solutions DIR] [--no-similarity]

Every subfolder or ``.zip`` in FOLDER is one student, named after the folder or the zip's
stem. Each student is graded by ``python -m grader grade STUDENT --json REPORT`` in its own process
group, killed after ``--timeout`` seconds, so one student's crash, hang or garbage never stops
the batch. Reports and logs go to ``<csv stem>-reports/`` beside the CSV.

The default CSV has one row per student: ``student``, one column per problem (``2.1``,
``2.2``, ...), ``total``, ``max_score``, ``status`` (graded / timeout / error), ``flags``
(``;``-separated: ``missing:FILE``, ``criterion_errors=N``, ``blocked_points=X``,
``policy_findings=N`` (the static scan of grader/policy.py), ``duplicate_name``,
``similar_to=STUDENT`` (grader/similarity.py, run after grading), ``needs_review``) and ``report``. A score cell is empty when no
trustworthy score exists (the row then says needs_review); a timed-out student keeps the
points of the criteria finished before the timeout. ``--canvas`` writes Canvas's gradebook
import layout instead (see :func:`canvas_rows`). Every cell starting with ``= + - @`` (or a tab
or carriage return) is prefixed with ``'`` so a spreadsheet never runs it as a formula.
``--html`` also writes the class dashboard (grader/dashboard.py).
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from grader import similarity
from grader.layout import REPOSITORY, STUDENT_FILES
from grader.processes import kill_group
from grader.protocol import printable, read_json_report

CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


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


def find_students(folder: Path) -> list[tuple[str, Path, list[str]]]:
    """``(name, path, flags)`` for every subfolder and ``.zip`` of ``folder``, sorted by name."""
    entries = sorted(
        p for p in folder.iterdir()
        if not p.name.startswith(".") and (p.is_dir() or (p.is_file() and p.suffix.lower() == ".zip"))
    )
    students, seen = [], set()
    for path in entries:
        name = path.stem if path.is_file() else path.name
        flags = []
        if name in seen:  # alice/ and alice.zip: grade both, under distinct names
            name, flags = path.name, ["duplicate_name", "needs_review"]
        seen.add(name)
        students.append((name, path, flags))
    return students


def _safe_file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".") or "student"


def _apply_report(outcome: StudentGrade, report: dict) -> None:
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
    if report.get("needs_review") is True and "needs_review" not in outcome.flags:
        outcome.flags.append("needs_review")
    blocked = report.get("blocked_points")
    if isinstance(blocked, (int, float)) and blocked:
        outcome.flags.append(f"blocked_points={blocked:g}")


def grade_student(
    name: str, path: Path, reports: Path, timeout: float, grader_command: list[str], flags: list[str],
) -> StudentGrade:
    """Grade one student in a child process group; never raises for anything the student did.
    (As root, each grader process leases a uid of its own for its children, so concurrent
    students never share one: see grader.processes.lease_uid.)"""
    stem = _safe_file_name(name)
    outcome = StudentGrade(name, path, reports / f"{stem}.json", flags=list(flags))
    outcome.report_path.unlink(missing_ok=True)
    start = time.monotonic()
    with open(reports / f"{stem}.log", "wb") as log:
        process = subprocess.Popen(
            [*grader_command, str(path), "--json", str(outcome.report_path)],
            cwd=REPOSITORY, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process.pid)
            process.wait()
            returncode = None
    outcome.seconds = time.monotonic() - start
    report = read_json_report(outcome.report_path)
    if report is not None:
        _apply_report(outcome, report)
    if returncode is None:
        outcome.status, outcome.detail = "timeout", f"killed after {timeout:g} s"
        outcome.flags.append("needs_review")
    elif returncode != 0 or report is None:
        outcome.status = "error"
        outcome.detail = f"grader exit status {returncode}" + ("" if report else ", no valid report")
        outcome.flags.append("needs_review")
        if report is None:
            outcome.score = None
    outcome.flags = list(dict.fromkeys(outcome.flags))  # once each, in order
    return outcome


def escape_cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as text: control characters escaped, formula-like
    starts given a leading quote."""
    text = "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
    text = printable(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _problem_key(problem: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in problem.split("."))


def default_rows(outcomes: list[StudentGrade]) -> list[list[object]]:
    problems = sorted({p for o in outcomes for p in o.problems}, key=_problem_key)
    rows: list[list[object]] = [["student", *problems, "total", "max_score", "status", "flags", "report"]]
    for o in outcomes:
        scores = [o.problems.get(p) if o.score is not None else None for p in problems]
        rows.append([o.student, *scores, o.score, o.max_score, o.status, ";".join(o.flags), str(o.report_path)])
    return rows


def read_roster(path: Path) -> dict[str, dict[str, str]]:
    """A Canvas gradebook export, indexed by every identifier a folder may be named after."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        people = [row for row in csv.DictReader(handle) if (row.get("ID") or "").strip().isdigit()]
    index: dict[str, dict[str, str]] = {}
    for person in people:
        for key in ("SIS Login ID", "SIS User ID", "ID"):
            if person.get(key):
                index.setdefault(person[key].strip(), person)
    return index


def canvas_rows(outcomes: list[StudentGrade], assignment: str, roster: dict[str, dict[str, str]] | None) -> list[list[object]]:
    """Canvas's gradebook import layout: Student, ID, SIS User ID, SIS Login ID, Section, then
    one column for the assignment holding the total.

    The student's folder name is matched against the roster's SIS Login ID, SIS User ID or
    Canvas ID; matched rows take their identity columns from the roster. Without a roster the
    folder name goes into Student and SIS User ID. Unmatched or unscored rows are left with an
    empty score, which Canvas treats as "no change".
    """
    rows: list[list[object]] = [[*CANVAS_IDENTITY, assignment]]
    for o in outcomes:
        person = (roster or {}).get(o.student)
        if person is not None:
            identity = [person.get(key, "") for key in CANVAS_IDENTITY]
        else:
            identity = [o.student, "", o.student if roster is None else "", "", ""]
        rows.append([*identity, o.score])
    return rows


def write_csv(path: Path, rows: list[list]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([[escape_cell(cell) for cell in row] for row in rows])


def run_batch(
    folder: Path,
    csv_path: Path,
    jobs: int = 1,
    timeout: float = 900.0,
    canvas: bool = False,
    assignment: str = "Homework",
    roster: Path | None = None,
    grader_command: list[str] | None = None,
    progress=print,
    similarity_options: dict | None = None,
    html: Path | None = None,
) -> list[StudentGrade]:
    """Grade every student of ``folder``, write the CSV; return the outcomes in name order."""
    grader_command = grader_command or [sys.executable, "-m", "grader", "grade"]
    roster_index = read_roster(roster) if roster else None
    students = find_students(folder)
    reports = csv_path.parent / f"{csv_path.stem}-reports"
    reports.mkdir(parents=True, exist_ok=True)
    done, lock = 0, threading.Lock()

    def grade(student: tuple[str, Path, list[str]]) -> StudentGrade:
        nonlocal done
        outcome = grade_student(*student[:2], reports, timeout, grader_command, student[2])
        if roster_index is not None and outcome.student not in roster_index:
            outcome.flags += ["not_in_roster", "needs_review"]
            outcome.flags = list(dict.fromkeys(outcome.flags))
        with lock:
            done += 1
            score = "-" if outcome.score is None else f"{outcome.score:g}/{outcome.max_score or 0:g}"
            progress(printable(
                f"[{done:>{len(str(len(students)))}}/{len(students)}] {outcome.student:<24} {score:>9}  "
                f"{outcome.status:<7} {outcome.seconds:6.1f}s  {' '.join(outcome.flags)} {outcome.detail}".rstrip()
            ))
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcomes = list(pool.map(grade, students))
    if similarity_options is not None:  # flags only, never a score
        similarity.flag_batch(outcomes, reports, progress=progress, **similarity_options)
    rows = canvas_rows(outcomes, assignment, roster_index) if canvas else default_rows(outcomes)
    write_csv(csv_path, rows)
    if html is not None:
        from grader.dashboard import write

        write(reports, html)
    return outcomes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``batch`` command's arguments."""
    parser.add_argument("folder", type=Path, help="one subfolder or .zip per student")
    parser.add_argument("--csv", type=Path, required=True, help="the gradebook CSV to write")
    parser.add_argument("--jobs", type=int, default=1, help="students graded at once (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per student before it is killed")
    parser.add_argument("--canvas", action="store_true", help="write Canvas's gradebook import layout")
    parser.add_argument(
        "--assignment", default="Homework",
        help='Canvas column header; copy it from a gradebook export, e.g. "HW5 (123456)"',
    )
    parser.add_argument("--roster", type=Path, help="a Canvas gradebook export CSV to take identities from")
    parser.add_argument("--html", type=Path, help="also write the class dashboard (one HTML file) here")
    similarity.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """``python -m grader batch``."""
    problem = (
        f"{args.folder} is not a folder" if not args.folder.is_dir()
        else "--jobs must be >= 1 and --timeout > 0" if args.jobs < 1 or args.timeout <= 0
        else f"roster {args.roster} not found" if args.roster and not args.roster.is_file()
        else similarity.argument_problem(args)
    )
    if problem is not None:
        print(f"python -m grader batch: error: {problem}", file=sys.stderr)
        return 2
    start = time.monotonic()
    options = None if args.no_similarity else {"threshold": args.similarity_threshold, "public_folder": args.public_solutions}
    outcomes = run_batch(
        args.folder, args.csv, args.jobs, args.timeout, args.canvas, args.assignment, args.roster,
        similarity_options=options, html=args.html,
    )
    review = [o.student for o in outcomes if "needs_review" in o.flags]
    print(f"graded {len(outcomes)} students in {time.monotonic() - start:.1f} s -> {args.csv}")
    if review:
        print(f"needs review ({len(review)}): {', '.join(review)}")
    return 0
