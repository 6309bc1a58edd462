"""Late work as data (issue 28, item 5): the submission time from the source, a due date and a
policy in one file (per-day penalty, cap, grace, extensions, late-day budget), applied at every
build; the CSV, Canvas and the feedback show the raw score, the adjustment with its reason and
the final score, and an extension shows as one."""
import csv
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from course import discovery, gradebook, gradescope_scores, late
from course.outcomes import StudentGrade, load_rows

ZONE = timezone(timedelta(hours=-5))
DUE = datetime(2025, 3, 14, 23, 59, tzinfo=ZONE)
POLICY = """\
due = 2025-03-14T23:59:00-05:00
grace_minutes = 15
penalty_per_day = 10
max_penalty = 30
late_days = 2
canvas_submissions = "canvas-submissions.json"

[extensions]
cy = { due = 2025-03-17T23:59:00-05:00, reason = "medical note" }

[late_days_used]
bob = 2
dee = 2
eve = 1
fay = 1

[submitted]
dee = 2025-03-15T09:00:00-05:00
typo = 2025-03-15T09:00:00-05:00
"""
RAW = 40.0


def at(hours_after_due: float) -> str:
    return (DUE + timedelta(hours=hours_after_due)).isoformat()


# name -> (how the source presents it, submission time from the source)
CLASS = {
    "ada": ({}, at(-30)),                                      # on time
    "bob": ({}, at(30)),                                       # 1.25 days late: 2 days, no late day left: 20%
    "cy": ({}, at(50)),                                        # late for the due date, on time for the extension
    "dee": ({"flags": ["late"], "canvas_id": "104"}, ""),      # Canvas: late, no time; [submitted]: 9 h, 1 day
    "eve": ({}, at(24 * 4 + 1)),                               # 5 days: 1 late day left, 4 x 10% capped at 30%
    "fay": ({"flags": ["late"], "canvas_id": "106"}, ""),      # Canvas: late, time from Canvas's JSON; a late day
    "gus": ({"flags": ["late"], "canvas_id": "107"}, ""),      # Canvas: late, no time anywhere: review
    "hal": ({"canvas_id": "108"}, ""),                         # Canvas: not late
    "ivy": ({}, at(0.2)),                                      # 12 minutes late: within the grace period
    "jo": ({}, ""),                                            # a folder: no time at all
}


def build(tmp_path: Path, policy_text: str = POLICY, adjustments: str | None = None) -> dict[str, dict]:
    (tmp_path / "late.toml").write_text(policy_text)
    (tmp_path / "canvas-submissions.json").write_text(json.dumps(
        [{"user_id": 106, "submitted_at": "2025-03-16T04:59:00Z", "late": True}, {"user_id": 108, "submitted_at": None}]))
    reports = gradebook.reports_folder(tmp_path / "grades.csv")
    students, outcomes = [], []
    for name, (given, submitted) in CLASS.items():
        flags = given.get("flags", [])
        students.append(discovery.Student(name, tmp_path / name, list(flags), given.get("canvas_id", ""), submitted))
        outcomes.append(StudentGrade(name, tmp_path / name, reports / f"{name}.json", score=RAW, max_score=50.0,
                                     problems={"2.1": RAW}, flags=list(flags)))
    if adjustments is not None:
        (tmp_path / "adjust.csv").write_text(adjustments)
    options = gradebook.Options(canvas=tmp_path / "canvas.csv", assignment="HW5 (77)", name_is="login",
                                late_policy=tmp_path / "late.toml",
                                adjustments=tmp_path / "adjust.csv" if adjustments is not None else None)
    said: list[str] = []
    gradebook.finish(outcomes, students, tmp_path / "grades.csv", options, "run", progress=said.append)
    with open(tmp_path / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    rows["said"] = said  # type: ignore[assignment]
    return rows


def test_each_student_late_or_not_as_the_policy_says(tmp_path):
    rows = build(tmp_path)
    expected = {  # name: (adjustment, final, late flags)
        "ada": ("", "40", set()), "bob": ("penalty 20%", "32", {"late=2d", "late_penalty=20%"}),
        "cy": ("", "40", {"extension"}), "dee": ("penalty 10%", "36", {"late=1d", "late_penalty=10%"}),
        "eve": ("penalty 30%", "28", {"late=5d", "late_days_used=1", "late_penalty=30%"}),
        "fay": ("", "40", {"late=1d", "late_days_used=1"}),
        "gus": ("", "40", {"late_time_unknown", "needs_review"}), "hal": ("", "40", set()), "ivy": ("", "40", set()),
        "jo": ("", "40", {"submitted_unknown"}),
    }
    for name, (adjustment, final, flags) in expected.items():
        row = rows[name]
        assert (row["total"], row["adjustment"], row["final"]) == ("40", adjustment, final), (name, row)
        assert set(filter(None, row["flags"].split(";"))) == flags, (name, row["flags"])
    assert rows["bob"]["reason"] == ("submitted 2025-03-16 05:59 (UTC-0500), 2 days after the due date 2025-03-14 23:59 "
                                     "(UTC-0500): -20% (10% a day)")
    assert rows["cy"]["reason"] == ("extension to 2025-03-17 23:59 (UTC-0500) (medical note); "
                                    "submitted 2025-03-17 01:59 (UTC-0500): on time")
    assert "1 late day used (0 left): -30% (10% a day, capped)" in rows["eve"]["reason"]
    assert rows["fay"]["reason"].endswith("1 late day used (0 left): no penalty")
    assert rows["fay"]["submitted"] == "2025-03-16T04:59:00+00:00"  # Canvas's submissions JSON
    assert "add it under [submitted]" in rows["gus"]["reason"] and "within the grace period" in rows["ivy"]["reason"]
    assert rows["hal"]["submitted"] == "" and rows["hal"]["reason"] == "on time (the source does not mark it late)"
    assert any(line.startswith(f"late policy ({tmp_path / 'late.toml'}): 4 late (3 with a penalty), 1 with an extension, "
                               "2 without a submission time: gus, jo") for line in rows["said"])
    assert any(line.startswith("late policy: no student named typo in this class") for line in rows["said"])
    with open(tmp_path / "canvas.csv", newline="", encoding="utf-8") as handle:
        canvas_scores = {row["Student"]: row["HW5 (77)"] for row in csv.DictReader(handle)}
    assert canvas_scores == {name: rows[name]["final"] for name in CLASS}  # Canvas gets the final score
    saved = {row["student"]: row for row in load_rows(gradebook.reports_folder(tmp_path / "grades.csv")).values()}
    assert (saved["bob"]["score"], saved["bob"]["final"], saved["bob"]["adjustment"]) == (40.0, 32.0, "penalty 20%")


def test_the_policy_is_applied_again_at_every_build(tmp_path):
    assert build(tmp_path)["bob"]["final"] == "32"
    with_extension = POLICY.replace("[extensions]\n", '[extensions]\nbob = { days = 3, reason = "family emergency" }\n')
    rows = build(tmp_path, with_extension)
    assert (rows["bob"]["final"], rows["bob"]["adjustment"], rows["bob"]["flags"]) == ("40", "", "extension")
    assert rows["bob"]["reason"].startswith("extension to 2025-03-17 23:59 (UTC-0500) (family emergency); submitted")


def test_a_row_kept_by_hand_replaces_the_policys_penalty(tmp_path):
    rows = build(tmp_path, adjustments="student,late_penalty,override,reason\nbob,5,,agreed by email\neve,,45,regrade #3\n")
    assert (rows["bob"]["adjustment"], rows["bob"]["final"]) == ("penalty 5%", "38")
    assert rows["bob"]["reason"].startswith("agreed by email; late policy: submitted 2025-03-16")
    assert (rows["eve"]["adjustment"], rows["eve"]["final"]) == ("override 45", "45")


def test_the_feedback_file_says_raw_adjustment_reason_and_final(tmp_path):
    from course import feedback

    outcome = StudentGrade("bob", tmp_path, tmp_path / "bob.json", score=40.0, final=32.0, adjustment="penalty 20%",
                           reason="submitted 2025-03-16 05:59 (UTC-0500), 2 days after the due date: -20% (10% a day)")
    assert feedback.course_lines(outcome)[1] == ("Score recorded by the course: 32 (graded 40; penalty 20%: submitted "
                                                 "2025-03-16 05:59 (UTC-0500), 2 days after the due date: -20% (10% a day))")
    extended = StudentGrade("cy", tmp_path, tmp_path / "cy.json", score=40.0, final=40.0,
                            reason="extension to 2025-03-17 23:59 (UTC-0500) (medical note); submitted ...: on time")
    assert feedback.course_lines(extended)[1].startswith("Submission: extension to 2025-03-17 23:59")


def test_gradescopes_submission_time_and_metadata_are_the_sources(tmp_path):
    folder = tmp_path / "class" / "ada"
    folder.mkdir(parents=True)
    (folder / "pipeline.py").write_text("x = 1\n")
    (folder / "submission_metadata.json").write_text(json.dumps({"id": 1, "created_at": "2025-03-15T08:00:00.123-05:00"}))
    (tmp_path / "class" / "bob").mkdir()
    students, _ = discovery.discover(tmp_path / "class", tmp_path / "unpacked")
    assert [(s.name, s.submitted_at) for s in students] == [("ada", "2025-03-15T08:00:00.123000-05:00"), ("bob", "")]
    export = ("First Name,Last Name,SID,Email,Total Score,Max Points,Status,Submission ID,Submission Time,"
              "Lateness (H:M:S),Submission Count\n"
              "Alan,Turing,s002,alan@example.edu,100.0,100.0,Graded,5006,2025-03-15 01:30:00 -0500,01:31:00,1\n")
    (tmp_path / "scores.csv").write_text(export)
    (tmp_path / "late.toml").write_text("due = 2025-03-14T23:59:00-05:00\npenalty_per_day = 10\n")
    gradescope_scores.import_scores(tmp_path / "scores.csv", tmp_path / "grades.csv",
                                    gradebook.Options(late_policy=tmp_path / "late.toml"), progress=lambda line: None)
    with open(tmp_path / "grades.csv", newline="") as handle:
        row = next(csv.DictReader(handle))
    assert (row["total"], row["adjustment"], row["final"]) == ("100", "penalty 10%", "90")
    assert "late=1d" in row["flags"].split(";") and "late=01:31:00" not in row["flags"]  # the policy's mark, not Gradescope's


@pytest.mark.parametrize("text, message", [
    ("penalty_per_day = 10\n", "no due date"),
    ("due = 2025-03-14T23:59:00\n", "has no UTC offset"),
    ('due = 2025-03-14T23:59:00\ntimezone = "Mars/Olympus"\n', "not a time zone name"),
    ("due = 2025-03-14\n", "a date without a time"),
    ("due = 2025-03-14T23:59:00Z\npenalty = 10\n", "unknown key 'penalty'"),
    ("due = 2025-03-14T23:59:00Z\npenalty_per_day = 150\n", "penalty_per_day = 150: expected a number from 0 to 100"),
    ('due = 2025-03-14T23:59:00Z\n[extensions]\nbob = "Friday"\n', "[extensions] bob: expected"),
    ('due = 2025-03-14T23:59:00Z\ncanvas_submissions = "missing.json"\n', "canvas_submissions"),
    ("due = 2025-03-14T23:59:00Z\n[submitted]\nbob = 12\n", "[submitted] bob: 12"),
])
def test_a_bad_policy_is_refused_before_grading(tmp_path, text, message):
    (tmp_path / "late.toml").write_text(text)
    with pytest.raises(late.LatePolicyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        gradebook.check(gradebook.Options(late_policy=tmp_path / "late.toml"), [])


def test_a_local_due_date_takes_the_policys_time_zone(tmp_path):
    (tmp_path / "late.toml").write_text('due = 2025-03-14T23:59:00\ntimezone = "America/Chicago"\n')
    policy = late.read(tmp_path / "late.toml")
    assert policy.due.utcoffset() == timedelta(hours=-5)  # Chicago in March, daylight time
