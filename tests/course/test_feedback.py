"""Feedback files a student can read and a TA can deliver (issue 28, items 1 and 6): what the
rubric's visibility allows and nothing more, grouped like Gradescope's text, plurals right,
the adjustment with its reason, the grader's notes, and Canvas's bulk upload of them."""
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from course import canvas, cli, discovery, feedback, gradebook
from course.outcomes import StudentGrade, save_rows
from grader.report import gradescope, report_from_json
from grader.rubric import load_rubric

RUBRIC = load_rubric()
SECRET = "2.2-backward"
NOT_VISIBLE = ("hidden", "after_due_date", "after_published")
STUB = "not implemented yet (Problem {problem}): it still raises NotImplementedError"


def criterion(criterion_id: str, status: str, message: str = "", output: str = "") -> dict:
    rubric_entry = next(c for c in RUBRIC.criteria if c.id == criterion_id)
    return {"id": criterion_id, "problem": rubric_entry.problem, "title": rubric_entry.title, "points": rubric_entry.points,
            "earned": rubric_entry.points if status == "passed" else 0, "status": status, "message": message,
            "seconds": 0.1, "output": output, "details": {}}


def report(criteria: list[dict], notes: tuple[str, ...] = ()) -> dict:
    return {"schema_version": 1, "submission": "x", "files": {"pipeline.py": "0" * 64}, "environment": {}, "seed": 1,
            "score": sum(c["earned"] for c in criteria), "max_score": sum(c["points"] for c in criteria),
            "blocked_points": 0, "complete": True, "notes": list(notes), "needs_review": True,
            "review_reasons": [f"{SECRET} replaced grader or torch code"], "policy_findings": [], "criteria": criteria}


def secret_report() -> dict:
    return report([criterion("2.2-forward", "passed"),
                   criterion(SECRET, "failed", "SECRET-MESSAGE: gradients differ", "SECRET-PRINTED\n"),
                   criterion("2.1-errors", "failed", "expected ValueError for M = -1")],
                  notes=(f"{SECRET}: your code left 1 process running after the criterion ended",
                         "pipeline.py from pipeline (1).py (a browser's rename of pipeline.py)"))


def write(tmp_path: Path, data: dict, rubric=RUBRIC, **kwargs) -> str:
    (tmp_path / "alice.json").write_text(json.dumps(data))
    outcome = StudentGrade("alice", tmp_path, tmp_path / "alice.json", score=data["score"])
    assert feedback.write_all([outcome], tmp_path / "out", rubric=rubric, **kwargs) == 1
    return (tmp_path / "out" / "alice.txt").read_text()


def rubric_with(visibility: str):
    return replace(RUBRIC, criteria=tuple(replace(c, visibility=visibility) if c.id == SECRET else c for c in RUBRIC.criteria))


@pytest.mark.parametrize("visibility", NOT_VISIBLE)
def test_a_criterion_the_student_may_not_see_leaves_no_trace(tmp_path, visibility):
    text = write(tmp_path, secret_report(), rubric_with(visibility))
    title = next(c.title for c in RUBRIC.criteria if c.id == SECRET)
    assert [trace for trace in (SECRET, title, "SECRET-MESSAGE", "SECRET-PRINTED") if trace in text] == [], text
    assert next(line for line in text.splitlines() if line.startswith("2.2")).split()[-1] == "4/4"  # not 4/7
    assert "2.1-errors (1 point): failed" in text and "(1 points)" not in text
    assert "note: pipeline.py from pipeline (1).py (a browser's rename of pipeline.py)" in text
    assert "review" not in text.lower() and "replaced grader" not in text  # the staff's business
    released = write(tmp_path, secret_report(), rubric_with(visibility), show=("visible", visibility))
    assert SECRET in released and "SECRET-MESSAGE" in released and "SECRET-PRINTED" in released


def test_feedback_is_grouped_as_gradescope_groups_it(tmp_path):
    """A mostly-stub student: one line per problem's shared message, as Gradescope shows it."""
    criteria = [criterion(c.id, "failed", STUB.format(problem=c.problem)) for c in RUBRIC.active() if c.needs == "cpu"]
    criteria[0] = criterion(criteria[0]["id"], "passed")
    data = {**report(criteria), "review_reasons": [], "needs_review": False}
    text = write(tmp_path, data)
    gradescope_text = gradescope(report_from_json(data), RUBRIC, 1.0)["output"]
    assert text[text.index("What went wrong:"):].strip() == gradescope_text[gradescope_text.index("What went wrong:"):].strip()
    problems = {c["problem"] for c in criteria}
    assert len(text.splitlines()) < len(problems) * 3 < len(criteria) * 2, text


def test_an_adjustment_is_said_with_its_reason(tmp_path):
    data = report([criterion("2.1-schedule", "passed"), criterion("2.1-errors", "failed", "expected ValueError")])
    reports = gradebook.reports_folder(tmp_path / "grades.csv")
    reports.mkdir()
    (reports / "alice.json").write_text(json.dumps(data))
    (tmp_path / "adjust.csv").write_text("student,late_penalty,override,reason\nalice,10,,2 days late (10% off)\n")
    outcome = StudentGrade("alice", tmp_path, reports / "alice.json", score=3.0, max_score=4.0)
    options = gradebook.Options(adjustments=tmp_path / "adjust.csv", feedback=tmp_path / "feedback")
    gradebook.finish([outcome], [discovery.Student("alice", tmp_path, [])], tmp_path / "grades.csv", options, "run",
                     progress=lambda line: None)
    text = (tmp_path / "feedback" / "alice.txt").read_text()
    assert "Score recorded by the course: 2.7 (graded 3; penalty 10%: 2 days late (10% off))" in text


def test_canvas_reupload_names_carry_the_user_and_one_of_their_files(tmp_path):
    download = tmp_path / "submissions.zip"
    with zipfile.ZipFile(download, "w") as archive:
        archive.writestr("lovelaceada_LATE_101_9005_pipeline-1.py", "x")
        archive.writestr("lovelaceada_101_9001_pipeline.py", "x")
        archive.writestr("lovelaceada_101_9003_tensor_parallel.py", "x")
        archive.writestr("turingalan_102_9002_pipeline.py", "x")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "lovelaceada_101.txt").write_text("Feedback for lovelaceada_101\n")
    assert feedback.canvas_zip(tmp_path / "out", download) == (1, ["turingalan_102"])
    with zipfile.ZipFile(tmp_path / "out" / feedback.CANVAS_ZIP) as archive:
        (name,) = archive.namelist()
        assert archive.read(name) == b"Feedback for lovelaceada_101\n"
    # Canvas takes the first two all-digit "_" parts: the user id, then a file of that submission
    assert [part for part in name.split("_") if part.isdigit()][:2] == ["101", "9003"]
    assert canvas.parse_download_name(name) is not None


def test_the_feedback_command_rebuilds_the_files_from_a_reports_folder(tmp_path, capsys):
    reports = tmp_path / "grades-reports"
    reports.mkdir()
    (reports / "lovelaceada_101.json").write_text(json.dumps(secret_report()))
    save_rows(reports, [StudentGrade("lovelaceada_101", tmp_path, reports / "lovelaceada_101.json", score=4.0)])
    download = tmp_path / "download"
    download.mkdir()
    (download / "lovelaceada_101_9001_pipeline.py").write_text("x")
    assert cli.main(["feedback", str(reports), "--out", str(tmp_path / "out"), "--show", "after_due_date",
                     "--canvas-download", str(download)]) == 0
    assert "1 feedback files" not in capsys.readouterr().out  # counted in words that agree
    assert SECRET in (tmp_path / "out" / "lovelaceada_101.txt").read_text()  # visible by default
    with zipfile.ZipFile(tmp_path / "out" / feedback.CANVAS_ZIP) as archive:
        assert archive.namelist() == ["lovelaceada_101_9001_feedback.txt"]
