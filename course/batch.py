"""Grade a folder of submissions into a gradebook CSV: ``python -m course batch``.

    python -m course batch FOLDER --csv grades.csv [--jobs N] [--timeout S] [--only ID ...]
                                  [--canvas FILE --assignment HEADER [--roster EXPORT.csv] [--name-is KIND]]
                                  [--gpu-reports DIR] [--html FILE] [--feedback DIR] [--rubric FILE]
                                  [--late-policy FILE] [--adjustments FILE] [--anonymous] [--rerun-failed]
                                  [--similarity-threshold SHARE] [--public-solutions DIR] [--no-similarity]

FOLDER holds one subfolder, ``.zip``, ``.tar.gz`` or ``.tgz`` per student, or is a Canvas
"Download Submissions" zip or folder (see course.discovery). Each student is graded by
``python -m grader grade STUDENT --json REPORT`` in its own process group, killed after
``--timeout`` seconds, so one student's crash, hang or garbage never stops the batch.
Reports and logs go to ``<csv stem>-reports/`` beside the CSV.

The CSV has one row per student: ``student``, one column per problem (``2.1``,
``2.2``, ...), ``total``, ``max_score``, ``status`` (graded / timeout / error), ``flags``
(``;``-separated: ``missing:FILE``, ``criterion_errors=N``, ``blocked_points=X``,
``policy_findings=N`` (the static scan of grader/policy.py), ``duplicate_name``, ``late``,
``not_in_roster``, the GPU flags of course.gradebook, ``similar_to=STUDENT`` (course/similarity.py,
run after grading: flags only, never a score), ``needs_review``) and ``report``. A
score cell is empty when no trustworthy score exists (the row then says needs_review); a
timed-out student keeps the points of the criteria finished before the timeout. ``--only``
on a class whose reports exist regrades those criteria and keeps every other result (see
course.regrade). ``--canvas FILE`` also writes Canvas's gradebook import (course.canvas).
Every cell starting with ``= + - @`` (or a tab or carriage return) is prefixed with ``'``
so a spreadsheet never runs it as a formula. ``--html`` also writes the class dashboard
(course/dashboard.py).

Every run ends in a build of the gradebook (course.gradebook.finish), also when nobody is
graded again (``--rerun-failed`` with nobody failed): reports graded under another version of
``--rubric`` are re-scored or named for a regrade (course.rescore); ``--late-policy`` and
``--adjustments`` add ``adjustment``, ``final``, ``submitted`` and ``reason`` columns and the
late-work flags (course.late, course.adjustments); ``--anonymous`` names students by pseudonym
(course.anonymous); the changelog gets the real changes only (course.changelog).
"""
from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course import gradebook, regrade, similarity
from course.canvas import OptionsError, RosterError
from course.discovery import DiscoveryError, Student, discover, safe_file_name
from course.outcomes import StudentGrade, apply_report, one_line_each
from grader.layout import REPOSITORY
from grader.processes import kill_group
from grader.protocol import one_line, read_json_report, report_text, write_atomic


def grade_student(
    name: str, path: Path, reports: Path, timeout: float, grader_command: list[str], flags: list[str],
    only: list[str] | None = None,
) -> StudentGrade:
    """Grade one student in a child process group; never raises for anything the student did.
    (As root, each grader process leases a uid of its own for its children, so concurrent
    students never share one: see grader.processes.lease_uid.)

    With ``only``, grade just those criteria; when the student already has a report, that is
    a regrade: the new results replace those criteria in it and ``changes`` lists what moved.
    """
    stem = safe_file_name(name)
    outcome = StudentGrade(name, path, reports / f"{stem}.json", flags=list(flags))
    previous = read_json_report(outcome.report_path) if only else None
    target = outcome.report_path if previous is None else reports / f"{stem}.regrade.json"
    target.unlink(missing_ok=True)
    start = time.monotonic()
    with open(reports / f"{stem}.log", "ab" if previous else "wb") as log:
        process = subprocess.Popen(
            [*grader_command, str(path), "--json", str(target), *(["--only", *only] if only else [])],
            cwd=REPOSITORY, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process.pid)
            process.wait()
            returncode = None
    outcome.seconds = time.monotonic() - start
    report = read_json_report(target)
    if previous is not None:
        report = _regraded(outcome, previous, report, target)
    if report is not None:
        apply_report(outcome, report)
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


def _regraded(outcome: StudentGrade, previous: dict, report: dict | None, target: Path) -> dict:
    """The student's report after a regrade: ``previous`` with the regraded criteria
    replaced, written in its place; unchanged (and flagged) when the regrade gave nothing."""
    target.unlink(missing_ok=True)
    if report is None:
        outcome.flags += ["regrade_failed", "needs_review"]
        return previous
    merged, outcome.changes = regrade.merge(previous, report, "regrade")
    write_atomic(outcome.report_path, report_text(merged))
    return merged


def run_batch(
    folder: Path,
    csv_path: Path,
    jobs: int = 1,
    timeout: float = 900.0,
    options: gradebook.Options | None = None,
    only: list[str] | None = None,
    grader_command: list[str] | None = None,
    progress=print,
    rerun_failed: bool = False,
) -> list[StudentGrade]:
    """Grade every student of ``folder``, then do what ``options`` asks for (the similarity
    pass, the CSV, Canvas's file, the dashboard: :func:`course.gradebook.finish`, as ``slurm
    merge`` does); return the rows in name order. With ``rerun_failed``, grade only the
    students whose last run (of ``batch`` or Slurm, for this CSV) was killed, timed out,
    failed or never recorded (a Slurm task that died); keep everyone else's results.

    Raises:
        DiscoveryError, OptionsError, RosterError: the folder cannot be read, or the options do
            not fit (before anyone is graded).
    """
    progress = one_line_each(progress)
    options = options or gradebook.Options()
    grader_command = grader_command or default_grader(sys.executable, options)
    students, notes = discover(folder, gradebook.submissions_folder(csv_path))
    roster = gradebook.check(options, students)
    for line in [*notes, *gradebook.notes(options, roster)]:
        progress(line)
    reports = gradebook.reports_folder(csv_path)
    reports.mkdir(parents=True, exist_ok=True)
    run = f"batch-{secrets.token_hex(4)}"
    kept = previous_results(students, reports) if rerun_failed else {}
    if rerun_failed:
        progress(f"--rerun-failed: {len(students) - len(kept)} of {len(students)} students to grade again")
    graded = grade_all([s for s in students if s.name not in kept], reports, timeout, grader_command, only,
                       max(1, jobs), run, progress)
    by_name = {o.student: o for o in graded} | kept
    return gradebook.finish([by_name[s.name] for s in students], students, csv_path, options, run, progress)


def default_grader(python: str, options: gradebook.Options) -> list[str]:
    """The command that grades one student (PATH --json REPORT follow), with the options' rubric."""
    return [python, "-m", "grader", "grade", *(["--rubric", str(options.rubric)] if options.rubric else [])]


def previous_results(students: list[Student], reports: Path) -> dict[str, StudentGrade]:
    """The students whose last recorded run finished (status ``graded``), with that record."""
    kept = {}
    for student in students:
        record = gradebook.load_outcome(student.name, reports / "outcomes", None)
        if record is not None and record.status == "graded":
            kept[student.name] = record
    return kept


def grade_all(
    students: list[Student], reports: Path, timeout: float, grader_command: list[str], only: list[str] | None,
    jobs: int, run: str, progress,
) -> list[StudentGrade]:
    """Grade ``students``, ``jobs`` at a time (each grader process leases a uid of its own for
    its children, see grader.processes.lease_uid), each leaving an outcome record of run ``run``."""
    done, lock = 0, threading.Lock()

    def grade(student: Student) -> StudentGrade:
        nonlocal done
        outcome = grade_student(student.name, student.path, reports, timeout, grader_command, student.flags, only)
        gradebook.save_outcome(outcome, run, reports / "outcomes")
        with lock:
            done += 1
            progress(progress_line(outcome, done, len(students)))
        return outcome

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(grade, students))


def progress_line(outcome: StudentGrade, done: int, total: int) -> str:
    score = "-" if outcome.score is None else f"{outcome.score:g}/{outcome.max_score or 0:g}"
    return (
        f"[{done:>{len(str(total))}}/{total}] {outcome.student:<24} {score:>9}  "
        f"{outcome.status:<7} {outcome.seconds:6.1f}s  {' '.join(outcome.flags)} {outcome.detail}".rstrip()
    )


def add_gradebook_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of what is written besides the CSV (shared with ``slurm``)."""
    parser.add_argument("--canvas", type=Path, metavar="FILE", help="also write Canvas's gradebook import to FILE")
    parser.add_argument(
        "--assignment",
        help='the Canvas column header, copied from a gradebook export, e.g. "HW5 (123456)" (needed with --canvas)',
    )
    parser.add_argument("--roster", type=Path, help="a Canvas gradebook export CSV to match students against")
    parser.add_argument(
        "--name-is", choices=("login", "sis", "canvas"),
        help="what the folder names are: SIS Login ID, SIS User ID or Canvas ID (needed with --canvas without --roster)",
    )
    parser.add_argument("--gpu-reports", type=Path, metavar="DIR",
                        help="GPU reports to merge (default: <csv stem>-reports/gpu/ when it exists)")
    parser.add_argument("--canvas-without-gpu", action="store_true",
                        help="a class graded without GPUs: write the CPU score to Canvas for students whose GPU "
                             "criteria are blocked (default: an empty cell until the GPU merge)")
    parser.add_argument("--html", type=Path, help="also write the class dashboard (one HTML file) here")
    parser.add_argument("--adjustments", type=Path, metavar="FILE",
                        help="late penalties, extensions and manual overrides per student (a CSV: student,late_penalty,"
                             "override,reason); the CSV gets a final column, Canvas the final score")
    parser.add_argument("--anonymous", action="store_true",
                        help="anonymous grading: stable pseudonyms instead of names in the CSV (no report paths) and the "
                             "dashboard, similarity pairs included; Canvas's import and the feedback files keep ids")
    parser.add_argument("--late-policy", type=Path, metavar="FILE",
                        help="the due date, late policy, extensions and late days (TOML, course/late.py): applied at "
                             "every build; the CSV gets adjustment, final, submitted and reason columns, Canvas the final score")
    parser.add_argument("--feedback", type=Path, metavar="DIR",
                        help="also write each student's feedback (their view of the report) to DIR/<student>.txt")
    parser.add_argument("--rubric", type=Path, metavar="FILE",
                        help="grade with this rubric instead of grader/rubric.toml; a report graded with another "
                             "version of it is re-scored where only points changed, or named for a regrade")


def gradebook_options(args: argparse.Namespace) -> gradebook.Options:
    """The options of a command line; the similarity pass where the command has its options."""
    threshold = None if getattr(args, "no_similarity", True) else args.similarity_threshold
    return gradebook.Options(args.canvas, args.assignment, args.roster, args.name_is, args.gpu_reports, args.html,
                             threshold, getattr(args, "public_solutions", None), args.canvas_without_gpu, args.adjustments,
                             args.feedback, args.rubric, args.late_policy, args.anonymous)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``batch`` command's arguments."""
    parser.add_argument("folder", type=Path, help="one subfolder, .zip, .tar.gz or .tgz per student, or a Canvas download")
    parser.add_argument("--csv", type=Path, required=True, help="the gradebook CSV to write")
    parser.add_argument("--jobs", type=int, default=1, help="students graded at once (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per student before it is killed")
    parser.add_argument("--only", nargs="+", action="extend", metavar="PROBLEM_OR_ID",
                        help="grade only these criteria; where a report exists, regrade them and keep the others")
    parser.add_argument("--rerun-failed", action="store_true",
                        help="grade again only the students whose last run for this CSV was killed, timed out, failed "
                             "or died with its Slurm task; keep the others' results")
    add_gradebook_arguments(parser)
    similarity.add_arguments(parser)


def usage_error(command: str, message: str) -> int:
    print(one_line(f"python -m course {command}: error: {message}"), file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """``python -m course batch``."""
    if not args.folder.exists():
        return usage_error("batch", f"{args.folder}: no such folder or file")
    if args.jobs < 1 or args.timeout <= 0:
        return usage_error("batch", "--jobs must be >= 1 and --timeout > 0")
    problem = (only_problem(args.only, args.rubric) if args.only else None) or similarity.argument_problem(args)
    if problem is not None:
        return usage_error("batch", problem)
    start = time.monotonic()
    try:
        outcomes = run_batch(args.folder, args.csv, args.jobs, args.timeout, gradebook_options(args), args.only,
                             rerun_failed=args.rerun_failed)
    except (DiscoveryError, OptionsError, RosterError) as error:
        return usage_error("batch", str(error))
    review = [o.student for o in outcomes if "needs_review" in o.flags]
    print(f"graded {len(outcomes)} students in {time.monotonic() - start:.1f} s -> {args.csv}")
    if review:
        print(one_line(f"needs review ({len(review)}): {', '.join(review)}"))
    return 0


def only_problem(only: list[str], rubric: Path | None = None) -> str | None:
    """Why ``--only`` names no criterion of the rubric (before anyone is graded), or None."""
    from grader.grading import select  # imports torch: only when --only is given
    from grader.layout import DEFAULT_RUBRIC
    from grader.rubric import RubricError, load_rubric

    try:
        select(load_rubric(rubric or DEFAULT_RUBRIC).active(), only)
    except (ValueError, RubricError, OSError) as error:
        return str(error)
    return None
