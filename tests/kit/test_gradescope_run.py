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
