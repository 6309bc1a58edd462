"""The Gradescope bundle: layout, no answer key, and run_autograder in a folder standing in for
/autograder, which must always leave a results.json."""
import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader import bundle, handout

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist") / "autograder.zip"
    bundle.build(out)
    return out


def unpack(zip_path: Path, root: Path, submission: dict[str, str]) -> Path:
    """An /autograder stand-in: source/ from the zip, submission/ with the given files."""
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(root / "source")
        for info in archive.infolist():  # extractall drops permission bits
            os.chmod(root / "source" / info.filename, (info.external_attr >> 16) & 0o777)
    for relative, text in submission.items():
        (root / "submission" / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / relative).write_text(text)
    (root / "submission").mkdir(exist_ok=True)
    return root


def run_autograder(root: Path, python: str = sys.executable) -> dict:
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": python}
    result = subprocess.run(
        [str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    return json.loads((root / "results" / "results.json").read_text())


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
        subprocess.run(["bash", "-n", str(REPO / "grader" / "gradescope" / script)], check=True)


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
        # grader/checks/pipeline.py is a check module, not a student file: look in minitorch/.
        assert not [n for n in archive.namelist() if Path(n).parent.name == "minitorch" and Path(n).name in handout.STUDENT_FILES]
        for name in archive.namelist():
            text = archive.read(name).decode(errors="replace")
            assert not any(region in text for region in regions), f"{name} contains answer-key code"


def test_results_json_is_written_when_python_cannot_even_start(autograder_zip, tmp_path):
    root = unpack(autograder_zip, tmp_path, {"pipeline.py": ""})
    results = run_autograder(root, python=str(tmp_path / "no-such-python"))
    assert results["score"] == 0 and "course staff" in results["output"]


def test_results_json_is_written_when_the_grader_crashes(autograder_zip, tmp_path):
    root = unpack(autograder_zip, tmp_path, {"pipeline.py": ""})
    (root / "source" / "grader" / "__main__.py").write_text("raise RuntimeError('grader bug 1234')\n")
    results = run_autograder(root)
    assert results["score"] == 0
    assert "exit status 1" in results["output"] and "grader bug 1234" in results["output"]


# The answer key's run (on one CPU, by the README's own recipe) is in test_gradescope_run.py.


def test_stubs_score_zero(autograder_zip, tmp_path):
    files = {n: handout.strip_solutions((REPO / "minitorch" / n).read_text(), n)
             for n in handout.STUDENT_FILES if (REPO / "minitorch" / n).exists()}
    results = run_autograder(unpack(autograder_zip, tmp_path, files))
    assert results["tests"] and results["score"] == 0
    assert all(t["score"] == 0 for t in results["tests"])
