"""The Gradescope bundle: layout, no answer key, and run_autograder in a folder standing in for
/autograder, which must always leave a results.json."""
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from gradescope_helpers import AUTOGRADER_S, run_autograder, run_autograder_with_log, unpack

from grader.layout import REPOSITORY as REPO
from grader.layout import provided_files
from grader.rubric import load_rubric
from kit import bundle, handout


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist") / "autograder.zip"
    bundle.build(out)
    return out


pytestmark = pytest.mark.timeout(AUTOGRADER_S + 60)


def test_layout_scripts_and_pins(autograder_zip):
    with zipfile.ZipFile(autograder_zip) as archive:
        names = archive.namelist()
        for script in ("setup.sh", "run_autograder"):
            info = archive.getinfo(script)
            assert (info.external_attr >> 16) & stat.S_IXUSR, f"{script} is not executable"
            assert b"\r" not in archive.read(script), f"{script} has CR line endings"
        assert archive.read("constraints.txt") == (REPO / "constraints.txt").read_bytes()
        assert archive.read("requirements.txt") == (REPO / "requirements.txt").read_bytes()
        assert archive.read("grader/rubric.toml") == (REPO / "grader" / "rubric.toml").read_bytes()
    assert "grader/__init__.py" in names and "minitorch/runtime.py" in names
    for script in ("setup.sh", "run_autograder"):
        subprocess.run(["bash", "-n", str(REPO / "kit" / "gradescope" / script)], check=True)


def test_the_bundle_ships_the_grading_engine_and_nothing_else(autograder_zip):
    with zipfile.ZipFile(autograder_zip) as archive:
        names = set(archive.namelist())
        grader_files = {n for n in archive.namelist() if n.startswith("grader/")}
        top = {n for n in archive.namelist() if "/" not in n}
        minitorch_files = {n for n in archive.namelist() if n.startswith("minitorch/")}
    engine = {
        "grader/__init__.py", "grader/__main__.py", "grader/child.py", "grader/cli.py",
        "grader/bounded.py", "grader/gpu_results.py", "grader/gradescope_run.py", "grader/grading.py", "grader/harness.py",
        "grader/layout.py",
        "grader/policy.py", "grader/submission_limit.py",
        "grader/processes.py", "grader/protocol.py", "grader/report.py", "grader/result_file.py", "grader/rubric.py",
        "grader/rubric.toml", "grader/sandbox/__init__.py", "grader/sandbox/bwrap.py", "grader/sandbox/confine.py",
        "grader/sandbox/memory.py", "grader/sandbox/mounts.py", "grader/sandbox/pidns.py", "grader/sandbox/plan.py", "grader/sandbox/reaper.py",
        "grader/sandbox/seccomp.py", "grader/sandbox/uids.py",
        "grader/submission.py", "grader/tomlcompat.py", "grader/checks/__init__.py", "grader/checks/judging.py",
        "grader/checks/recording.py",
    }
    checks = {m.replace(".", "/") + ".py" for c in load_rubric().criteria for m in (c.observe_module, c.judge_module)}
    assert engine | checks <= grader_files
    # Beyond the engine, only the checks and what they import; never the kit builder, the course
    # package (running a class), the tests or the grader's self-test check.
    assert all(name.startswith("grader/checks/") for name in grader_files - engine)
    assert "grader/checks/selftest.py" not in grader_files
    assert top == {"setup.sh", "run_autograder", "requirements.txt", "constraints.txt"}
    assert minitorch_files == {f"minitorch/{p.name}" for p in provided_files()}
    assert names == grader_files | top | minitorch_files  # nothing else: no kit/, course/, tests/, handout/


def test_no_answer_key_inside(autograder_zip):
    regions = []
    for name in handout.STUDENT_FILES:
        key = REPO / "minitorch" / name
        if key.exists():
            lines = key.read_text().splitlines(keepends=True)
            regions += ["".join(lines[r.begin : r.end - 1]) for r in handout.find_regions(key.read_text(), name)]
    # A one-line body (ParallelMLP's `return self.fc2(F.gelu(self.fc1(x)))`) is also what any
    # dense reference module says; longer regions are the answer key's own code.
    regions = [region for region in regions if len(region.strip().splitlines()) > 1]
    assert len(regions) > 20
    with zipfile.ZipFile(autograder_zip) as archive:
        # grader/checks/problem2/ holds check modules, not student files: look in minitorch/.
        assert not [n for n in archive.namelist() if Path(n).parent.name == "minitorch" and Path(n).name in handout.STUDENT_FILES]
        for name in archive.namelist():
            text = archive.read(name).decode(errors="replace")
            assert not any(region in text for region in regions), f"{name} contains answer-key code"


@pytest.mark.slow  # a whole grader run in a subprocess
def test_results_json_is_written_when_python_cannot_even_start(autograder_zip, tmp_path):
    root = unpack(autograder_zip, tmp_path, {"pipeline.py": ""})
    results = run_autograder(root, python=str(tmp_path / "no-such-python"))
    assert results["score"] == 0 and "course staff" in results["output"]


@pytest.mark.slow  # a whole grader run in a subprocess
def test_results_json_is_written_when_the_grader_crashes(autograder_zip, tmp_path):
    root = unpack(autograder_zip, tmp_path, {"pipeline.py": ""})
    (root / "source" / "grader" / "__main__.py").write_text("raise RuntimeError('grader bug 1234')\n")
    results, staff_log = run_autograder_with_log(root)
    assert results["score"] == 0 and "exit status 1" in results["output"]
    assert "grader bug 1234" in staff_log and "grader bug 1234" not in results["output"]  # the log is the staff's


# The answer key's run (on one CPU, by the README's own recipe) is in tests/kit/test_gradescope_run.py.


@pytest.mark.slow  # a whole grader run in a subprocess
def test_stubs_score_zero(autograder_zip, tmp_path):
    files = {n: handout.strip_solutions((REPO / "minitorch" / n).read_text(), n)
             for n in handout.STUDENT_FILES if (REPO / "minitorch" / n).exists()}
    results = run_autograder(unpack(autograder_zip, tmp_path, files))
    assert results["tests"] and results["score"] == 0
    assert all(t["score"] == 0 for t in results["tests"])
    for test in results["tests"]:  # every criterion says which problem is still a stub
        problem = test["name"].split("-")[0]
        assert f"not implemented yet (Problem {problem})" in test["output"], test
