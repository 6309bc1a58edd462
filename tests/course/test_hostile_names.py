"""A student's name is a folder's name, chosen by whoever made the folder: running a class shows
it on one line, its control characters escaped, everywhere a TA reads it (the batch's progress
lines and summary, the gradebook CSV, each student's feedback file, the dashboard), and names
from inside the student's submission, quoted in the report's notes, the same way.

The class is graded by a fake grader (it writes a report whose note and message quote the
student's folder name, as the real grader's notes quote names from an archive)."""
from __future__ import annotations

import argparse
import csv
import re
import sys
import textwrap
from pathlib import Path

from course import batch, gradebook
from course.outcomes import StudentGrade

# A folder name that would forge a progress line, a CSV row and the summary, clear the screen,
# ring the bell and reverse what follows it; FORGED marks every line it could add.
HOSTILE = "eve\n[ 9 of 9] FORGED                 90 of 90  graded\r\nFORGED\x1b[2J\x07\u202eFORGED\u2028FORGED\t"
FORGERY = "FORGED"
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
GRADER = textwrap.dedent('''\
    import json, sys
    from pathlib import Path
    path, report = Path(sys.argv[1]), Path(sys.argv[3])
    criteria = [{"id": "2.1-schedule", "problem": "2.1", "title": "t", "points": 8, "earned": 0, "status": "failed",
                 "message": "your folder " + path.name + " failed", "seconds": 0.1, "output": "", "details": {}}]
    report.write_text(json.dumps({"schema_version": 1, "submission": str(path), "files": {"pipeline.py": "0" * 64},
        "environment": {}, "seed": 1, "score": 0, "max_score": 8, "blocked_points": 0, "complete": True,
        "notes": ["ignored files in the submission: " + path.name + "/conftest.py"], "needs_review": True,
        "review_reasons": ["policy scan: " + path.name], "policy_findings": [], "criteria": criteria}))
    ''')


def _assert_on_own_lines(where: str, text: str, indented_ok: bool = False) -> None:
    """No control character reaches the reader, and no line is the name's own (``indented_ok``:
    but for the lines of a criterion's message, which may have lines and are shown indented)."""
    assert not UNSAFE.search(text.replace("\n", "")), f"{where}: control characters in {text!r}"
    forged = [line for line in text.splitlines() if (line if indented_ok else line.lstrip()).startswith(FORGERY)]
    assert forged == [], f"{where}: lines of the student's own: {forged}"


def _graded_class(tmp_path: Path) -> tuple[list[str], list[StudentGrade], Path]:
    for name in ("alice", HOSTILE):
        (tmp_path / "class" / name).mkdir(parents=True)
        (tmp_path / "class" / name / "pipeline.py").write_text("")
    (tmp_path / "class" / f"{HOSTILE}.txt").write_text("not a student")  # a skipped entry's note names it too
    (tmp_path / "grader.py").write_text(GRADER)
    lines: list[str] = []
    options = gradebook.Options(html=tmp_path / "class.html", feedback=tmp_path / "feedback")
    outcomes = batch.run_batch(tmp_path / "class", tmp_path / "out" / "grades.csv", timeout=60, options=options,
                               grader_command=[sys.executable, str(tmp_path / "grader.py")], progress=lines.append)
    return lines, outcomes, tmp_path / "out" / "grades.csv"


def test_a_hostile_student_name_stays_on_its_line_in_every_view(tmp_path):
    lines, outcomes, csv_path = _graded_class(tmp_path)
    assert HOSTILE in {o.student for o in outcomes}
    assert any(FORGERY in line for line in lines)  # the batch names the student, escaped
    for line in lines:
        _assert_on_own_lines("progress", line)
    with open(csv_path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert any(FORGERY in cell for row in rows for cell in row)
    for row in rows:
        for cell in row:
            _assert_on_own_lines("CSV", cell)
    feedback = next((tmp_path / "feedback").glob("eve*.txt")).read_text(encoding="utf-8")
    assert FORGERY in feedback
    _assert_on_own_lines("feedback", feedback, indented_ok=True)  # a message's own lines are indented
    page = (tmp_path / "class.html").read_text(encoding="utf-8")
    assert FORGERY in page and not UNSAFE.search(page.replace("\n", "")), "the dashboard shows control characters"


def test_the_batch_command_says_who_needs_review_on_one_line(tmp_path, monkeypatch, capsys):
    outcome = StudentGrade(HOSTILE, tmp_path, tmp_path / "eve.json", flags=["needs_review"])
    monkeypatch.setattr(batch, "run_batch", lambda *args, **kwargs: [outcome])
    (tmp_path / "class").mkdir()
    arguments = argparse.ArgumentParser()
    batch.add_arguments(arguments)
    assert batch.run(arguments.parse_args([str(tmp_path / "class"), "--csv", str(tmp_path / "grades.csv")])) == 0
    shown = capsys.readouterr()
    assert FORGERY in shown.out
    _assert_on_own_lines("terminal", shown.out + shown.err)
