"""What a grading run shows and writes: terminal lines and tables, ``--json``, ``--gradescope``.

Text meant for people (the terminal, Gradescope's page) goes out through
:func:`grader.protocol.printable`: what a student's code printed or raised cannot reach a
terminal as control characters.
"""
from __future__ import annotations

import json
import os
from collections import Counter

from grader.protocol import Report, Result, Status, points_phrase, printable, write_atomic
from grader.protocol import format_points as _points
from grader.rubric import Rubric

OUTPUT_LINES_SHOWN = 15
POLICY_LINES_SHOWN = 20


def live_line(result: Result) -> str:
    """One line per criterion as it finishes: id, status, points, seconds."""
    return printable(f"  {result.id:<22} {result.status:<8} {_points(result.earned):>3}/{_points(result.points):<3} {result.seconds:6.2f} s")


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _output_tail(result: Result) -> str:
    lines = result.output.rstrip("\n").splitlines()[-OUTPUT_LINES_SHOWN:]
    return "\n".join(lines)


def _failures(results: list[Result]) -> list[str]:
    """Each failure with its message. Failures that share a one-line message and printed
    nothing (a missing file fails every criterion of its problems alike) are one line."""
    shared = Counter((r.status, r.message) for r in results if not r.output and "\n" not in r.message)
    lines, grouped = [], set()
    for result in results:
        key = (result.status, result.message)
        if shared.get(key, 0) > 1:
            if key not in grouped:
                grouped.add(key)
                lines.append(_group_line([r for r in results if (r.status, r.message) == key and not r.output]))
            continue
        lines.append(f"{result.id} ({points_phrase(result.points)}): {result.status}")
        lines.append(_indent(result.message))
        if result.output:
            lines.append(f"    your code printed (last {OUTPUT_LINES_SHOWN} lines at most):")
            lines.append(_indent(_output_tail(result), "      | "))
    return lines


def _group_line(results: list[Result]) -> str:
    """``3.3-mlp, 3.3-layer (6 points): failed: <message>``; past four criteria, their problems."""
    points = points_phrase(sum(r.points for r in results))
    if len(results) <= 4:
        who = f"{', '.join(r.id for r in results)} ({points})"
    else:
        problems = list(dict.fromkeys(r.problem for r in results))
        who = f"Problem{'s' if len(problems) > 1 else ''} {', '.join(problems)} ({len(results)} criteria, {points})"
    return f"{who}: {results[0].status}: {results[0].message}"


def summary(report: Report, rubric: Rubric, blocked_apart: bool = False) -> str:
    """The table per problem and the total, then every failure message. With
    ``blocked_apart`` (Gradescope, whose score leaves blocked criteria out), the total is out
    of the points graded here, as the score the student sees next to it."""
    problems: dict[str, list[Result]] = {}
    for result in report.results:
        problems.setdefault(result.problem, []).append(result)
    width = max([len(rubric.title_of(p)) for p in problems] + [10])
    lines = ["", f"{'Problem':<8}{'':<{width + 2}}{'Score':>9}"]
    for problem, results in problems.items():
        earned = sum(r.earned for r in results)
        points = sum(r.points for r in results)
        blocked = [r for r in results if r.status == Status.BLOCKED]
        note = f"  blocked: {blocked[0].message}" if blocked else ""
        lines.append(f"{problem:<8}{rubric.title_of(problem):<{width + 2}}{_points(earned):>5}/{_points(points):<4}{note}")
    if blocked_apart and report.blocked_points:
        total = f"{_points(report.score):>5}/{_points(report.max_score - report.blocked_points):<4}"
        blocked_note = f"  (and {points_phrase(report.blocked_points)} graded separately on GPUs, not in this total)"
    else:
        total = f"{_points(report.score):>5}/{_points(report.max_score):<4}"
        blocked_note = f"  ({points_phrase(report.blocked_points)} blocked: hardware missing)" if report.blocked_points else ""
    lines.append(f"{'Total':<{width + 10}}{total}{blocked_note}")
    if not report.complete:
        lines.append(f"(incomplete: {len(report.results)} of {report.planned} criteria graded)")
    problems_shown = [r for r in report.results if r.status not in (Status.PASSED, Status.BLOCKED)]
    if problems_shown:
        lines += ["", "What went wrong:"]
        lines += _failures(problems_shown)
    if report.count(Status.ERROR):
        lines += ["", f"GRADER ERROR in {report.count(Status.ERROR)} criteria: the grader broke, not the submission. Tell the course staff."]
    for note in report.notes:
        lines.append(f"note: {note}")
    if report.needs_review:
        lines += ["", "NEEDS REVIEW by the course staff (this does not change the score above):"]
        lines += [f"  - {reason}" for reason in report.review]
        for finding in report.policy_findings[:POLICY_LINES_SHOWN]:
            lines.append(f"    {finding['file']}:{finding['line']}: {finding['name']}: {finding['code']}")
        if len(report.policy_findings) > POLICY_LINES_SHOWN:
            lines.append(f"    ... and {len(report.policy_findings) - POLICY_LINES_SHOWN} more (see the JSON report)")
    if report.child_seconds is not None:
        lines += ["", f"Each criterion ran in its own isolated process (start-up {report.child_seconds * 1000:.0f} ms); seed {report.seed}."]
    return printable("\n".join(lines))


GPU_NOTE = (
    "Not graded here, and not counted in this score: {names}. This autograder has no GPU; "
    "the course staff grade these criteria separately on GPUs."
)
UNFINISHED_NOTE = (
    "Grading has not finished: only the criteria listed were graded. If this message stays, the "
    "autograder was stopped (its time limit?) before the others; tell the course staff."
)


def gradescope(report: Report, rubric: Rubric, seconds: float) -> dict:
    """Gradescope's results.json for ``report``: one test per criterion with the rubric's
    visibility. Blocked criteria (hardware this machine lacks) are left out of the tests and
    the score, so a CPU-only run never shows them as failed; a note names them."""
    visibility = {criterion.id: criterion.visibility for criterion in rubric.criteria}
    tests, index, blocked = [], {}, []  # type: list[dict], dict[str, int], list[str]
    for result in report.results:
        index[result.problem] = index.get(result.problem, 0) + 1
        if result.status == Status.BLOCKED:
            blocked.append(f"{result.id} ({_points(result.points)} points, {result.message})")
            continue
        output = result.message
        if result.output:
            output += f"\n\nYour code printed (last {OUTPUT_LINES_SHOWN} lines):\n{_output_tail(result)}"
        tests.append({
            "name": f"{result.id}: {result.title}",
            "number": f"{result.problem}.{index[result.problem]}",
            "score": result.earned,
            "max_score": result.points,
            "status": "passed" if result.status == Status.PASSED else "failed",
            "output": printable(f"[{result.status}] {output}".rstrip()) if result.status != Status.PASSED else "passed",
            "visibility": visibility.get(result.id, "visible"),
        })
    notes = [GPU_NOTE.format(names="; ".join(blocked))] if blocked else []
    if not report.complete:
        notes.append(UNFINISHED_NOTE)
    return {
        "score": sum(test["score"] for test in tests),
        "execution_time": int(round(seconds)),
        "output": "\n\n".join([*notes, summary(report, rubric, blocked_apart=True).strip()]),
        "tests": tests,
    }


def write_gradescope(report: Report, rubric: Rubric, seconds: float, path: str | os.PathLike) -> None:
    write_atomic(path, json.dumps(gradescope(report, rubric, seconds), indent=2) + "\n")


def failure_results(message: str, seconds: float = 0.0) -> dict:
    """A Gradescope results.json for a run that could not grade at all (bad PATH, bad rubric)."""
    return {"score": 0, "execution_time": int(round(seconds)), "output": message, "tests": []}


