"""Late penalties, extensions and manual overrides (course.adjustments) applied to the
gradebook every time it is written: the raw score kept, Canvas given the final one, an override
surviving a later regrade and logged in the changelog once (issue 23, item 10)."""
import csv
from pathlib import Path

import pytest

from course import adjustments, changelog, discovery, gradebook
from course.outcomes import StudentGrade

ADJUSTMENTS = (
    "student,late_penalty,override,reason\n"
    "alice,10,,2 days late\n"
    "bob,0,,extension to Friday\n"
    "carol,,85,regrade request #12: 2.2-backward passed by hand\n"
    "nobody,5,,a typo\n"
)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def outcomes(tmp_path: Path, carol: float) -> list[StudentGrade]:
    reports = gradebook.reports_folder(tmp_path / "grades.csv")
    return [StudentGrade(name, tmp_path / name, reports / f"{name}.json", score=score, max_score=100.0,
                         problems={"2.1": score}) for name, score in (("alice", 40.0), ("bob", 70.0), ("carol", carol))]


def test_penalties_extensions_and_an_override_that_survives_a_regrade(tmp_path):
    (tmp_path / "adjust.csv").write_text(ADJUSTMENTS)
    options = gradebook.Options(canvas=tmp_path / "canvas.csv", assignment="HW5 (77)", name_is="login",
                                adjustments=tmp_path / "adjust.csv")
    lines = []
    for run, carol in (("first", 60.0), ("regrade", 64.0)):  # a later regrade changes carol's raw score
        rows = outcomes(tmp_path, carol)
        gradebook.finish(rows, [discovery.Student(o.student, o.path, []) for o in rows], tmp_path / "grades.csv", options,
                         run, progress=lines.append)
    table = {row["student"]: row for row in read_csv(tmp_path / "grades.csv")}
    assert [(table[n]["total"], table[n]["final"]) for n in ("alice", "bob", "carol")] == [("40", "36"), ("70", "70"), ("64", "85")]
    assert table["alice"]["flags"] == "late_penalty=10%" and table["carol"]["flags"] == "override=85"
    canvas_scores = {row["SIS Login ID"]: row["HW5 (77)"] for row in read_csv(tmp_path / "canvas.csv")}
    assert canvas_scores == {"alice": "36", "bob": "70", "carol": "85"}
    logged = read_csv(changelog.path_of(tmp_path / "grades.csv"))
    assert [(r["student"], r["criterion"], r["old_points"], r["new_points"]) for r in logged] == [
        ("carol", "total (override)", "60", "85")]  # once, not at every build
    assert "regrade request #12" in logged[0]["new_status"]
    assert any("no student named nobody" in line for line in lines)


@pytest.mark.parametrize("text, message", [
    ("student,late_penalty\nalice,10\n", "no column override, reason"),
    ("student,late_penalty,override,reason\nalice,ten,,\n", "'ten' is not a number"),
    ("student,late_penalty,override,reason\nalice,150,,\n", "150 is not between 0 and 100"),
    ("student,late_penalty,override,reason\nalice,1,,\nalice,2,,\n", "alice has a row already"),
])
def test_a_bad_adjustments_file_is_refused_before_grading(tmp_path, text, message):
    (tmp_path / "adjust.csv").write_text(text)
    with pytest.raises(adjustments.AdjustmentsError, match=message):
        gradebook.check(gradebook.Options(adjustments=tmp_path / "adjust.csv"), [])
