"""Regrades: ``batch --only`` on a class whose reports exist changes only those criteria."""
import csv
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from grading_helpers import answer_key_source, write_submission

from course import batch, changelog, gradebook, regrade
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


def test_the_changelog_logs_each_real_change_once(tmp_path):
    path = tmp_path / "grades-changelog.csv"
    change = {"criterion": "2.2-forward", "old_points": 0, "new_points": 6, "old_status": "failed", "new_status": "passed"}
    outcomes = [StudentGrade("=ada", tmp_path, tmp_path / "a.json", changes=[change])]
    assert changelog.write(path, "run-1", outcomes) == (1, 0)
    assert changelog.write(path, "run-1", outcomes) == (0, 1)  # a merge run twice
    assert changelog.write(path, "run-2", outcomes) == (0, 1)  # a rebuild carrying the same records
    back = {**change, "old_points": 6, "new_points": 0, "old_status": "passed", "new_status": "failed"}
    assert changelog.write(path, "run-3", [StudentGrade("=ada", tmp_path, tmp_path / "a.json", changes=[back])]) == (1, 0)
    assert changelog.write(path, "run-4", outcomes) == (1, 0)  # and forth again: a real change each time
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["run"], r["student"], r["criterion"], r["old_points"], r["new_points"]) for r in rows] == [
        ("run-1", "'=ada", "2.2-forward", "0", "6"), ("run-3", "'=ada", "2.2-forward", "6", "0"),
        ("run-4", "'=ada", "2.2-forward", "0", "6"),
    ]


# Scores 8 for 2.1-schedule, or what the student's score.txt says.
SCORE_FILE_GRADER = textwrap.dedent('''\
    import json, sys
    from pathlib import Path
    path, report = Path(sys.argv[1]), Path(sys.argv[3])
    earned = int((path / "score.txt").read_text()) if (path / "score.txt").exists() else 8
    criteria = [{"id": "2.1-schedule", "problem": "2.1", "title": "t", "points": 8, "earned": earned,
                 "status": "passed" if earned else "failed", "message": "", "seconds": 0.1}]
    report.write_text(json.dumps({"schema_version": 1, "submission": str(path), "complete": True,
        "files": {"pipeline.py": "0" * 64}, "environment": {}, "score": earned, "max_score": 8, "criteria": criteria}))
    ''')


def test_a_rebuild_that_changes_nothing_adds_nothing_to_the_changelog_and_says_so(tmp_path):
    """Issue 28, item 3: a regrade logs what it changed; rebuilding the gradebook afterwards (here
    ``--rerun-failed`` with nobody to rerun, twice) merged the regrade's records again and again."""
    for name in ("ada", "bob", "cy"):
        (tmp_path / "class" / name).mkdir(parents=True)
        (tmp_path / "class" / name / "score.txt").write_text("0")
    (tmp_path / "grader.py").write_text(SCORE_FILE_GRADER)
    fake, csv_path = [sys.executable, str(tmp_path / "grader.py")], tmp_path / "grades.csv"
    said: list[str] = []
    batch.run_batch(tmp_path / "class", csv_path, grader_command=fake, progress=said.append)
    for name in ("ada", "bob"):  # the regrade request: their 2.1 was right after all
        (tmp_path / "class" / name / "score.txt").write_text("8")
    batch.run_batch(tmp_path / "class", csv_path, grader_command=fake, only=["2.1-schedule"], progress=said.append)
    log = changelog.path_of(csv_path)
    assert said[-1] == f"regrade: 2 criterion result(s) changed -> {log}"
    lines = log.read_text().splitlines()
    assert len(lines) == 3
    for _ in range(2):
        said.clear()
        batch.run_batch(tmp_path / "class", csv_path, grader_command=fake, rerun_failed=True, progress=said.append)
        assert log.read_text().splitlines() == lines
        assert f"changelog: nothing changed since the last build (2 change(s) of earlier runs logged already); {log} left as it was" in said
        assert not any("criterion result(s) changed" in line for line in said)


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
    with open(changelog.path_of(csv_path), newline="") as handle:
        changes = list(csv.DictReader(handle))
    assert [(c["student"], c["criterion"], c["old_points"], c["new_points"], c["old_status"], c["new_status"])
            for c in changes] == [("key", "2.2-backward", "0", f"{backward:g}", "failed", "passed")]
    with open(csv_path, newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert (rows["key"]["2.2"], rows["key"]["total"]) == (f"{forward + backward:g}", f"{schedule + forward + backward:g}")
    assert (rows["detached"]["2.2"], rows["detached"]["total"]) == (f"{forward:g}", f"{schedule + forward:g}")
