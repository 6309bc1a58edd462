"""Each student's feedback as a file of its own (``--feedback DIR``), for a course that does not
hand results back through Gradescope: what the student sees, from their JSON report.

``DIR/<student>.txt`` holds the score per problem and in total (blocked criteria apart, as on
Gradescope), then each criterion not passed with its message and the last lines its code
printed, and the report's notes. Nothing a TA alone should see: no flags, no similarity, no
policy findings.
"""
from __future__ import annotations

from pathlib import Path

from course.discovery import safe_file_name
from course.outcomes import StudentGrade, problem_key
from grader.protocol import printable, read_json_report

OUTPUT_LINES = 15


def _points(value: float) -> str:
    return f"{value:g}"


def text(student: str, report: dict, final: float | None = None) -> str:
    """The feedback of one student from their report (``final``: the course's adjusted score)."""
    criteria = [c for c in report["criteria"] if isinstance(c, dict)]
    graded = [c for c in criteria if c.get("status") != "blocked"]
    lines = [f"Feedback for {student}", ""]
    for problem in sorted({c["problem"] for c in graded}, key=problem_key):
        own = [c for c in graded if c["problem"] == problem]
        lines.append(f"Problem {problem:<6} {_points(sum(c['earned'] for c in own)):>6} / {_points(sum(c.get('points', 0) for c in own))}")
    earned, possible = sum(c["earned"] for c in graded), sum(c.get("points", 0) for c in graded)
    lines.append(f"Total          {_points(earned):>6} / {_points(possible)}")
    if final is not None and final != earned:
        lines.append(f"Recorded score {_points(final):>6} (after the course's adjustment: late penalty or regrade)")
    blocked = [c for c in criteria if c.get("status") == "blocked"]
    if blocked:
        lines.append(f"Not graded here (graded separately on GPUs): {', '.join(str(c.get('id')) for c in blocked)}")
    missed = [c for c in graded if c.get("status") != "passed"]
    if missed:
        lines += ["", "What went wrong:"]
        for criterion in missed:
            lines.append(f"- {criterion.get('id')} ({_points(criterion.get('points', 0))} points): {criterion.get('status')}")
            lines += [f"    {line}" for line in str(criterion.get("message") or "").splitlines()]
            output = str(criterion.get("output") or "").rstrip("\n").splitlines()[-OUTPUT_LINES:]
            if output:
                lines += ["    your code printed (last lines):", *(f"      | {line}" for line in output)]
    notes = [note for note in report.get("notes", []) if isinstance(note, str)]
    if notes:
        lines += ["", *(f"note: {note}" for note in notes)]
    return printable("\n".join(lines)) + "\n"


def write_all(outcomes: list[StudentGrade], folder: Path, finals: dict[str, float | None] | None = None) -> int:
    """One file per student with a report; the number written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for outcome in outcomes:
        report = read_json_report(outcome.report_path)
        if report is None:
            continue
        final = (finals or {}).get(outcome.student)
        (folder / f"{safe_file_name(outcome.student)}.txt").write_text(text(outcome.student, report, final), encoding="utf-8")
        written += 1
    return written
