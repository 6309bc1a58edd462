"""Gradescope submission limits: at most N graded submissions in any window of H hours
(the rubric's ``[gradescope] submission_limit`` and ``limit_window_hours``).

Gradescope hands the autograder ``/autograder/submission_metadata.json``: this submission's
``created_at`` and its ``previous_submissions``, each with its ``submission_time``, ``score``
and ``results`` (the results.json it got). As Gradescope's documentation advises, the window
is counted back from this submission's ``created_at``, never from the clock, so a regrade
weeks later decides as the first run did.

A submission over the limit is not graded: its results are those of the student's last
counted submission, their output opened by the reason and the time the next submission
counts. Every results.json says whether its submission counted (``extra_data.counted``), so
a submission that was turned away does not count against the window itself, nor does a run
the autograder itself failed.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from grader.rubric import SubmissionLimit, submission_limit


def limit_of(rubric: Path) -> SubmissionLimit | None:
    """The limit the rubric at ``rubric`` sets (read without importing the checks), or None."""
    return submission_limit(rubric)


def read_metadata(path: Path) -> dict | None:
    """``submission_metadata.json``, or None when there is none or it is not a JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _time(value: object) -> datetime | None:
    """A Gradescope timestamp (ISO 8601 with its UTC offset), or None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def shown(when: datetime) -> str:
    return f"{when:%Y-%m-%d %H:%M} (UTC{when:%z})"


def counted(results: object) -> bool:
    """Whether the submission that got ``results`` counted against the limit."""
    extra = results.get("extra_data") if isinstance(results, dict) else None
    return not (isinstance(extra, dict) and extra.get("counted") is False)


def _previous(metadata: dict) -> list[tuple[datetime, dict | None]]:
    """The previous submissions that counted, oldest first: (time, results or None)."""
    found = []
    for entry in metadata.get("previous_submissions") or []:
        when = _time(entry.get("submission_time")) if isinstance(entry, dict) else None
        results = entry.get("results") if isinstance(entry, dict) else None
        if when is not None and counted(results):
            found.append((when, results if isinstance(results, dict) else None))
    return sorted(found, key=lambda item: item[0])


def _window(limit: SubmissionLimit) -> str:
    hours = f"{limit.window_hours:g} hour{'' if limit.window_hours == 1 else 's'}"
    return f"{limit.submissions} graded submission{'' if limit.submissions == 1 else 's'} in any {hours}"


def check(metadata: dict | None, limit: SubmissionLimit | None) -> tuple[dict | None, str | None]:
    """``(results to write instead of grading, note for a graded run)``: the first is set when
    this submission is over the limit and a previous result can be shown; the second says
    how many of the window's submissions this one uses. Both None without a limit or metadata."""
    now = _time((metadata or {}).get("created_at"))
    if limit is None or now is None:
        return None, None
    start = now - timedelta(hours=limit.window_hours)
    previous = _previous(metadata or {})
    in_window = [when for when, _ in previous if start < when <= now]
    if len(in_window) < limit.submissions:
        return None, f"Submission limit: {_window(limit)}; this is graded submission {len(in_window) + 1} of {limit.submissions}."
    last = next(((when, results) for when, results in reversed(previous) if results is not None and when <= now), None)
    if last is None:  # nothing to show instead: grade it rather than leave the student with nothing
        return None, None
    when, results = last
    reason = (f"Submission limit: {_window(limit)}. You made {len(in_window)} in the {limit.window_hours:g} hours before "
              f"this one, so this submission was NOT graded; the results below are those of your submission of "
              f"{shown(when)}. From {shown(min(in_window) + timedelta(hours=limit.window_hours))} on, a submission is graded again.")
    extra = results.get("extra_data") if isinstance(results.get("extra_data"), dict) else {}
    return {**results, "output": f"{reason}\n\n{results.get('output', '')}".rstrip(),
            "extra_data": {**extra, "counted": False, "shows_submission_of": when.isoformat()}}, None
