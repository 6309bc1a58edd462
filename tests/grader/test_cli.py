"""`python -m grader` end to end: exit statuses, the JSON and Gradescope reports, zips,
and a partial report when the grader is killed mid-run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest
from grading_helpers import REPO, answer_key_source, stub_files, write_submission

CRITERION_FIELDS = {"id", "problem", "title", "points", "earned", "status", "message", "seconds"}
STATUSES = {"passed", "failed", "timeout", "blocked", "error"}


# Inner time limits stay below the test's own (pytest-timeout: 120 s unless a test says more),
# so a loaded machine makes a test slow, never a pytest-timeout kill with no explanation.
QUICK_S = 90


def run_grader(*args, timeout=QUICK_S) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader", "grade", *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow  # a grader run in a subprocess
def test_answer_key_full_marks(tmp_path):
    """The command line's reports and exit status, on the criteria of three problems and the
    blocked 2.3 (every criterion's full marks on the answer key: tests/kit/test_gradescope_run.py
    grades the whole key through the same command, and tests/grader/checks/ each check)."""
    report_path, gradescope_path = tmp_path / "report.json", tmp_path / "results.json"
    run = run_grader("minitorch", "--only", "2.1", "2.3", "4.1", "5", "--require-full", "--json", report_path,
                     "--gradescope", gradescope_path)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(report_path.read_text())
    assert report["schema_version"] == 1 and report["complete"]
    assert {"submission", "files", "environment", "score", "max_score", "blocked_points", "criteria"} <= set(report)
    assert {"python", "torch", "cpus", "gpus"} <= set(report["environment"])
    assert "pipeline.py" in report["files"] and len(report["files"]["pipeline.py"]) == 64
    for criterion in report["criteria"]:
        assert CRITERION_FIELDS <= set(criterion) and criterion["status"] in STATUSES
        if criterion["status"] != "blocked":
            assert criterion["status"] == "passed", criterion
    speedup = next(c for c in report["criteria"] if c["id"] == "2.3-speedup")
    if report["environment"]["gpus"] < 2:
        assert speedup["status"] == "blocked" and "needs 2 CUDA GPUs" in speedup["message"]
    blocked = sum(c["points"] for c in report["criteria"] if c["status"] == "blocked")
    assert report["blocked_points"] == blocked and report["score"] == report["max_score"] - blocked
    results = json.loads(gradescope_path.read_text())
    assert results["score"] == report["score"] and isinstance(results["execution_time"], int)
    graded = [c for c in report["criteria"] if c["status"] != "blocked"]  # blocked ones: a note, not a test
    assert isinstance(results["output"], str) and len(results["tests"]) == len(graded)
    for test in results["tests"]:
        assert {"name", "number", "score", "max_score", "status", "output", "visibility"} <= set(test)
    assert {c["problem"] for c in report["criteria"]} == {"2.1", "2.3", "4.1", "5.1", "5.2"}
    assert "Total" in run.stdout and "4.1-peak-in-flight" in run.stdout


@pytest.mark.slow  # a grader run in a subprocess
def test_stub_scores_zero_with_not_implemented(tmp_path):
    """One criterion of each problem: every criterion of the stubs is graded through the
    Gradescope bundle (tests/kit/test_bundle.py::test_stubs_score_zero)."""
    folder = write_submission(tmp_path / "stub", stub_files())
    only = ["2.1-schedule", "2.4-balance", "3.1-single-process", "4.1-arguments", "5.1-memory"]
    run = run_grader(folder, "--require-full", "--json", tmp_path / "r.json", "--only", *only)
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["score"] == 0 and [c["id"] for c in report["criteria"]] == only
    for criterion in report["criteria"]:
        if criterion["status"] != "blocked":
            assert criterion["status"] == "failed"
            assert criterion["message"].startswith(f"not implemented yet (Problem {criterion['problem']})"), criterion


@pytest.mark.slow  # a whole grader run in a subprocess
def test_zip_with_a_top_folder(tmp_path):
    path = tmp_path / "alice.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("alice-hw5/minitorch/pipeline.py", answer_key_source())
    run = run_grader(path, "--only", "2.1", "--require-full")
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.slow  # a whole grader run in a subprocess
def test_usage_errors_exit_2(tmp_path):
    missing = run_grader(tmp_path / "nope", "--gradescope", tmp_path / "results.json")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert json.loads((tmp_path / "results.json").read_text())["score"] == 0
    unknown = run_grader("minitorch", "--only", "9.9")
    assert unknown.returncode == 2 and "--only 9.9" in unknown.stderr


@pytest.mark.slow  # a whole grader run in a subprocess
def test_partial_report_survives_a_killed_grader(tmp_path):
    hang = answer_key_source().replace(
        "        microbatches = list(torch.split(x, self.split_size))",
        "        import time\n        time.sleep(1000)\n        microbatches = list(torch.split(x, self.split_size))",
    )
    folder = write_submission(tmp_path / "hang", {"pipeline.py": hang})
    report_path = tmp_path / "report.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "grader", "grade", folder, "--only", "2.1-schedule", "2.2-forward", "--json", report_path],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + QUICK_S
        while time.monotonic() < deadline and not (report_path.exists() and json.loads(report_path.read_text())["criteria"]):
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    report = json.loads(report_path.read_text())
    assert report["complete"] is False
    assert [c["id"] for c in report["criteria"]] == ["2.1-schedule"] and report["criteria"][0]["status"] == "passed"
