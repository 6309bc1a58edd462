"""What a grading run shows and writes: terminal lines and tables, ``--json``, ``--gradescope``."""
from __future__ import annotations

import json
import os

from grader.protocol import Report, Result, Status, write_atomic
from grader.protocol import format_points as _points
from grader.rubric import Rubric

OUTPUT_LINES_SHOWN = 15
POLICY_LINES_SHOWN = 20


def live_line(result: Result) -> str:
    """One line per criterion as it finishes: id, status, points, seconds."""
    return f"  {result.id:<22} {result.status:<8} {_points(result.earned):>3}/{_points(result.points):<3} {result.seconds:6.2f} s"


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _output_tail(result: Result) -> str:
    lines = result.output.rstrip("\n").splitlines()[-OUTPUT_LINES_SHOWN:]
    return "\n".join(lines)


def summary(report: Report, rubric: Rubric) -> str:
    """The table per problem and the total, then every failure message."""
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
    total = f"{_points(report.score):>5}/{_points(report.max_score):<4}"
    blocked_note = f"  ({_points(report.blocked_points)} points blocked: hardware missing)" if report.blocked_points else ""
    lines.append(f"{'Total':<{width + 10}}{total}{blocked_note}")
    if not report.complete:
        lines.append(f"(incomplete: {len(report.results)} of {report.planned} criteria graded)")
    problems_shown = [r for r in report.results if r.status not in (Status.PASSED, Status.BLOCKED)]
    if problems_shown:
        lines += ["", "What went wrong:"]
        for result in problems_shown:
            lines.append(f"{result.id} ({_points(result.points)} points): {result.status}")
            lines.append(_indent(result.message))
            if result.output:
                lines.append(f"    your code printed (last {OUTPUT_LINES_SHOWN} lines at most):")
                lines.append(_indent(_output_tail(result), "      | "))
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
    return "\n".join(lines)


def gradescope(report: Report, rubric: Rubric, seconds: float) -> dict:
    """Gradescope's results.json for ``report``."""
    tests, index = [], {}  # type: list[dict], dict[str, int]
    for result in report.results:
        index[result.problem] = index.get(result.problem, 0) + 1
        output = result.message
        if result.output:
            output += f"\n\nYour code printed (last {OUTPUT_LINES_SHOWN} lines):\n{_output_tail(result)}"
        test = {
            "name": f"{result.id}: {result.title}",
            "number": f"{result.problem}.{index[result.problem]}",
            "score": result.earned,
            "max_score": result.points,
            "status": "passed" if result.status == Status.PASSED else "failed",
            "output": f"[{result.status}] {output}".rstrip() if result.status != Status.PASSED else "passed",
            "visibility": "visible",
        }
        tests.append(test)
    return {
        "score": report.score,
        "execution_time": int(round(seconds)),
        "output": summary(report, rubric).strip(),
        "tests": tests,
    }


def write_gradescope(report: Report, rubric: Rubric, seconds: float, path: str | os.PathLike) -> None:
    write_atomic(path, json.dumps(gradescope(report, rubric, seconds), indent=2) + "\n")


def failure_results(message: str, seconds: float = 0.0) -> dict:
    """A Gradescope results.json for a run that could not grade at all (bad PATH, bad rubric)."""
    return {"score": 0, "execution_time": int(round(seconds)), "output": message, "tests": []}


