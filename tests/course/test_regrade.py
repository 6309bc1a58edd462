"""Regrades: ``batch --only`` on a class whose reports exist changes only those criteria."""
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grading_helpers import answer_key_source, write_submission

from course import batch, gradebook, regrade
from course.outcomes import StudentGrade
from grader.grading import select
from grader.layout import REPOSITORY as REPO
from grader.rubric import load_rubric


def criterion(id_, earned, status="passed", points=None, message=""):
    return {"id": id_, "problem": id_.split("-")[0], "title": "t", "points": earned if points is None else points,
            "earned": earned, "status": status, "message": message, "seconds": 0.1, "details": {}}


def report(criteria, files=None, seed=1, **extra):
    return {"schema_version": 1, "submission": "s", "files": files or {"pipeline.py": "a" * 64}, "environment": {},
            "seed": seed, "complete": True, "notes": [], "review_reasons": [], "needs_review": False,
            "criteria": criteria, **extra}


def test_merge_replaces_only_the_regraded_criteria():
    old = report(
        [criterion("2.1-schedule", 6), criterion("2.2-forward", 0, "failed", 6), criterion("2.3-speedup", 0, "blocked", 10)],
        notes=["an old note"],
    )
    new = report([criterion("2.2-forward", 6), criterion("4.1-makespan", 4)], seed=7, notes=["a new note"])
    merged, changes = regrade.merge(old, new, "regrade")
    assert [c["id"] for c in merged["criteria"]] == ["2.1-schedule", "2.2-forward", "2.3-speedup", "4.1-makespan"]
    assert merged["criteria"][0] is old["criteria"][0] and merged["criteria"][1] is new["criteria"][0]
    assert (merged["score"], merged["max_score"], merged["blocked_points"]) == (16, 26, 10)
    assert merged["notes"] == ["an old note", "a new note"] and merged["seed"] == 1 and not merged["needs_review"]
    assert merged["merged"][0]["criteria"] == ["2.2-forward", "4.1-makespan"] and merged["merged"][0]["seed"] == 7
    assert changes == [
        {"criterion": "2.2-forward", "old_points": 0, "new_points": 6, "old_status": "failed", "new_status": "passed"},
        {"criterion": "4.1-makespan", "old_points": None, "new_points": 4, "old_status": "", "new_status": "passed"},
    ]
    unchanged, none = regrade.merge(old, report([criterion("2.1-schedule", 6)]), "regrade")
    assert none == [] and unchanged["score"] == old["criteria"][0]["earned"]


def test_a_regrade_of_other_files_needs_review():
    merged, _ = regrade.merge(report([criterion("2.1-schedule", 6)]),
                              report([criterion("2.1-schedule", 0, "failed", 6)], files={"pipeline.py": "b" * 64}), "regrade")
    assert merged["needs_review"] and "graded different student files" in merged["review_reasons"][0]


def test_a_failed_regrade_keeps_the_old_report(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    old = report([criterion("2.1-schedule", 6), criterion("2.2-forward", 6)])
    (reports / "ada.json").write_text(json.dumps(old))
    crash = [sys.executable, "-c", "import sys; print('regrade crashed'); sys.exit(3)"]
    outcome = batch.grade_student("ada", tmp_path, reports, 30, crash, [], only=["2.2-forward"])
    assert (outcome.status, outcome.score, outcome.changes) == ("error", 12, [])
    assert "regrade_failed" in outcome.flags and "needs_review" in outcome.flags
    assert json.loads((reports / "ada.json").read_text()) == old
    assert not (reports / "ada.regrade.json").exists() and "regrade crashed" in (reports / "ada.log").read_text()


def test_the_changelog_logs_a_run_once(tmp_path):
    path = tmp_path / "grades-changelog.csv"
    change = {"criterion": "2.2-forward", "old_points": 0, "new_points": 6, "old_status": "failed", "new_status": "passed"}
    outcomes = [StudentGrade("=ada", tmp_path, tmp_path / "a.json", changes=[change])]
    assert gradebook.write_changelog(path, "run-1", outcomes) == 1
    assert gradebook.write_changelog(path, "run-1", outcomes) == 0  # a merge run twice
    assert gradebook.write_changelog(path, "run-2", outcomes) == 1
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["run"], r["student"], r["criterion"], r["old_points"], r["new_points"]) for r in rows] == [
        ("run-1", "'=ada", "2.2-forward", "0", "6"), ("run-2", "'=ada", "2.2-forward", "0", "6")
    ]


def run_batch(folder: Path, csv_path: Path, *only: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "course", "batch", str(folder), "--csv", str(csv_path), "--jobs", "2", "--only", *only],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.slow  # whole grader runs in subprocesses
def test_regrading_one_criterion_changes_only_it(tmp_path):
    """The answer key's old report holds a wrong 2.2-backward (as if an old rubric had a bug)
    and a message no grader writes; regrading 2.2-backward fixes the one and keeps the other."""
    key = answer_key_source("pipeline.py")
    write_submission(tmp_path / "class" / "key", {"pipeline.py": key})
    detached = key.replace("batch=microbatches[i], device", "batch=microbatches[i].detach(), device")
    assert detached != key
    write_submission(tmp_path / "class" / "detached", {"pipeline.py": detached})
    csv_path = tmp_path / "grades.csv"
    points = {c.id: c.points for c in select(load_rubric().active(), ["2.1", "2.2-forward", "2.2-backward"])}
    backward, forward, schedule = points["2.2-backward"], points["2.2-forward"], sum(
        p for id_, p in points.items() if id_.startswith("2.1-"))
    started = time.monotonic()
    run_batch(tmp_path / "class", csv_path, "2.1", "2.2-forward", "2.2-backward")
    reports = gradebook.reports_folder(csv_path)
    old = json.loads((reports / "key.json").read_text())
    for item in old["criteria"]:
        if item["id"] == "2.2-backward":
            item.update(status="failed", earned=0, message="an old rubric's bug")
        if item["id"] == "2.1-schedule":
            item["message"] = "kept from the first grading"
    (reports / "key.json").write_text(json.dumps(old))
    before_detached = json.loads((reports / "detached.json").read_text())
    result = run_batch(tmp_path / "class", csv_path, "2.2-backward")
    print(f"graded 2 students (3 criteria) and regraded one criterion in {time.monotonic() - started:.1f} s")
    assert "1 criterion result(s) changed" in result.stdout
    new = json.loads((reports / "key.json").read_text())
    assert [c["id"] for c in new["criteria"]] == [c["id"] for c in old["criteria"]]
    for before, after in zip(old["criteria"], new["criteria"], strict=True):
        if before["id"] == "2.2-backward":
            assert (after["status"], after["earned"]) == ("passed", backward), after
        else:
            assert after == before  # the same result, message and seconds: not regraded
    assert new["score"] == schedule + forward + backward and new["merged"][-1]["criteria"] == ["2.2-backward"]
    after_detached = json.loads((reports / "detached.json").read_text())
    assert [(c["id"], c["status"]) for c in after_detached["criteria"]] == [
        (c["id"], c["status"]) for c in before_detached["criteria"]
    ]
    with open(gradebook.changelog_path(csv_path), newline="") as handle:
        changes = list(csv.DictReader(handle))
    assert [(c["student"], c["criterion"], c["old_points"], c["new_points"], c["old_status"], c["new_status"])
            for c in changes] == [("key", "2.2-backward", "0", f"{backward:g}", "failed", "passed")]
    with open(csv_path, newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert (rows["key"]["2.2"], rows["key"]["total"]) == (f"{forward + backward:g}", f"{schedule + forward + backward:g}")
    assert (rows["detached"]["2.2"], rows["detached"]["total"]) == (f"{forward:g}", f"{schedule + forward:g}")
