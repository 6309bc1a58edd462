"""What a grading run shows and writes: terminal lines and tables, ``--json``, ``--gradescope``.

Text meant for people (the terminal, Gradescope's page) goes out through
:func:`grader.protocol.printable`: what a student's code printed or raised cannot reach a
terminal as control characters. Notes, review reasons and the policy scan's findings, which
quote names from the submission (files in an archive, identifiers), go out through
:func:`grader.protocol.one_line`: each stays on its one line, so a file named with newlines
cannot add lines that pass for the grader's own (a forged table or total).
"""
from __future__ import annotations

import json
import os
from collections import Counter

from grader.protocol import Report, Result, Status, one_line, points_phrase, printable, write_atomic
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


def counted(number: int, singular: str, plural: str | None = None) -> str:
    """``1 criterion``, ``2 criteria``: a count with its noun in the right number."""
    return f"{number} {singular if number == 1 else plural or singular + 's'}"


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
        who = f"Problem{'s' if len(problems) > 1 else ''} {', '.join(problems)} ({counted(len(results), 'criterion', 'criteria')}, {points})"
    return f"{who}: {results[0].status}: {results[0].message}"


def _names_any(text: str, ids: set[str]) -> bool:
    return any(criterion in text for criterion in ids)


def _table(results: list[Result], rubric: Rubric) -> tuple[list[str], int]:
    """The score per problem (earned / points, and why a problem's criteria were blocked) and
    the width of its first two columns."""
    problems: dict[str, list[Result]] = {}
    for result in results:
        problems.setdefault(result.problem, []).append(result)
    width = max([len(rubric.title_of(p)) for p in problems] + [10])
    lines = ["", f"{'Problem':<8}{'':<{width + 2}}{'Score':>9}"]
    for problem, own in problems.items():
        earned, points = sum(r.earned for r in own), sum(r.points for r in own)
        blocked = [r for r in own if r.status == Status.BLOCKED]
        note = f"  blocked: {blocked[0].message}" if blocked else ""
        lines.append(f"{problem:<8}{rubric.title_of(problem):<{width + 2}}{_points(earned):>5}/{_points(points):<4}{note}")
    return lines, width + 10


def _total(results: list[Result], blocked_apart: bool, width: int) -> str:
    """The total line; with ``blocked_apart`` (Gradescope, whose score leaves blocked criteria
    out), out of the points graded here, as the score the student sees next to it."""
    score = sum(r.earned for r in results)
    possible = sum(r.points for r in results)
    blocked = sum(r.points for r in results if r.status == Status.BLOCKED)
    if blocked_apart and blocked:
        return (f"{'Total':<{width}}{_points(score):>5}/{_points(possible - blocked):<4}  "
                f"(and {points_phrase(blocked)} graded separately on GPUs, not in this total)")
    note = f"  ({points_phrase(blocked)} blocked: hardware missing)" if blocked else ""
    return f"{'Total':<{width}}{_points(score):>5}/{_points(possible):<4}{note}"


def _review(report: Report, hidden: set[str]) -> list[str]:
    """Why the course staff will look at this submission, and the policy scan's findings."""
    reasons = [reason for reason in report.review if not _names_any(reason, hidden)]
    if not reasons and not report.policy_findings:
        return []
    lines = ["", "NEEDS REVIEW by the course staff (this does not change the score above):"]
    lines += [f"  - {one_line(reason)}" for reason in reasons]
    for finding in report.policy_findings[:POLICY_LINES_SHOWN]:
        lines.append(one_line(f"    {finding.get('file')}:{finding.get('line')}: {finding.get('name')}: {finding.get('code')}"))
    if len(report.policy_findings) > POLICY_LINES_SHOWN:
        lines.append(f"    ... and {len(report.policy_findings) - POLICY_LINES_SHOWN} more (see the JSON report)")
    return lines


def _not_for_students(report: Report, rubric: Rubric) -> list[str]:
    """The staff's reminder of the criteria students do not see now (rubric ``visibility``)."""
    visibility = {criterion.id: criterion.visibility for criterion in rubric.criteria}
    kept = [f"{r.id} ({visibility[r.id]})" for r in report.results if visibility.get(r.id, "visible") != "visible"]
    return ["", f"Not shown to students (Gradescope's text, feedback files): {', '.join(kept)}"] if kept else []


def summary(report: Report, rubric: Rubric, blocked_apart: bool = False, shown: set[str] | None = None,
            review: bool = True) -> str:
    """The table per problem and the total, then every failure message, the notes and (with
    ``review``) why the course staff will look at the submission. With ``blocked_apart``
    (Gradescope, whose score leaves blocked criteria out), the total is out of the points
    graded here, as the score the student sees next to it.

    ``shown``: the ids of the criteria a student may see now (None: all, the staff's view).
    Nothing of any other criterion appears: no line, no message, no points in its problem's
    score or the total, no note or review reason that names it; a problem none of whose
    criteria are shown is not listed.
    """
    results = [r for r in report.results if shown is None or r.id in shown]
    hidden = {r.id for r in report.results} - {r.id for r in results}
    lines, width = _table(results, rubric)
    lines.append(_total(results, blocked_apart, width))
    if hidden:
        lines.append("(Only the criteria listed here are in this table; your score on Gradescope counts every criterion.)")
    if not report.complete:
        known = not hidden and report.planned > len(report.results)
        lines.append(f"(incomplete: {f'{len(report.results)} of {report.planned} criteria graded' if known else 'not every criterion was graded'})")
    problems_shown = [r for r in results if r.status not in (Status.PASSED, Status.BLOCKED)]
    if problems_shown:
        lines += ["", "What went wrong:", *_failures(problems_shown)]
    errors = sum(r.status == Status.ERROR for r in results)
    if errors:
        lines += ["", f"GRADER ERROR in {counted(errors, 'criterion', 'criteria')}: the grader broke, not the submission. "
                      "Tell the course staff."]
    lines += [f"note: {one_line(note)}" for note in report.notes if not _names_any(note, hidden)]
    if review:
        lines += _review(report, hidden)
    if shown is None:
        lines += _not_for_students(report, rubric)
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
# A criterion that is "hidden" but worth points still counts in Gradescope's total, which
# Gradescope shows unless a test waits for the due date or for publication: this zero-point
# test waits for publication, so the total cannot give the hidden criterion's result away.
TOTAL_WAITS = {
    "name": "Your total score", "number": "0", "score": 0, "max_score": 0, "status": "passed",
    "output": "Your total score is shown when the course staff publish the grades.", "visibility": "after_published",
}


def visible_ids(report: Report, rubric: Rubric) -> set[str]:
    """The criteria of ``report`` that a student may always see (rubric ``visibility = "visible"``)."""
    visibility = {criterion.id: criterion.visibility for criterion in rubric.criteria}
    return {r.id for r in report.results if visibility.get(r.id, "visible") == "visible"}


def _test(result: Result, number: str, visibility: str) -> dict:
    output = result.message
    if result.output:
        output += f"\n\nYour code printed (last {OUTPUT_LINES_SHOWN} lines):\n{_output_tail(result)}"
    return {
        "name": f"{result.id}: {result.title}",
        "number": number,
        "score": result.earned,
        "max_score": result.points,
        "status": "passed" if result.status == Status.PASSED else "failed",
        "output": printable(f"[{result.status}] {output}".rstrip()) if result.status != Status.PASSED else "passed",
        "visibility": visibility,
    }


def gradescope(report: Report, rubric: Rubric, seconds: float) -> dict:
    """Gradescope's results.json for ``report``: one test per criterion with the rubric's
    visibility. Blocked criteria (hardware this machine lacks) are left out of the tests and
    the score, so a CPU-only run never shows them as failed; a note names them.

    The top-level ``output`` is shown to every student at once, so it holds only the
    criteria whose visibility is ``visible`` (:func:`summary`'s ``shown``); every text is
    plain text (``output_format``), never HTML that a student's printed output could inject,
    and the autograder's own stdout (every criterion's line) stays the staff's.
    """
    visibility = {criterion.id: criterion.visibility for criterion in rubric.criteria}
    shown = visible_ids(report, rubric)
    tests, index, blocked = [], {}, []  # type: list[dict], dict[str, int], list[str]
    for result in report.results:
        index[result.problem] = index.get(result.problem, 0) + 1
        if result.status == Status.BLOCKED:
            if result.id in shown:
                blocked.append(f"{result.id} ({points_phrase(result.points)}, {result.message})")
            continue
        tests.append(_test(result, f"{result.problem}.{index[result.problem]}", visibility.get(result.id, "visible")))
    notes = [GPU_NOTE.format(names="; ".join(blocked))] if blocked else []
    if not report.complete:
        notes.append(UNFINISHED_NOTE)
    if any(test["visibility"] == "hidden" and test["max_score"] > 0 for test in tests):
        tests.append(dict(TOTAL_WAITS))
    return {
        "score": sum(test["score"] for test in tests),
        "execution_time": int(round(seconds)),
        "output": "\n\n".join([*notes, summary(report, rubric, blocked_apart=True, shown=shown).strip()]),
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def write_gradescope(report: Report, rubric: Rubric, seconds: float, path: str | os.PathLike) -> None:
    write_atomic(path, json.dumps(gradescope(report, rubric, seconds), indent=2) + "\n")


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _status(value: object) -> Status:
    """A status read back from a report; one this grader never writes is its ``error``."""
    return Status(value) if value in {status.value for status in Status} else Status.ERROR


def report_from_json(data: dict) -> Report:
    """A JSON report (:func:`grader.protocol.as_json`, as :func:`grader.protocol.read_json_report`
    returns it) back as a :class:`Report`, for the views rendered from it later (feedback
    files, Gradescope's results after a GPU merge). A field it lacks gets its default."""
    results = [
        Result(id=str(c.get("id", "")), problem=c["problem"], title=str(c.get("title") or ""), points=_number(c.get("points")),
               earned=_number(c.get("earned")), status=_status(c.get("status")), message=str(c.get("message") or ""),
               seconds=_number(c.get("seconds")), output=str(c.get("output") or ""),
               details=c["details"] if isinstance(c.get("details"), dict) else {})
        for c in data["criteria"] if isinstance(c, dict)
    ]

    def strings(key: str) -> list[str]:
        return [str(item) for item in data.get(key) or [] if isinstance(item, str)]

    return Report(
        submission=str(data.get("submission", "")), files=data["files"] if isinstance(data.get("files"), dict) else {},
        environment=data["environment"] if isinstance(data.get("environment"), dict) else {},
        seed=int(_number(data.get("seed"))), results=results, planned=len(results), complete=data.get("complete") is True,
        notes=strings("notes"), review=strings("review_reasons"),
        policy_findings=[f for f in data.get("policy_findings") or [] if isinstance(f, dict)],
    )


def failure_results(message: str, seconds: float = 0.0) -> dict:
    """A Gradescope results.json for a run that could not grade at all (bad PATH, bad rubric)."""
    return {"score": 0, "execution_time": int(round(seconds)), "output": message, "output_format": "text", "tests": []}


