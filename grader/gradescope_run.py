"""Gradescope entry point: grade ``ROOT/submission``, always write ``ROOT/results/results.json``.

Called by the bundle's ``run_autograder`` as ``python -m grader.gradescope_run ROOT``. It finds
the two student files wherever the upload put them (Gradescope unpacks an uploaded zip, which
may hold a folder, macOS metadata or Windows-style names such as ``hw\\pipeline.py``), or else
one archive in the upload (a .zip, .tar.gz or .tgz that Gradescope left packed, read by the
grader like any archive). It copies only those into a fresh folder and runs ``python -m grader
grade FOLDER --gradescope RESULTS --budget SECONDS``, which rewrites results.json after every
criterion, so whatever stops the run leaves what was graded. The budget is the rubric's
``[gradescope] budget``; the grader is killed ``OUTER_MARGIN`` seconds after it. When the grader
left no valid results.json, one with score 0 and the reason is written (the grader's log, which
names every criterion, goes to stdout: the staff's). Nothing here raises.

Before grading, a submission over the rubric's submission limit is turned away with the last
counted result (grader.submission_limit), and the staff's GPU results for this submission,
when the bundle carries them, are taken and merged after grading (grader.gpu_results).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from grader import gpu_results, submission_limit
from grader.layout import DEFAULT_RUBRIC, REPOSITORY, STUDENT_FILES
from grader.processes import kill_group
from grader.protocol import read_json_report, write_atomic
from grader.rubric import gradescope_budget
from grader.submission import ARCHIVE_SUFFIXES, is_macos_metadata, renamed_student_file

OUTER_MARGIN = 60.0  # seconds after the budget before the grader is killed (it stops itself first)
LOG_TAIL = 4000
NAMES_SHOWN = 10
STAFF = "This is not your fault; please tell the course staff."


def _depth(path: Path, submission: Path) -> int:
    """Folders above ``path`` in the upload, counting Windows separators kept in a file name."""
    return len(path.relative_to(submission).parts) + path.name.count("\\")


def _student_name(path: Path) -> str:
    return path.name.rsplit("\\", 1)[-1]


def survey(submission: Path) -> tuple[dict[str, Path], list[Path], list[Path]]:
    """(student file name -> the shallowest such file, archives, other files) of an upload.
    macOS metadata (``__MACOSX/``, ``._*``) is neither graded nor listed."""
    found: dict[str, Path] = {}
    renamed: dict[str, list[Path]] = {}  # "pipeline (1).py" and the like, used only without the file itself
    archives, others = [], []
    files = sorted((p for p in submission.rglob("*") if p.is_file() and not p.is_symlink()),
                   key=lambda p: (_depth(p, submission), str(p)))
    for path in files:
        if is_macos_metadata(path.relative_to(submission).as_posix()):
            continue
        if _student_name(path) in STUDENT_FILES and _student_name(path) not in found:
            found[_student_name(path)] = path
        elif (original := renamed_student_file(_student_name(path))) is not None:
            renamed.setdefault(original, []).append(path)
        elif path.name.lower().endswith(ARCHIVE_SUFFIXES):
            archives.append(path)
        else:
            others.append(path)
    for name, copies in renamed.items():
        if name not in found and len(copies) == 1:
            found[name] = copies[0]
        else:
            others += copies
    return found, archives, others


def _listed(paths: list[Path], submission: Path) -> str:
    names = [str(p.relative_to(submission)) for p in paths[:NAMES_SHOWN]]
    return ", ".join(names) + (f" and {len(paths) - NAMES_SHOWN} more" if len(paths) > NAMES_SHOWN else "")


def prepare(submission: Path, scratch: Path) -> tuple[Path, list[str]]:
    """What the grader is given (a folder with the student files, or one archive) and notes
    for the student saying what was graded and what was skipped."""
    found, archives, others = survey(submission) if submission.is_dir() else ({}, [], [])
    folder = scratch / "submission"
    folder.mkdir()
    if not found and archives:
        target = scratch / archives[0].name
        shutil.copyfile(archives[0], target)
        notes = [f"graded the files inside {archives[0].relative_to(submission)}"]
        if len(archives) > 1:
            notes.append(f"skipped the other archives: {_listed(archives[1:], submission)} (upload one)")
        return target, notes
    for name, path in found.items():
        shutil.copyfile(path, folder / name)
    notes = [f"graded {path.relative_to(submission)}" + ("" if _student_name(path) == name else f" as {name}")
             for name, path in found.items()]
    if others or archives:
        notes.append(f"skipped (only {' and '.join(STUDENT_FILES)} are graded): {_listed(others + archives, submission)}")
    if not found:
        notes.append(f"No {' or '.join(STUDENT_FILES)} found in your submission.")
    return folder, notes


def _valid(results: Path) -> dict | None:
    try:
        data = json.loads(results.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and (isinstance(data.get("score"), (int, float)) or isinstance(data.get("tests"), list))
    return data if ok else None


def _write(results: Path, data: dict) -> None:
    """Atomically, like the grader's own writes: Gradescope may stop us at any moment."""
    results.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(results, json.dumps(data, indent=2) + "\n")


def _fallback(results: Path, reason: str) -> None:
    """Score 0 and the reason; the run does not count against a submission limit (not the student's doing)."""
    _write(results, {"score": 0, "output": reason, "output_format": "text", "tests": [], "extra_data": {"counted": False}})


def _run_grader(target: Path, results: Path, report: Path, source: Path, budget: float,
                timeout: float) -> tuple[int | None, str]:
    """Run the grader in its own process group; return (exit status or None when killed, log tail)."""
    command = [sys.executable, "-m", "grader", "grade", str(target), "--gradescope", str(results), "--json", str(report),
               "--budget", f"{budget:.1f}"]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=source, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process.pid)
            process.wait()
            returncode = None
        log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_TAIL))
        tail = log.read().decode(errors="replace")
    sys.stdout.write(tail)  # Gradescope shows the autograder's own output to staff only (every criterion's line)
    return returncode, tail


def _with_gpu(data: dict, report: dict | None, gpu: dict | None, seconds: float) -> dict:
    """Gradescope's results again from ``report`` with the staff's GPU results in it (see
    grader.gpu_results); ``data`` as it was when there is nothing to merge."""
    merged = gpu_results.merge(report, gpu) if report is not None and gpu is not None else None
    if merged is None:
        return data
    from grader.report import gradescope, report_from_json  # the checks (torch): only for a merge
    from grader.rubric import load_rubric

    return gradescope(report_from_json(merged), load_rubric(DEFAULT_RUBRIC), seconds)


def grade(root: Path) -> None:
    started = time.monotonic()
    submission, results = root / "submission", root / "results" / "results.json"
    results.unlink(missing_ok=True)
    metadata = submission_limit.read_metadata(root / "submission_metadata.json")
    gpu = gpu_results.take(REPOSITORY, metadata)  # before any student code runs
    limited, limit_note = submission_limit.check(metadata, submission_limit.limit_of(DEFAULT_RUBRIC))
    if limited is not None:
        print("over the submission limit: not graded; the last counted submission's results are shown")
        _write(results, limited)
        return
    budget = gradescope_budget(DEFAULT_RUBRIC)
    timeout = float(os.environ.get("AUTOGRADER_TIMEOUT", budget + OUTER_MARGIN))
    with tempfile.TemporaryDirectory() as scratch:
        target, notes = prepare(submission, Path(scratch))
        remaining = budget - (time.monotonic() - started)
        returncode, _ = _run_grader(target, results, Path(scratch) / "report.json", REPOSITORY, remaining,
                                    timeout - (time.monotonic() - started))
        report = read_json_report(Path(scratch) / "report.json")
    data = _valid(results)
    if data is None:
        reason = "did not finish in time" if returncode is None else f"stopped with exit status {returncode}"
        _fallback(results, f"The autograder {reason} without a result. {STAFF}")  # its log is the staff's
        return
    data = _with_gpu(data, report, gpu, time.monotonic() - started)
    if returncode is None:
        notes.append(f"The autograder was stopped after {time.monotonic() - started:.0f} s; only the criteria listed "
                     f"were graded. {STAFF}")
    elif returncode != 0:
        notes.append(f"The autograder stopped early (exit status {returncode}); the results may be partial. {STAFF}")
    data["output"] = "\n".join([*([limit_note] if limit_note else []), *notes, str(data.get("output", ""))]).strip()
    data["extra_data"] = {**(data.get("extra_data") or {}), "counted": True}
    _write(results, data)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0] if argv else "/autograder")
    try:
        grade(root)
    except BaseException:  # the last line of defence: results.json must exist
        print(traceback.format_exc())  # for the staff: Gradescope shows students only results.json
        _fallback(root / "results" / "results.json", f"The autograder crashed. {STAFF}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
