"""The GPU criteria in Gradescope's score: Problem 2.3 needs two GPUs, which Gradescope lacks,
so the course staff grade it on a GPU machine and hand the results to the autograder.

The route (docs/gradescope.md): grade Gradescope's "Download Submissions" export, whose
folders are named ``submission_<id>``, on a GPU machine (``python -m course batch EXPORT
--only 2.3 ...``); build the bundle with those reports (``python -m kit bundle --gpu-reports
DIR`` puts them in ``gpu/``); upload it and "Regrade All Submissions". Each run then finds its
own submission's report by Gradescope's submission id (``submission_metadata.json``'s ``id``),
takes it only when it graded the very files being graded now (their sha256), and puts its
criteria in place of the ones blocked here. The wrapper reads its one report and removes the
folder before any student code runs, so no submission can read another's results.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from grader.protocol import read_json_report

FOLDER = "gpu"


def report_name(submission_id: object) -> str | None:
    """``submission_<id>.json``: the report of Gradescope's submission ``submission_id``."""
    text = str(submission_id) if isinstance(submission_id, (int, str)) and not isinstance(submission_id, bool) else ""
    return f"submission_{text}.json" if text.isdigit() else None


def take(source: Path, metadata: dict | None) -> dict | None:
    """This submission's GPU report from the bundle unpacked at ``source``, or None; the
    bundle's GPU folder is removed either way (the other students' results)."""
    folder = source / FOLDER
    if not folder.is_dir():
        return None
    name = report_name((metadata or {}).get("id"))
    report = read_json_report(folder / name) if name else None
    shutil.rmtree(folder, ignore_errors=True)
    return report


def _trusted(criterion: dict) -> bool:
    """A GPU result to count: graded (not blocked, not the grader's error), not a smoke run, its
    timing conclusive (the staff's gradebook flags the others for a look first)."""
    details = criterion.get("details")
    details = details if isinstance(details, dict) else {}
    timing = details.get("timing")
    timing = timing if isinstance(timing, dict) else {}
    return (criterion.get("status") in ("passed", "failed", "timeout") and details.get("smoke") is not True
            and timing.get("conclusive") is not False)


def merge(report: dict, gpu: dict) -> dict | None:
    """``report`` (a JSON report of this run) with ``gpu``'s graded criteria in place of its
    blocked ones and a note that says so; when the GPU run graded other files, ``report`` with
    a note saying why they still wait; None when the GPU run graded nothing blocked here."""
    graded = {c["id"]: c for c in gpu["criteria"] if _trusted(c)}
    taken = [c["id"] for c in report["criteria"] if c.get("status") == "blocked" and c.get("id") in graded]
    if not taken:
        return None
    notes = [note for note in report.get("notes") or [] if isinstance(note, str)]
    if gpu.get("files") != report.get("files"):
        return {**report, "notes": [*notes, f"{', '.join(taken)}: graded on GPUs for other files than these (an earlier "
                                             "submission?); not counted until the course staff grade these files on GPUs"]}
    criteria = [graded[c["id"]] if c.get("id") in taken else c for c in report["criteria"]]
    return {**report, "criteria": criteria, "notes": [*notes, f"{', '.join(taken)}: graded on GPUs by the course staff"]}
