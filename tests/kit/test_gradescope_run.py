"""Gradescope as it really runs: one CPU, a whole-run budget, results.json after every
criterion, blocked criteria kept out of the score, what students upload, the documented recipe
(docs/grading/gradescope.md)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from gradescope_helpers import AUTOGRADER_S, run_autograder, unpack
from grading_helpers import answer_key_source

from grader.gradescope_run import prepare
from grader.layout import REPOSITORY as REPO
from grader.rubric import load_rubric
from kit import bundle

pytestmark = pytest.mark.timeout(AUTOGRADER_S + 60)  # outlasts every limit inside these tests
RECIPE_MARKER = "<!-- tests/kit/test_gradescope_run.py runs the next block exactly as written -->"
HANG = ("        microbatches = list(torch.split(x, self.split_size))",
        "        __import__('threading').Event().wait()\n        microbatches = list(torch.split(x, self.split_size))")


def documented_recipe() -> str:
    text = (REPO / "docs" / "grading" / "gradescope.md").read_text()
    after = text[text.index(RECIPE_MARKER) + len(RECIPE_MARKER):]
    match = re.match(r"\s*```sh\n(.*?)```", after, re.S)
    assert match, "docs/grading/gradescope.md: the local Gradescope recipe is not a ```sh block right after its marker"
    return match.group(1)


def one_cpu() -> None:
    """Run on one CPU, as Gradescope's container gives (half a CPU by default)."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


@pytest.mark.slow  # a whole Gradescope run in a subprocess
def test_documented_recipe_grades_the_answer_key_on_one_cpu_within_the_budget(tmp_path):
    started = time.monotonic()
    result = subprocess.run(["bash", "-e", "-c", documented_recipe()], cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)},
                            capture_output=True, text=True, timeout=AUTOGRADER_S, preexec_fn=one_cpu)
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    (results_file,) = tmp_path.glob("tmp.*/results/results.json")
    results = json.loads(results_file.read_text())
    rubric = load_rubric()
    cpu_points = sum(c.points for c in rubric.active() if c.needs == "cpu")
    assert results["tests"], results["output"]
    assert all(t["score"] == t["max_score"] for t in results["tests"]), [t for t in results["tests"] if t["score"] != t["max_score"]]
    assert results["score"] == cpu_points, results["output"]
    # 2.3 needs GPUs: not a red test worth 10 points, and the student reads why.
    assert not [t for t in results["tests"] if t["name"].startswith("2.3")]
    assert "2.3-speedup" in results["output"] and "separately on GPUs" in results["output"]
    assert "Grading has not finished" not in results["output"]
    assert results["execution_time"] < rubric.gradescope_budget and seconds < rubric.gradescope_budget
    assert "graded pipeline.py" in results["output"] and "graded tensor_parallel.py" in results["output"]


def hanging_bundle(tmp_path: Path, budget: float) -> Path:
    """The bundle unpacked with Problem 2 only and a small budget, for a Pipe.forward that
    never returns; 2.1-errors shown to students only after the due date."""
    zip_path = tmp_path / "autograder.zip"
    bundle.build(zip_path)
    root = unpack(zip_path, tmp_path / "root", {"hw5/minitorch/pipeline.py": answer_key_source("pipeline.py").replace(*HANG)})
    rubric_path = root / "source" / "grader" / "rubric.toml"
    problems = sorted({c.problem for c in load_rubric().criteria if not c.problem.startswith("2.")})
    text = rubric_path.read_text()
    text = re.sub(r"(?m)^budget = \d+", f"budget = {budget:g}", text)
    text = re.sub(r"(?m)^disabled_problems = \[\]", f"disabled_problems = {json.dumps(problems)}", text)
    text = text.replace('id = "2.1-errors"\n', 'id = "2.1-errors"\nvisibility = "after_due_date"\n')
    rubric_path.write_text(text)
    return root


@pytest.mark.slow  # a whole Gradescope run in a subprocess
def test_a_hanging_submission_is_stopped_by_the_budget_and_keeps_what_it_finished(tmp_path):
    budget = 25
    root = hanging_bundle(tmp_path, budget)
    started = time.monotonic()
    results = run_autograder(root)
    assert time.monotonic() - started < budget + 30  # the budget, plus starting Python and torch
    tests = {t["name"].split(":")[0]: t for t in results["tests"]}
    expected = [c.id for c in load_rubric().active() if c.problem.startswith("2.") and c.needs == "cpu"]
    assert list(tests) == expected, "every criterion is reported, none lost"
    assert tests["2.1-schedule"]["score"] == tests["2.1-schedule"]["max_score"] > 0
    assert tests["2.1-errors"]["visibility"] == "after_due_date" and tests["2.1-schedule"]["visibility"] == "visible"
    assert "2.1-errors" not in results["output"]  # shown only after the due date
    assert tests["2.2-forward"]["output"].startswith("[timeout] did not finish within")
    assert "budget" in tests["2.2-forward"]["output"]
    not_graded = [t for t in tests.values() if "not graded: the whole run's time budget" in t["output"]]
    assert not_graded and all(t["score"] == 0 for t in not_graded)
    assert results["score"] == sum(t["score"] for t in results["tests"])


@pytest.mark.slow  # a whole Gradescope run in a subprocess
def test_gradescope_stopping_the_run_midway_leaves_the_criteria_already_graded(tmp_path):
    """Gradescope kills the container at its timeout: nothing gets to write at the end."""
    root = hanging_bundle(tmp_path, budget=300)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    process = subprocess.Popen(["bash", str(root / "source" / "run_autograder")], env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results_file = root / "results" / "results.json"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if results_file.exists() and len(json.loads(results_file.read_text())["tests"]) >= 2:
                break
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    results = json.loads(results_file.read_text())  # written atomically: never half a file
    names = [t["name"].split(":")[0] for t in results["tests"]]
    graded = load_rubric().active()[:len(names)]  # the answer key passes each: the score is their points
    assert len(names) >= 2 and names == [c.id for c in graded] and results["score"] == sum(c.points for c in graded)
    assert "Grading has not finished" in results["output"]


def test_what_gradescope_unpacked_is_found_and_the_rest_is_said(tmp_path):
    upload = tmp_path / "submission"
    (upload / "__MACOSX" / "hw5").mkdir(parents=True)
    (upload / "__MACOSX" / "pipeline.py").write_text("junk")  # shallower than the real one
    (upload / "__MACOSX" / "hw5" / "._pipeline.py").write_bytes(b"\x00\x05\x16\x07")
    (upload / "hw5").mkdir()
    (upload / "hw5\\pipeline.py").write_text("P = 1\n")  # a Windows zip unpacked without converting '\'
    (upload / "hw5" / "tensor_parallel.py").write_text("T = 1\n")
    (upload / "hw5" / "notes.txt").write_text("hi")
    (upload / "hw5" / "old").mkdir()
    (upload / "hw5" / "old" / "pipeline.py").write_text("OLD = 1\n")
    (tmp_path / "scratch").mkdir()
    target, notes = prepare(upload, tmp_path / "scratch")
    assert (target / "pipeline.py").read_text() == "P = 1\n" and (target / "tensor_parallel.py").read_text() == "T = 1\n"
    assert "graded hw5\\pipeline.py" in notes and "graded hw5/tensor_parallel.py" in notes
    (skipped,) = [n for n in notes if n.startswith("skipped")]
    assert "hw5/notes.txt" in skipped and "hw5/old/pipeline.py" in skipped and "MACOSX" not in skipped


def test_an_archive_gradescope_left_packed_is_handed_to_the_grader(tmp_path):
    upload = tmp_path / "submission"
    upload.mkdir()
    archive = upload / "hw5.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        packed.writestr("hw5/pipeline.py", "P = 1\n")
    (tmp_path / "scratch").mkdir()
    target, notes = prepare(upload, tmp_path / "scratch")
    assert target.read_bytes() == archive.read_bytes() and notes == ["graded the files inside hw5.zip"]


# --- What a student sees when the grader leaves no results (issue 28, item 1) ---
def test_a_grader_that_left_no_results_shows_the_student_no_line_of_its_log(tmp_path, monkeypatch, capsys):
    """The log names every criterion, hidden ones too: it is the staff's (stdout), never the output."""
    from grader import gradescope_run

    log = "  2.2-backward             failed     0/3   0.10 s\nTraceback: SECRET\n"
    monkeypatch.setattr(gradescope_run, "_run_grader", lambda *args, **kwargs: (print(log, end="") or (3, log)))
    (tmp_path / "submission").mkdir()
    gradescope_run.grade(tmp_path)
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["score"] == 0 and "exit status 3" in results["output"]
    assert "2.2-backward" not in results["output"] and "SECRET" not in results["output"]
    assert "2.2-backward" in capsys.readouterr().out  # Gradescope shows stdout to the staff only
    assert results["extra_data"] == {"counted": False}  # the autograder's failure is not a submission used up


# --- Submission limits from Gradescope's submission_metadata.json (issue 28, item 8) ---
def metadata(created_at: str, *previous: tuple[str, float, bool | None]) -> dict:
    """Gradescope's metadata: this submission's time and (time, score, counted) of earlier ones."""
    def results(score, counted):
        extra = {} if counted is None else {"extra_data": {"counted": counted}}
        return {"score": score, "output": f"your score was {score:g}", "tests": [{"name": "t", "score": score}], **extra}

    return {"id": 5005, "created_at": created_at, "assignment": {"due_date": "2024-05-31T23:00:00.000000-07:00"},
            "users": [{"email": "ada@example.edu", "id": 1, "name": "Ada"}],
            "previous_submissions": [{"submission_time": when, "score": score, "results": results(score, counted)}
                                     for when, score, counted in previous]}


def test_over_the_limit_the_last_counted_result_is_shown_with_the_reason():
    from grader.rubric import SubmissionLimit
    from grader.submission_limit import check

    limit = SubmissionLimit(3, 24)
    data = metadata("2024-05-02T12:00:00.000000-07:00",
                    ("2024-05-01T09:00:00.000000-07:00", 10, None),   # older than the window: does not count
                    ("2024-05-01T13:00:00.000000-07:00", 20, True),
                    ("2024-05-02T08:00:00.000000-07:00", 30, None),   # no extra_data: an older autograder's run
                    ("2024-05-02T09:00:00.000000-07:00", 30, False),  # turned away itself: does not count
                    ("2024-05-02T11:00:00.000000-07:00", 40, True))
    limited, note = check(data, limit)
    assert note is None and limited["score"] == 40 and limited["tests"] == [{"name": "t", "score": 40}]
    assert limited["output"].startswith("Submission limit: 3 graded submissions in any 24 hours. You made 3 in the 24 "
                                        "hours before this one, so this submission was NOT graded")
    assert "your submission of 2024-05-02 11:00 (UTC-0700)" in limited["output"]
    assert "From 2024-05-02 13:00 (UTC-0700) on, a submission is graded again." in limited["output"]
    assert limited["output"].endswith("your score was 40")
    assert limited["extra_data"] == {"counted": False, "shows_submission_of": "2024-05-02T11:00:00-07:00"}


def test_under_the_limit_the_submission_is_graded_and_told_where_it_stands():
    from grader.rubric import SubmissionLimit
    from grader.submission_limit import check

    data = metadata("2024-05-02T12:00:00-07:00", ("2024-05-01T11:59:00-07:00", 10, True),  # 24 h and a minute ago
                    ("2024-05-02T09:00:00-07:00", 30, False), ("2024-05-02T11:00:00-07:00", 40, True))
    assert check(data, SubmissionLimit(3, 24)) == (
        None, "Submission limit: 3 graded submissions in any 24 hours; this is graded submission 2 of 3.")
    assert check(data, SubmissionLimit(1, 1.5))[0]["score"] == 40
    assert check(data, None) == check(None, SubmissionLimit(3, 24)) == check({"created_at": "soon"}, SubmissionLimit(3, 24)) == (None, None)
    # over the limit with nothing to show instead: graded rather than left with nothing
    bare = {**data, "previous_submissions": [{"submission_time": "2024-05-02T11:00:00-07:00", "score": 40}]}
    assert check(bare, SubmissionLimit(1, 24)) == (None, None)


def test_the_limit_lives_in_the_rubric_and_a_wrong_one_is_named(tmp_path):
    from grader.rubric import RubricError, SubmissionLimit, parse_rubric, submission_limit

    text = (REPO / "grader" / "rubric.toml").read_text()
    assert load_rubric().submission_limit is None  # the course's default: no limit
    limited = text.replace("submission_limit = 0 ", "submission_limit = 3 ").replace("limit_window_hours = 24", "limit_window_hours = 12")
    assert parse_rubric(limited).submission_limit == SubmissionLimit(3, 12.0)
    (tmp_path / "rubric.toml").write_text(limited)
    assert submission_limit(tmp_path / "rubric.toml") == SubmissionLimit(3, 12.0)
    with pytest.raises(RubricError, match="submission_limit must be a whole number"):
        parse_rubric(text.replace("submission_limit = 0 ", "submission_limit = 2.5 "))


def test_the_wrapper_turns_a_submission_over_the_limit_away_without_grading(tmp_path, monkeypatch):
    from grader import gradescope_run, submission_limit
    from grader.rubric import SubmissionLimit

    def grader_ran(*args, **kwargs):
        raise AssertionError("graded a submission over the limit")

    monkeypatch.setattr(submission_limit, "limit_of", lambda rubric: SubmissionLimit(1, 24))
    monkeypatch.setattr(gradescope_run, "_run_grader", grader_ran)
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission_metadata.json").write_text(json.dumps(
        metadata("2024-05-02T12:00:00-07:00", ("2024-05-02T11:00:00-07:00", 40, True))))
    gradescope_run.grade(tmp_path)
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["score"] == 40 and results["output"].startswith("Submission limit: 1 graded submission in any 24 hours.")


def fake_grader(report: dict):
    """A stand-in for the grader process: writes the JSON report and Gradescope's results of ``report``."""
    def run(target, results, report_path, source, budget, timeout):
        from grader.report import gradescope, report_from_json

        report_path.write_text(json.dumps(report))
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps(gradescope(report_from_json(report), load_rubric(), 1.0)))
        return 0, ""
    return run


def json_report(criteria: list[dict], files: dict) -> dict:
    return {"schema_version": 1, "submission": "x", "files": files, "environment": {}, "seed": 1, "complete": True,
            "notes": [], "review_reasons": [], "policy_findings": [], "criteria": criteria,
            "score": sum(c["earned"] for c in criteria), "max_score": sum(c["points"] for c in criteria)}


def criterion(criterion_id: str, status: str, earned: float, points: float) -> dict:
    return {"id": criterion_id, "problem": criterion_id.split("-")[0], "title": "t", "points": points, "earned": earned,
            "status": status, "message": "needs 2 CUDA GPUs" if status == "blocked" else "", "seconds": 0.1, "output": ""}


def test_a_graded_submission_counts_and_is_told_where_it_stands(tmp_path, monkeypatch):
    from grader import gradescope_run, submission_limit
    from grader.rubric import SubmissionLimit

    monkeypatch.setattr(submission_limit, "limit_of", lambda rubric: SubmissionLimit(3, 24))
    monkeypatch.setattr(gradescope_run, "_run_grader", fake_grader(json_report([criterion("2.1-schedule", "passed", 3, 3)], {})))
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission_metadata.json").write_text(json.dumps(metadata("2024-05-02T12:00:00-07:00")))
    gradescope_run.grade(tmp_path)
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["output"].startswith("Submission limit: 3 graded submissions in any 24 hours; this is graded "
                                        "submission 1 of 3.") and results["extra_data"] == {"counted": True}


# --- The staff's GPU results in Gradescope's score (issue 28, item 8) ---
FILES = {"pipeline.py": "a" * 64, "tensor_parallel.py": "b" * 64}


@pytest.mark.parametrize("gpu_files, expected_score, note", [
    (FILES, 13, "2.3-speedup: graded on GPUs by the course staff"),
    ({"pipeline.py": "c" * 64}, 3, "2.3-speedup: graded on GPUs for other files than these"),
])
def test_a_regrade_with_the_gpu_results_in_the_bundle_counts_them(tmp_path, monkeypatch, gpu_files, expected_score, note):
    from grader import gradescope_run

    source = tmp_path / "source"
    (source / "gpu").mkdir(parents=True)
    gpu = json_report([criterion("2.3-speedup", "passed", 10, 10)], gpu_files)
    (source / "gpu" / "submission_5005.json").write_text(json.dumps(gpu))
    (source / "gpu" / "submission_6006.json").write_text(json.dumps(gpu))  # another student's
    cpu = json_report([criterion("2.1-schedule", "passed", 3, 3), criterion("2.3-speedup", "blocked", 0, 10)], FILES)
    monkeypatch.setattr(gradescope_run, "REPOSITORY", source)
    monkeypatch.setattr(gradescope_run, "_run_grader", fake_grader(cpu))
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission_metadata.json").write_text(json.dumps(metadata("2024-05-02T12:00:00-07:00")))
    gradescope_run.grade(tmp_path)
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["score"] == expected_score and note in results["output"], results["output"]
    assert [t["name"].split(":")[0] for t in results["tests"]] == (["2.1-schedule", "2.3-speedup"] if expected_score == 13
                                                                   else ["2.1-schedule"])
    assert not (source / "gpu").exists()  # read before any student code ran, then gone


def test_the_bundle_carries_the_gpu_reports_of_a_gradescope_export(tmp_path):
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "submission_5005.json").write_text(json.dumps(json_report([criterion("2.3-speedup", "passed", 10, 10)], FILES)))
    names = bundle.build(tmp_path / "autograder.zip", tmp_path / "gpu")
    assert "gpu/submission_5005.json" in names and "grader/gpu_results.py" in names and "grader/submission_limit.py" in names
    (tmp_path / "gpu" / "gradebook@class.json").write_text("[]")  # the batch's own files stay out
    (tmp_path / "gpu" / "alice.json").write_text("{}")
    assert [n for n in bundle.build(tmp_path / "autograder.zip", tmp_path / "gpu") if n.startswith("gpu/")] == [
        "gpu/submission_5005.json"]
    (tmp_path / "gpu" / "submission_6006.json").write_text("{}")
    with pytest.raises(ValueError, match="submission_6006.json: not a grader report"):
        bundle.build(tmp_path / "autograder.zip", tmp_path / "gpu")


def test_only_a_conclusive_gpu_result_is_counted():
    from grader.gpu_results import merge

    cpu = json_report([criterion("2.1-schedule", "passed", 3, 3), criterion("2.3-speedup", "blocked", 0, 10)], FILES)
    for details, status in (({"timing": {"conclusive": False}}, "passed"), ({"smoke": True}, "passed"), ({}, "error"),
                            ({}, "blocked")):
        gpu = json_report([{**criterion("2.3-speedup", status, 10, 10), "details": details}], FILES)
        assert merge(cpu, gpu) is None, (details, status)
    timed_out = json_report([{**criterion("2.3-speedup", "timeout", 0, 10), "details": {}}], FILES)
    assert [c["status"] for c in merge(cpu, timed_out)["criteria"]] == ["passed", "timeout"]
