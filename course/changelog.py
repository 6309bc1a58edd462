"""The gradebook's audit trail: ``<csv stem>-changelog.csv``, one row per real change of a
student's result (a regrade, a rubric's new points, a manual override).

Every build of the gradebook (``batch``, ``batch --rerun-failed``, ``slurm merge``, an import)
offers the changes its rows carry; a row is appended only when it is news: when the last row
logged for that student and criterion does not already end in the same points and status. So
a rebuild that changes nothing adds nothing, however often the same records are merged again,
and a result that changes back and forth is logged each time it moves.
"""
from __future__ import annotations

import csv
import time
from pathlib import Path

from course.outcomes import StudentGrade, escape_cell

COLUMNS = ("when", "run", "student", "criterion", "old_points", "new_points", "old_status", "new_status")


def path_of(csv_path: Path) -> Path:
    return csv_path.parent / f"{csv_path.stem}-changelog.csv"


def _last_states(path: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(student, criterion): (new_points, new_status)}`` of the last row logged for each, as written."""
    if not path.exists():
        return {}
    with open(path, newline="", encoding="utf-8") as handle:
        return {(row.get("student") or "", row.get("criterion") or ""): (row.get("new_points") or "", row.get("new_status") or "")
                for row in csv.DictReader(handle)}


def write(path: Path, run: str, outcomes: list[StudentGrade]) -> tuple[int, int]:
    """Append the changes of ``outcomes`` that the changelog does not hold yet, as run ``run``;
    ``(rows written, changes offered that were logged already)``."""
    last = _last_states(path)
    rows, known = [], 0
    for outcome in outcomes:
        for change in outcome.changes:
            key = (escape_cell(outcome.student), escape_cell(change["criterion"]))
            state = (escape_cell(change["new_points"]), escape_cell(change["new_status"]))
            if last.get(key) == state:
                known += 1
                continue
            last[key] = state
            rows.append([run, outcome.student, *(change[column] for column in COLUMNS[3:])])
    if not rows:
        return 0, known
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if handle.tell() == 0:
            writer.writerow(COLUMNS)
        writer.writerows([escape_cell(cell) for cell in [when, *row]] for row in rows)
    return len(rows), known


def summary(path: Path, written: int, known: int) -> str | None:
    """What a build of the gradebook says about its changelog: what it added, or that nothing
    changed (None for a first grading that changed nothing: there is no changelog to speak of)."""
    if written:
        return f"regrade: {written} criterion result(s) changed -> {path}"
    if known or path.exists():
        already = f" ({known} change(s) of earlier runs logged already)" if known else ""
        return f"changelog: nothing changed since the last build{already}; {path} left as it was"
    return None
