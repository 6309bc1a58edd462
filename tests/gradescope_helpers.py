"""Shared by the Gradescope tests: an /autograder stand-in from the bundle, and run_autograder in it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path


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


# Nested limits, each below the one around it: the test (pytest-timeout, AUTOGRADER_S + 60 in
# the tests that use this), the run_autograder process, the grader's own AUTOGRADER_TIMEOUT.
AUTOGRADER_S = 300


def run_autograder(root: Path, python: str = sys.executable) -> dict:
    return run_autograder_with_log(root, python)[0]


def run_autograder_with_log(root: Path, python: str = sys.executable) -> tuple[dict, str]:
    """Gradescope's results.json (what the student sees) and the autograder's own stdout (what
    Gradescope shows the staff only)."""
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": python, "AUTOGRADER_TIMEOUT": str(AUTOGRADER_S - 30)}
    result = subprocess.run(
        [str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True, timeout=AUTOGRADER_S
    )
    assert result.returncode == 0, result.stderr
    return json.loads((root / "results" / "results.json").read_text()), result.stdout
