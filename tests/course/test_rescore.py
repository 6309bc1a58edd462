"""A rubric edit without ``--only`` (issue 28, item 4): every report names the rubric it was
graded with; a rebuild under another rubric re-scores the stored results where only points
changed, drops removed criteria, and names the students to regrade where a check changed."""
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from grading_helpers import answer_key_source, write_submission

from course import changelog, discovery, gradebook, rescore
from course.outcomes import StudentGrade
from grader.grading import check_fingerprint, rubric_fingerprint
from grader.layout import DEFAULT_RUBRIC, REPOSITORY
from grader.rubric import load_rubric

PROBLEM_21 = ("2.1-schedule", "2.1-stage-order", "2.1-generator", "2.1-no-microbatches", "2.1-errors")
NEW_CRITERION = '''
[[criterion]]
id = "2.1-schedule-again"
problem = "2.1"
title = "the schedule once more"
points = 2
needs = "cpu"
check = "problem2.clock_cycles:schedule"
'''


def edit(path: Path, criterion: str, old: str, new: str) -> None:
    """Replace ``old`` with ``new`` in ``criterion``'s [[criterion]] block of the rubric at ``path``."""
    text = path.read_text()
    start = text.index(f'id = "{criterion}"')
    end = text.find("[[criterion]]", start)
    block = text[start:end]
    assert old in block, (criterion, old)
    path.write_text(text[:start] + block.replace(old, new, 1) + text[end:])


def edited_rubric(folder: Path, *, checks_too: bool) -> Path:
    """The default rubric with 2.1-schedule worth 5 instead of 3 and 2.1-no-microbatches disabled;
    with ``checks_too``, 2.1-stage-order judged with other params and a new criterion."""
    path = folder / "rubric.toml"
    path.write_text(DEFAULT_RUBRIC.read_text())
    edit(path, "2.1-schedule", "points = 3", "points = 5")
    edit(path, "2.1-no-microbatches", "points = 1", "points = 1\nenabled = false")
    if checks_too:
        edit(path, "2.1-stage-order", "timeout = 20", "timeout = 20\n[criterion.params]\nwaves = 12")
        path.write_text(path.read_text() + NEW_CRITERION)
    return path


def graded_report(failed: tuple[str, ...] = ()) -> dict:
    """A report as the grader writes one for Problem 2.1 under the default rubric."""
    rubric = load_rubric(DEFAULT_RUBRIC)
    criteria = []
    for criterion in (c for c in rubric.active() if c.id in PROBLEM_21):
        passed = criterion.id not in failed
        criteria.append({"id": criterion.id, "problem": "2.1", "title": criterion.title, "points": criterion.points,
                         "earned": criterion.points if passed else 0, "status": "passed" if passed else "failed",
                         "message": "" if passed else "wave 1: wrong", "seconds": 0.1, "output": "", "details": {},
                         "fingerprint": check_fingerprint(criterion)})
    return {"schema_version": 1, "submission": "s", "files": {"pipeline.py": "0" * 64}, "environment": {}, "seed": 1,
            "complete": True, "notes": [], "review_reasons": [], "needs_review": False, "policy_findings": [],
            "rubric": rubric_fingerprint(rubric.active()), "criteria": criteria,
            "score": sum(c["earned"] for c in criteria), "max_score": sum(c["points"] for c in criteria)}


def build(tmp_path: Path, rubric: Path | None, said: list[str]) -> dict[str, dict]:
    """The gradebook of ada (all of 2.1 passed) and bob (2.1-schedule failed) built under ``rubric``."""
    csv_path = tmp_path / "grades.csv"
    reports = gradebook.reports_folder(csv_path)
    reports.mkdir(exist_ok=True)
    outcomes = []
    for name, failed in (("ada", ()), ("bob", ("2.1-schedule",))):
        path = reports / f"{name}.json"
        if not path.exists():
            path.write_text(json.dumps(graded_report(failed)))
        outcome = StudentGrade(name, tmp_path / name, path)
        gradebook.apply_report(outcome, json.loads(path.read_text()))
        outcomes.append(outcome)
    gradebook.finish(outcomes, [discovery.Student(o.student, o.path, []) for o in outcomes], csv_path,
                     gradebook.Options(rubric=rubric), "build", progress=said.append)
    with open(csv_path, newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def test_a_points_edit_is_rescored_from_the_stored_results_at_the_next_build(tmp_path):
    said: list[str] = []
    before = build(tmp_path, None, said)
    assert (before["ada"]["total"], before["bob"]["total"]) == ("7", "4")
    rubric = edited_rubric(tmp_path, checks_too=False)
    after = build(tmp_path, rubric, said)
    assert (after["ada"]["total"], after["ada"]["max_score"]) == ("8", "8")  # 5 + 1 + 1 + 1, the disabled one gone
    assert (after["bob"]["total"], after["bob"]["max_score"]) == ("3", "8")
    assert "rubric_changed" not in after["ada"]["flags"] and "needs_review" not in after["bob"]["flags"]
    report = json.loads((gradebook.reports_folder(tmp_path / "grades.csv") / "ada.json").read_text())
    assert report["rubric"] == rescore.load(rubric).record() and report["score"] == 8
    assert report["merged"][-1]["source"] == "rubric"
    with open(changelog.path_of(tmp_path / "grades.csv"), newline="") as handle:
        logged = [(r["student"], r["criterion"], r["old_points"], r["new_points"], r["new_status"]) for r in csv.DictReader(handle)]
    assert logged == [("ada", "2.1-schedule", "3", "5", "passed"), ("ada", "2.1-no-microbatches", "1", "", rescore.REMOVED),
                      ("bob", "2.1-no-microbatches", "1", "", rescore.REMOVED)]  # bob's failed 2.1-schedule: 0 either way
    said.clear()
    assert build(tmp_path, rubric, said) == after  # the next build: nothing left to do
    assert any(line.startswith("changelog: nothing changed") for line in said)


def test_a_changed_check_or_a_new_criterion_names_the_students_to_regrade(tmp_path):
    said: list[str] = []
    build(tmp_path, None, said)
    rubric = edited_rubric(tmp_path, checks_too=True)
    after = build(tmp_path, rubric, said)
    assert after["ada"]["total"] == "8"  # 2.1-schedule re-scored 5, the old 2.1-stage-order's 1 stands, 1 + 1
    for name in ("ada", "bob"):
        assert {"rubric_changed", "needs_review"} <= set(after[name]["flags"].split(";")), after[name]
    advice = next(line for line in said if line.startswith("rubric:"))
    assert "2 student(s)" in advice and advice.endswith(": ada, bob")
    assert "--only 2.1-schedule-again 2.1-stage-order`" in advice
    report = json.loads((gradebook.reports_folder(tmp_path / "grades.csv") / "ada.json").read_text())
    assert report["rubric"] == json.loads(json.dumps(graded_report()["rubric"]))  # not yet graded under the new one


def test_reports_without_fingerprints_are_left_as_they_are():
    report = graded_report()
    legacy = {**report, "criteria": [{k: v for k, v in c.items() if k != "fingerprint"} for c in report["criteria"]]}
    current = rescore.CurrentRubric(Path("r.toml"), "x", {c["id"]: (9, "other") for c in report["criteria"]})
    done = rescore.reconcile(legacy, current)
    assert (done.rewritten, done.changes, done.regrade) == (False, [], [])
    del legacy["rubric"]
    assert not rescore.reconcile(legacy, current).rewritten


def test_the_fingerprint_covers_what_judges_not_what_it_is_worth(tmp_path):
    rubric = load_rubric(DEFAULT_RUBRIC)
    edited = load_rubric(edited_rubric(tmp_path, checks_too=True))
    by_id = {c.id: c for c in edited.criteria}
    for criterion in rubric.active():
        same = criterion.id != "2.1-stage-order"
        assert (check_fingerprint(criterion) == check_fingerprint(by_id[criterion.id])) is same, criterion.id
    assert rubric_fingerprint(rubric.active())["sha256"] != rubric_fingerprint(load_rubric(edited_rubric(
        tmp_path, checks_too=False)).active())["sha256"]  # points alone change the rubric's fingerprint


@pytest.mark.slow  # the real grader, a few criteria
def test_the_graders_report_carries_its_rubric_and_batch_rebuilds_under_rubric(tmp_path):
    write_submission(tmp_path / "class" / "key", {"pipeline.py": answer_key_source("pipeline.py")})
    csv_path = tmp_path / "grades.csv"
    command = [sys.executable, "-m", "course", "batch", str(tmp_path / "class"), "--csv", str(csv_path)]
    result = subprocess.run([*command, "--only", "2.1-schedule", "2.1-errors"], cwd=REPOSITORY, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((gradebook.reports_folder(csv_path) / "key.json").read_text())
    assert report["rubric"] == rescore.load(DEFAULT_RUBRIC).record()
    assert all(re.fullmatch(r"[0-9a-f]{16}", c["fingerprint"]) for c in report["criteria"])
    rubric = edited_rubric(tmp_path, checks_too=False)
    result = subprocess.run([*command, "--rerun-failed", "--rubric", str(rubric)], cwd=REPOSITORY, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    with open(csv_path, newline="") as handle:
        assert next(csv.DictReader(handle))["total"] == "6"  # 2.1-schedule now 5, 2.1-errors 1
    assert "regrade: 1 criterion result(s) changed" in result.stdout
