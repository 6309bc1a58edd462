"""The grader's vocabulary and its one report format (standard library only).

- :class:`Status`: what a criterion ended as.
- :class:`Kind`: what a child's run produced; the child itself may only report the
  ``REPORTED_BY_CHILD`` kinds, in an envelope ``{"kind": ..., ...}`` (see grader.child).
- :class:`Result` / :class:`Report`: one grading run, and the JSON report they become
  (:func:`as_json`, :func:`write_json_report`) and are read back from
  (:func:`read_json_report`, used by the batch runner): writer and reader side by side.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

SCHEMA_VERSION = 1
MAX_REPORT_BYTES = 10_000_000


class _Text(str, Enum):
    """An enum whose members are their strings (in JSON, f-strings and comparisons)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Status(_Text):
    PASSED = "passed"  # full points
    FAILED = "failed"  # the submission's fault; the message says why in the student's terms
    TIMEOUT = "timeout"  # the criterion's time ran out; its processes were killed
    BLOCKED = "blocked"  # this machine lacks the hardware: never counted as a failure
    ERROR = "error"  # the grader itself broke: loud, never a silent zero


class Kind(_Text):
    OBSERVATION = "observation"  # what observe_<name> saw, for the parent to judge
    FAIL = "fail"  # observe_<name> raised Fail: a fact only the child could judge
    EXCEPTION = "exception"  # the student's code raised
    GARBAGE = "garbage"  # the child handed back something that is not plain data
    GRADER_ERROR = "grader-error"  # the child's own set-up broke
    TIMEOUT = "timeout"  # (parent) the child ran out of time
    FLOOD = "flood"  # (parent) the child printed past the output limit
    EXITED = "exited"  # (parent) the child ended without reporting


REPORTED_BY_CHILD = frozenset({Kind.OBSERVATION, Kind.FAIL, Kind.EXCEPTION, Kind.GARBAGE, Kind.GRADER_ERROR})


def format_points(value: float) -> str:
    return f"{value:g}"


@dataclass
class Result:
    """The outcome of one criterion, as the reports show it."""

    id: str
    problem: str
    title: str
    points: float
    earned: float
    status: Status
    message: str
    seconds: float
    output: str = ""
    details: dict = field(default_factory=dict)


@dataclass
class Report:
    submission: str
    files: dict
    environment: dict
    seed: int
    results: list[Result] = field(default_factory=list)
    planned: int = 0
    complete: bool = False
    child_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    policy_findings: list[dict] = field(default_factory=list)
    review: list[str] = field(default_factory=list)

    @property
    def needs_review(self) -> bool:
        """A person should look at this submission (the score stands until they do)."""
        return bool(self.review)

    @property
    def score(self) -> float:
        return sum(r.earned for r in self.results)

    @property
    def max_score(self) -> float:
        """Points of every graded criterion, blocked ones included."""
        return sum(r.points for r in self.results)

    @property
    def blocked_points(self) -> float:
        return sum(r.points for r in self.results if r.status == Status.BLOCKED)

    def count(self, status: Status) -> int:
        return sum(r.status == status for r in self.results)

    def flag(self, reason: str) -> None:
        """Ask the course staff to look at this submission, for ``reason`` (once)."""
        if reason not in self.review:
            self.review.append(reason)


def as_json(report: Report) -> dict:
    """The ``--json`` report."""
    return {
        "schema_version": SCHEMA_VERSION,
        "submission": report.submission,
        "files": report.files,
        "environment": report.environment,
        "score": report.score,
        "max_score": report.max_score,
        "blocked_points": report.blocked_points,
        "complete": report.complete,
        "seed": report.seed,
        "notes": report.notes,
        "needs_review": report.needs_review,
        "review_reasons": report.review,
        "policy_findings": report.policy_findings,
        "criteria": [asdict(result) for result in report.results],
    }


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and os.replace: never half a file."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def write_json_report(report: Report, path: str | os.PathLike) -> None:
    write_atomic(path, json.dumps(as_json(report), indent=2) + "\n")


def read_json_report(path: Path) -> dict | None:
    """A JSON report as :func:`write_json_report` wrote it, or None when it is missing, too
    big or not of this schema (a report is data from a run that graded student code)."""
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            return None
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or report.get("schema_version") != SCHEMA_VERSION:
        return None
    criteria = report.get("criteria")
    if not isinstance(criteria, list) or not all(
        isinstance(c, dict) and isinstance(c.get("problem"), str) and isinstance(c.get("earned"), (int, float))
        for c in criteria
    ):
        return None
    return report
