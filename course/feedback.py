"""Each student's feedback as a file of its own, for a course that does not hand results back
through Gradescope: what the student sees, from their JSON report.

    python -m course batch FOLDER --csv grades.csv --feedback DIR        (after grading)
    python -m course feedback REPORTS --out DIR [--show after_due_date ...]
                                      [--canvas-download DOWNLOAD.zip]    (again, from the reports)

``DIR/<student>.txt`` is Gradescope's text for that student (grader.report.summary): the score
per problem and in total (blocked criteria apart), each criterion not passed with its message
and the last lines its code printed, failures that share a message on one line, the report's
notes, and the course's score: the raw one, the adjustment (late policy, adjustments file) with
its reason, and the final one, as the last build of the gradebook set them (the command reads them
from the reports folder's rows). Only criteria whose rubric ``visibility``
is ``visible`` (or is one that ``--show`` releases) appear, and nothing of the others. Nothing
a TA alone should see: no flags, no review reasons, no similarity, no policy findings.

``--canvas-download`` also writes ``DIR/canvas-feedback.zip`` for Canvas's Assignments >
Re-Upload Submissions, which attaches each file to its student's submission as a comment:
Canvas reads the first two all-digit ``_`` parts of each name as the user id and the id of
one of that submission's files, so each file is named like the student's download,
``<name>_<user id>_<attachment id>_feedback.txt`` (:func:`canvas_entry`).
"""
from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

from course import canvas
from course.discovery import safe_file_name
from course.outcomes import ROWS_FILE, StudentGrade, load_rows
from grader.protocol import one_line, printable, read_json_report
from grader.report import counted, report_from_json, summary
from grader.rubric import VISIBILITIES, Rubric

CANVAS_ZIP = "canvas-feedback.zip"


def shown_ids(report: dict, rubric: Rubric, show: tuple[str, ...] = ("visible",)) -> set[str]:
    """The report's criteria whose rubric visibility is one of ``show`` (a criterion the
    rubric no longer has counts as visible)."""
    visibility = {criterion.id: criterion.visibility for criterion in rubric.criteria}
    return {str(c.get("id")) for c in report["criteria"] if isinstance(c, dict)
            and visibility.get(str(c.get("id")), "visible") in show}


def course_lines(outcome: StudentGrade) -> list[str]:
    """What the course made of the grader's score: the adjustment with its reason and the final
    score, or what the late policy found (an extension, on time); none when it said nothing."""
    if outcome.adjustment:
        raw = "-" if outcome.score is None else f"{outcome.score:g}"
        final = "-" if outcome.final is None else f"{outcome.final:g}"
        return ["", f"Score recorded by the course: {final} (graded {raw}; {outcome.adjustment}: "
                    f"{outcome.reason or 'set by the course staff'})"]
    return ["", f"Submission: {outcome.reason}"] if outcome.reason else []


def text(outcome: StudentGrade, report: dict, rubric: Rubric, show: tuple[str, ...] = ("visible",)) -> str:
    """The feedback of one student from their report, with the course's adjustment of it."""
    lines = [f"Feedback for {one_line(outcome.student)}", *course_lines(outcome)]
    view = summary(report_from_json(report), rubric, blocked_apart=True, shown=shown_ids(report, rubric, show),
                   review=False)
    return printable("\n".join(lines)) + "\n" + view + "\n"


def write_all(outcomes: list[StudentGrade], folder: Path, rubric: Rubric | None = None,
              show: tuple[str, ...] = ("visible",)) -> int:
    """One file per student with a report; the number written."""
    from grader.rubric import load_rubric  # imports the checks (torch): only when feedback is written

    rubric = rubric or load_rubric()
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for outcome in outcomes:
        report = read_json_report(outcome.report_path)
        if report is None:
            continue
        (folder / f"{safe_file_name(outcome.student)}.txt").write_text(text(outcome, report, rubric, show), encoding="utf-8")
        written += 1
    return written


def canvas_entry(submission: canvas.CanvasSubmission) -> str:
    """The name Canvas's Re-Upload Submissions files a feedback file under: the student's user id
    and the attachment id of one of their graded files, as in their download."""
    file = min(submission.files.values(), key=lambda f: f.attachment_id)
    return f"{submission.name}_{submission.canvas_id}_{file.attachment_id}_feedback.txt"


def canvas_zip(folder: Path, download: Path) -> tuple[int, list[str]]:
    """``folder/canvas-feedback.zip`` from the feedback files of the students in Canvas's
    ``download`` (its zip or unpacked folder); ``(files zipped, students without feedback)``."""
    if download.is_dir():
        entries = [p.name for p in download.iterdir() if p.is_file()]
    else:
        with zipfile.ZipFile(download) as archive:
            entries = [info.filename for info in archive.infolist() if not info.is_dir()]
    submissions, _ = canvas.group_download(entries)
    zipped, missing = 0, []
    with zipfile.ZipFile(folder / CANVAS_ZIP, "w", zipfile.ZIP_DEFLATED) as archive:
        for submission in submissions:
            feedback = folder / f"{safe_file_name(submission.student)}.txt"
            if not feedback.is_file():
                missing.append(submission.student)
                continue
            archive.write(feedback, canvas_entry(submission))
            zipped += 1
    return zipped, missing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``feedback`` command's arguments."""
    parser.add_argument("reports", type=Path, help="the <csv stem>-reports/ folder that `python -m course batch` wrote")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write <student>.txt files to")
    parser.add_argument("--show", nargs="+", choices=VISIBILITIES[1:], default=[], metavar="VISIBILITY",
                        help="also show the criteria of these visibilities (after_due_date, after_published, hidden), "
                             "e.g. once the due date has passed")
    parser.add_argument("--canvas-download", type=Path, metavar="DOWNLOAD",
                        help="Canvas's Download Submissions zip (or its unpacked folder) the batch graded: also write "
                             f"OUT/{CANVAS_ZIP} for Canvas's Re-Upload Submissions")


def run(args: argparse.Namespace) -> int:
    """``python -m course feedback``."""
    rows = load_rows(args.reports)
    if not rows:
        print(f"python -m course feedback: error: {args.reports} has no {ROWS_FILE} (give the reports folder of a batch)",
              file=sys.stderr)
        return 2
    outcomes = [StudentGrade(row["student"], args.reports, args.reports / name, score=row.get("score"),
                             final=row.get("final"), adjustment=str(row.get("adjustment") or ""),
                             reason=str(row.get("reason") or "")) for name, row in rows.items()]
    written = write_all(outcomes, args.out, show=("visible", *args.show))
    print(f"feedback: {counted(written, 'file')} -> {args.out}")
    if args.canvas_download:
        zipped, missing = canvas_zip(args.out, args.canvas_download)
        print(f"Canvas: {counted(zipped, 'feedback file')} -> {args.out / CANVAS_ZIP} (upload it with Re-Upload Submissions)")
        if missing:
            print(one_line(f"Canvas: no feedback for {', '.join(missing)} (no report)"))
    return 0
