"""Put some criteria's new results into an existing report: regrades and GPU results.

A regrade (``batch --only ...`` on a class whose reports exist) and a GPU run (the criteria
a CPU machine reported ``blocked``) both produce a report of a few criteria. :func:`merge`
replaces those criteria in the student's full report and keeps every other one as it was;
the report remembers each merge under ``merged`` (which criteria, from which run, seed and
environment), and the caller gets the changes for the changelog (course.gradebook).
"""
from __future__ import annotations

import time


def merge(old: dict, new: dict, source: str) -> tuple[dict, list[dict]]:
    """``(merged report, changes)``: ``old`` with each criterion of ``new`` replacing the one
    of the same id (a criterion ``old`` lacks is added). A change lists a criterion whose
    points or status differ. Both reports must be valid (course.batch reads them)."""
    replacements = {c.get("id"): c for c in new["criteria"]}
    criteria, changes = [], []
    for criterion in old["criteria"]:
        replacement = replacements.pop(criterion.get("id"), None)
        criteria.append(criterion if replacement is None else replacement)
        if replacement is not None and _differs(criterion, replacement):
            changes.append(_change(criterion, replacement))
    for added in replacements.values():
        criteria.append(added)
        changes.append(_change(None, added))
    earlier = old.get("merged")
    history: list = earlier if isinstance(earlier, list) else []
    reasons = list(dict.fromkeys([*_strings(old.get("review_reasons")), *_strings(new.get("review_reasons"))]))
    if new.get("files") != old.get("files"):
        reasons.append(f"the {source} graded different student files than the rest of this report "
                       "(the submission changed since it was graded)")
    merged = {
        **old,
        "criteria": criteria,
        "score": sum(c["earned"] for c in criteria),
        "max_score": sum(c.get("points", 0) for c in criteria),
        "blocked_points": sum(c.get("points", 0) for c in criteria if c.get("status") == "blocked"),
        "complete": old.get("complete") is True and new.get("complete") is True,
        "notes": list(dict.fromkeys([*_strings(old.get("notes")), *_strings(new.get("notes"))])),
        "review_reasons": reasons,
        "needs_review": bool(reasons),
        "merged": [*history, {
            "source": source,
            "criteria": [c.get("id") for c in new["criteria"]],
            "seed": new.get("seed"),
            "environment": new.get("environment"),
            "files": new.get("files"),
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }],
    }
    return merged, changes


def _differs(old: dict, new: dict) -> bool:
    return (old.get("earned"), old.get("status")) != (new.get("earned"), new.get("status"))


def _change(old: dict | None, new: dict) -> dict:
    return {
        "criterion": new.get("id", ""),
        "old_points": None if old is None else old.get("earned"),
        "new_points": new["earned"],
        "old_status": "" if old is None else old.get("status", ""),
        "new_status": new.get("status", ""),
    }


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
