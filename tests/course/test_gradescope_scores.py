"""Gradescope's Download Grades CSV back into the course's gradebook, dashboard and Canvas
import (issue 28, item 8), in both layouts Gradescope has exported."""
import csv
from pathlib import Path

import pytest

from course import cli, dashboard, gradebook, gradescope_scores

EXPORT = (
    "First Name,Last Name,SID,Email,Sections,Total Score,Max Points,Status,Submission ID,Submission Time,"
    "Lateness (H:M:S),View Count,Submission Count,1: Autograder (90.0 pts),2: GPU speedup (10.0 pts)\n"
    "Ada,Lovelace,s001,ada@example.edu,Sec A,85.0,100.0,Graded,5005,2024-05-01 23:50:00 -0700,00:00:00,3,4,78.0,7.0\n"
    "Alan,Turing,s002,alan@example.edu,Sec B,100.0,100.0,Graded,5006,2024-05-02 01:30:00 -0700,01:30:00,1,1,90.0,10.0\n"
    "Grace,Hopper,s003,grace@example.edu,Sec A,,100.0,Missing,,,,0,0,,\n"
    "Edsger,Dijkstra,s004,edsger@example.edu,Sec B,,100.0,Ungraded,5008,2024-05-01 20:00:00 -0700,00:00:00,0,1,,\n"
)
OLD_EXPORT = (  # Gradescope's older layout: one Name column
    "Name,SID,Email,Total Score,Max Points,Status,Submission ID,Submission Time,Lateness (H:M:S),View Count,"
    "Submission Count,1: Autograder (100.0 pts)\n"
    "Ada Lovelace,s001,ada@example.edu,85.0,100.0,Graded,5005,2024-05-01 23:50:00 -0700,00:00:00,3,4,85.0\n"
)
ROSTER = ("Student,ID,SIS User ID,SIS Login ID,Section,HW5 (77)\n    Points Possible,,,,,100\n"
          '"Lovelace, Ada",101,s001,ada,Sec A,\n"Turing, Alan",102,s002,alan,Sec B,\n'
          '"Hopper, Grace",103,s003,grace,Sec A,\n"Dijkstra, Edsger",104,s004,edsger,Sec B,\n')


def read_csv(path: Path) -> dict[str, dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return {row.get("student") or row.get("SIS User ID"): row for row in rows}


def test_the_export_becomes_the_gradebook_the_dashboard_and_canvas(tmp_path):
    (tmp_path / "scores.csv").write_text(EXPORT)
    (tmp_path / "roster.csv").write_text(ROSTER)
    assert cli.main(["import-gradescope", str(tmp_path / "scores.csv"), "--csv", str(tmp_path / "grades.csv"),
                     "--html", str(tmp_path / "class.html"), "--canvas", str(tmp_path / "canvas.csv"),
                     "--assignment", "HW5 (77)", "--roster", str(tmp_path / "roster.csv"), "--name-is", "sis"]) == 0
    rows = read_csv(tmp_path / "grades.csv")
    assert {name: (row["total"], row["max_score"], row["status"], row["flags"]) for name, row in rows.items()} == {
        "s001": ("85", "100", "graded", "gradescope;submissions=4"),
        "s002": ("100", "100", "graded", "gradescope;late=01:30:00;submissions=1"),
        "s003": ("", "100", "missing", "gradescope;submissions=0;no_submission"),
        "s004": ("", "100", "ungraded", "gradescope;submissions=1;needs_review"),
    }
    canvas_rows = read_csv(tmp_path / "canvas.csv")
    assert {sis: row["HW5 (77)"] for sis, row in canvas_rows.items()} == {"s001": "85", "s002": "100", "s003": "", "s004": ""}
    page = dashboard.summarise(gradebook.reports_folder(tmp_path / "grades.csv"))
    assert sorted(page["scores"]) == [85, 100] and page["top"] == 100 and page["full"] == 1
    by_name = {s.name: s for s in page["students"]}
    assert by_name["s001"].reasons == [] and by_name["s004"].reasons == [("review", "gradebook: gradescope, submissions=1")]
    assert all(kind != "error" for s in page["students"] for kind, _ in s.reasons)  # no grader failed: none ran
    html = (tmp_path / "class.html").read_text()
    assert "Totals only, as recorded elsewhere" in html and "the grader failed" not in html


def test_the_older_layout_and_email_names(tmp_path):
    (tmp_path / "scores.csv").write_text(OLD_EXPORT)
    rows = gradescope_scores.import_scores(tmp_path / "scores.csv", tmp_path / "grades.csv", gradebook.Options(),
                                           student_is="email", progress=lambda line: None)
    assert [(o.student, o.score, o.max_score, o.detail) for o in rows] == [("ada@example.edu", 85.0, 100.0, "Ada Lovelace")]


@pytest.mark.parametrize("text, message", [
    ("Name,SID,Email\nAda,s1,a@x\n", "no column 'Total Score', 'Max Points', 'Status': expected Gradescope's Download Grades"),
    (OLD_EXPORT.replace("85.0,100.0,Graded", "lots,100.0,Graded"), "scores.csv:2 Total Score: 'lots' is not a number"),
    (OLD_EXPORT.replace(",Graded,", ",Done,"), "Status 'Done': expected one of Graded, Ungraded, Missing"),
    (OLD_EXPORT + OLD_EXPORT.splitlines()[1] + "\n", "s001 has two rows"),
])
def test_an_export_that_cannot_be_used_is_named(tmp_path, capsys, text, message):
    (tmp_path / "scores.csv").write_text(text)
    assert cli.main(["import-gradescope", str(tmp_path / "scores.csv"), "--csv", str(tmp_path / "grades.csv")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "grades.csv").exists()
