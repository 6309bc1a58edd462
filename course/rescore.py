"""Reports graded under another version of the rubric, at every build of the gradebook.

Each JSON report names the rubric it was graded with (``rubric``: every active criterion's
check fingerprint, grader.grading.rubric_fingerprint) and each criterion result the
fingerprint of what decided it (its check, params, hardware and fallback). Against the
rubric in force now, a report's criterion is:

- the same but for its points: **re-scored** from the stored result (all or nothing: the new
  points if it passed, else 0), no grading needed;
- gone from the rubric (removed, ``enabled = false``, its problem disabled): **dropped** from
  the score;
- judged differently (another check, params, hardware or fallback) or new (a criterion the
  rubric did not have when the report was graded): **to regrade**, named with the command
  that does it; until then the report keeps its old result and the row needs review.

Reports without fingerprints (graded before reports carried them) are left as they are.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

REGRADE_FLAG = "rubric_changed"
REMOVED = "removed from the rubric"


@dataclass(frozen=True)
class CurrentRubric:
    """The rubric in force: its fingerprint and each active criterion's ``(points, fingerprint)``."""

    path: Path
    sha256: str
    criteria: dict[str, tuple[float, str]]

    def record(self) -> dict:
        """The report's ``rubric`` field of a report graded with this rubric."""
        return {"sha256": self.sha256, "criteria": {cid: fingerprint for cid, (_, fingerprint) in self.criteria.items()}}


def load(path: Path) -> CurrentRubric:
    """The rubric at ``path``, fingerprinted as the grader does (imports the checks).

    Raises:
        grader.rubric.RubricError: the rubric is wrong.
    """
    from grader.grading import rubric_fingerprint
    from grader.rubric import load_rubric

    active = load_rubric(path).active()
    prints = rubric_fingerprint(active)
    return CurrentRubric(path, prints["sha256"], {c.id: (c.points, prints["criteria"][c.id]) for c in active})


@dataclass
class Reconciled:
    """What :func:`reconcile` made of one report."""

    report: dict
    changes: list[dict] = field(default_factory=list)  # for the changelog
    regrade: list[str] = field(default_factory=list)   # criterion ids to grade again
    rewritten: bool = False                              # the report differs from the stored one


def reconcile(report: dict, current: CurrentRubric) -> Reconciled:
    """``report`` under ``current``: points-only edits re-scored, removed criteria dropped, the
    criteria to regrade named (see the module's docstring). ``report`` itself is not changed."""
    graded_with = report.get("rubric")
    if not isinstance(graded_with, dict) or not isinstance(graded_with.get("criteria"), dict):
        return Reconciled(report)  # graded before reports said their rubric: nothing to compare
    done = Reconciled(report)
    criteria = []
    for criterion in report["criteria"]:
        kept = _reconcile_one(criterion, current, done)
        if kept is not None:
            criteria.append(kept)
    present = {c.get("id") for c in report["criteria"]}
    done.regrade += [cid for cid in current.criteria if cid not in present and cid not in graded_with["criteria"]]
    judged_now = not done.regrade and all(c.get("fingerprint") for c in criteria)
    record = current.record() if judged_now else graded_with
    if criteria != report["criteria"] or record != graded_with:
        done.rewritten = True
        done.report = {
            **report, "criteria": criteria, "rubric": record,
            "score": sum(c["earned"] for c in criteria),
            "max_score": sum(c.get("points", 0) for c in criteria),
            "blocked_points": sum(c.get("points", 0) for c in criteria if c.get("status") == "blocked"),
        }
        if done.changes:
            earlier = report.get("merged")
            history: list = earlier if isinstance(earlier, list) else []
            done.report["merged"] = [*history, {"source": "rubric", "rubric": current.sha256,
                                                "criteria": [c["criterion"] for c in done.changes],
                                                "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}]
    return done


def _reconcile_one(criterion: dict, current: CurrentRubric, done: Reconciled) -> dict | None:
    """One stored criterion under ``current``: as it was, re-scored, or None (dropped)."""
    cid, status = criterion.get("id"), criterion.get("status", "")
    if cid not in current.criteria:
        done.changes.append(_change(cid, criterion["earned"], None, status, REMOVED))
        return None
    points, fingerprint = current.criteria[cid]
    if not criterion.get("fingerprint"):
        return criterion  # a result from before fingerprints: cannot tell how it was judged
    if criterion["fingerprint"] != fingerprint:
        done.regrade.append(cid)
        return criterion
    if criterion.get("points") == points:
        return criterion
    earned = points if status == "passed" else 0
    if earned != criterion["earned"]:
        done.changes.append(_change(cid, criterion["earned"], earned, status, status))
    return {**criterion, "points": points, "earned": earned}


def _change(cid: object, old: float, new: float | None, old_status: str, new_status: str) -> dict:
    return {"criterion": cid, "old_points": old, "new_points": new, "old_status": old_status, "new_status": new_status}


def regrade_advice(regrades: dict[str, list[str]], rubric: Path) -> str:
    """The line naming who to regrade and how, from ``{student: criterion ids}``."""
    ids = sorted({cid for ids in regrades.values() for cid in ids})
    return (f"rubric: {len(regrades)} student(s) were graded with another version of {', '.join(ids)} "
            f"(a check, its params, hardware or fallback changed, or the criterion is new in {rubric}): "
            f"their old results stand, flagged {REGRADE_FLAG}, until you regrade them with "
            f"`python -m course batch FOLDER --csv CSV --only {' '.join(ids)}`: {', '.join(sorted(regrades))}")
