"""Gradescope entry point: grade ``ROOT/submission``, always write ``ROOT/results/results.json``.

Called by the bundle's ``run_autograder`` as ``python -m grader.gradescope_run ROOT``. It finds
the two student files wherever the upload put them (Gradescope unpacks an uploaded zip, which
may hold a folder), copies only them into a fresh folder, runs ``python -m grader grade FOLDER
--gradescope RESULTS`` under a time limit, and, when the grader did not leave a valid
results.json, writes one with score 0 and the reason. Nothing here raises.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from grader.layout import REPOSITORY, STUDENT_FILES
from grader.processes import kill_group

DEFAULT_TIMEOUT = 1800.0
LOG_TAIL = 4000
STAFF = "This is not your fault; please tell the course staff."


def find_student_files(submission: Path) -> dict[str, Path]:
    """The shallowest ``pipeline.py`` / ``tensor_parallel.py`` under ``submission``."""
    found: dict[str, Path] = {}
    candidates = sorted(
        (p for p in submission.rglob("*.py") if p.name in STUDENT_FILES and "__MACOSX" not in p.parts),
        key=lambda p: (len(p.relative_to(submission).parts), str(p)),
    )
    for path in candidates:
        found.setdefault(path.name, path)
    return found


def _valid(results: Path) -> dict | None:
    try:
        data = json.loads(results.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and (isinstance(data.get("score"), (int, float)) or isinstance(data.get("tests"), list))
    return data if ok else None


def _fallback(results: Path, reason: str) -> None:
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"score": 0, "output": reason, "tests": []}, indent=2))


def _run_grader(folder: Path, results: Path, source: Path, timeout: float) -> tuple[int | None, str]:
    """Run the grader in its own process group; return (exit status or None on timeout, log tail)."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "grader", "grade", str(folder), "--gradescope", str(results)],
            cwd=source, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process.pid)
            process.wait()
            returncode = None
        log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_TAIL))
        tail = log.read().decode(errors="replace")
    sys.stdout.write(tail)  # Gradescope shows the autograder's own output to staff
    return returncode, tail


def grade(root: Path) -> None:
    submission, results = root / "submission", root / "results" / "results.json"
    results.unlink(missing_ok=True)
    timeout = float(os.environ.get("AUTOGRADER_TIMEOUT", DEFAULT_TIMEOUT))
    found = find_student_files(submission) if submission.is_dir() else {}
    notes = [f"graded {path.relative_to(submission)}" for path in found.values()]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "submission"
        folder.mkdir()
        for name, path in found.items():
            shutil.copyfile(path, folder / name)
        returncode, tail = _run_grader(folder, results, REPOSITORY, timeout)
    data = _valid(results)
    if data is None:
        reason = "did not finish in time" if returncode is None else f"stopped with exit status {returncode}"
        _fallback(results, f"The autograder {reason} without a result. {STAFF}\n\n{tail}")
        return
    if returncode != 0:
        notes.append(f"The autograder stopped early (exit status {returncode}); the results may be partial. {STAFF}")
    if not found:
        notes.append(f"No {' or '.join(STUDENT_FILES)} found in your submission.")
    data["output"] = "\n".join([*notes, str(data.get("output", ""))]).strip()
    results.write_text(json.dumps(data, indent=2))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0] if argv else "/autograder")
    try:
        grade(root)
    except BaseException:  # the last line of defence: results.json must exist
        _fallback(root / "results" / "results.json", f"The autograder crashed. {STAFF}\n\n{traceback.format_exc()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
