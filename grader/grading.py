"""Grade one submission: select criteria, run each in the harness, judge, collect results.

Statuses: ``passed``, ``failed`` (the submission's fault, with a reason in the student's
terms), ``timeout``, ``blocked`` (this machine lacks the hardware: never a failure) and
``error`` (the grader itself broke: loud, never a silent zero). Whatever comes from a child
is data: a report the judge cannot read is the student's ``failed``, never ``error``.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import json
import os
import platform
import secrets
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from grader import policy
from grader.bounded import TooSlow, bounded
from grader.checks.judging import Fail, Outside, observed
from grader.harness import Harness, HarnessError, Outcome, foreign_signal, format_bytes
from grader.layout import STUDENT_FILES
from grader.protocol import Kind, Report, Result, Status
from grader.report import counted
from grader.rubric import HARDWARE, Criterion, Rubric
from grader.submission import Submission
from minitorch.cli import STUB_MESSAGE

# Less time than this left of a run's budget: the criterion is not started (it could not finish).
MIN_CRITERION_SECONDS = 2.0


@dataclass(frozen=True)
class Budget:
    """A whole run's time: ``seconds`` in all, ending at ``ends`` (a ``time.monotonic()`` value)."""

    seconds: float
    ends: float

    def left(self) -> float:
        return self.ends - time.monotonic()

JUDGE_ERROR = "judge_error"  # in a result's details: the judge's traceback, for the course staff
# A judge's own time (wall clock, in the grader's process): a correct run's takes well under a
# second; this bound is for observations built to make a judge's comparisons run for minutes.
JUDGE_SECONDS = 30.0


def environment() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "gpus": gpu_count(),
    }


def gpu_count() -> int:
    """CUDA GPUs this machine has (0 without CUDA); decides which criteria are blocked."""
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver means no GPU to grade on
        return 0


def check_fingerprint(criterion: Criterion) -> str:
    """What decides a criterion's result, hashed: its check, params, hardware and fallback (not its
    points, title, timeout or visibility). A rubric edit that keeps it can be re-scored from a stored
    result; one that changes it needs the criterion graded again."""
    decides = [criterion.check, criterion.params, criterion.needs, criterion.fallback]
    return hashlib.sha256(json.dumps(decides, sort_keys=True, default=str).encode()).hexdigest()[:16]


def rubric_fingerprint(criteria: list[Criterion]) -> dict:
    """The rubric a report is graded with: ``{"sha256": of every criterion's id, points and check
    fingerprint, "criteria": {id: check fingerprint}}`` over the active ``criteria``."""
    prints = {c.id: check_fingerprint(c) for c in criteria}
    whole = json.dumps(sorted((c.id, c.points, prints[c.id]) for c in criteria))
    return {"sha256": hashlib.sha256(whole.encode()).hexdigest()[:16], "criteria": prints}


def select(criteria: list[Criterion], only: list[str] | None) -> list[Criterion]:
    """The criteria named by ``--only`` (ids, problems like ``2.2``, or whole problems like ``2``).

    Raises:
        ValueError: a name that matches no criterion.
    """
    if not only:
        return list(criteria)
    chosen = set()
    for name in only:
        matching = {c.id for c in criteria if name in (c.id, c.problem) or c.problem.split(".")[0] == name}
        if not matching:
            known = ", ".join(sorted({c.problem for c in criteria}))
            raise ValueError(f"--only {name}: no criterion or problem of that name (problems: {known}; or a criterion id)")
        chosen |= matching
    return [c for c in criteria if c.id in chosen]


def _not_implemented(problem: str, message: str) -> str:
    """``not implemented yet (Problem 3.3)``, naming the stub that stopped it: its own, or an
    earlier part's it builds on (a kit stub says ``Problem 3.2: ColumnParallelLinear.shard``)."""
    text = f"not implemented yet (Problem {problem})"
    stub = STUB_MESSAGE.search(message or "")
    if stub is None:
        return text + (f"; your code raised NotImplementedError({message!r})" if message else "")
    if stub[1] == problem:
        return f"{text}: {stub[2]} still raises NotImplementedError"
    return f"{text}: it builds on Problem {stub[1]}, whose {stub[2]} still raises NotImplementedError"


def _exit_reason(outcome: Outcome) -> str:
    code = outcome.exitcode
    if code is None or code >= 0:
        code = 0 if code is None else code
        return (
            f"exited with status {code} before reporting a result "
            f"(sys.exit or os._exit in your code?)"
        )
    name = foreign_signal(outcome) or f"signal {-code}"
    if outcome.out_of_memory:
        cause = " while the machine ran out of memory (the system's out-of-memory killer ran)"
    elif name in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL"):
        cause = " (a crash in native code?)"
    else:
        cause = ", a signal the grader did not send (your code, or another program on the grading machine)"
    if outcome.first_signal is None:
        return f"was killed by {name}{cause} before reporting a result"
    if outcome.first_signal == name:
        return f"was killed by {name}{cause}; it was run again and killed by {name} again before reporting a result"
    return (f"was killed by {outcome.first_signal}, run again, and then killed by {name}{cause} before reporting "
            "a result")


def _flood_reason(outcome: Outcome, output_limit_mb: float) -> str:
    """The child was stopped at the size limit on its files: its printed output, or another file."""
    if outcome.output_bytes >= int(output_limit_mb * 1024 * 1024):
        return (f"printed more than the {output_limit_mb:g} MB output limit and was stopped "
                f"(printed {format_bytes(outcome.output_bytes)}; kept the last 64 KB)")
    # The limit is the child's RLIMIT_FSIZE: writing any file past it stops the child (SIGXFSZ).
    return (f"wrote a file past the {output_limit_mb:g} MB file-size limit and was stopped (no file your code "
            f"writes may grow past {output_limit_mb:g} MB; it printed {format_bytes(outcome.output_bytes)})")


def judge_observation(criterion: Criterion, seed: int, observation,
                      outside: Outside | None = None) -> tuple[Status, str, dict]:
    """``(status, message, details)`` from the criterion's parent-side ``judge_*`` function, run
    under :data:`JUDGE_SECONDS` of its own; a judge with an ``outside`` parameter is also given
    what the grader measured of the run from outside the child."""
    judge_function = getattr(importlib.import_module(criterion.judge_module), "judge_" + criterion.name)
    extra = {"outside": outside} if "outside" in inspect.signature(judge_function).parameters else {}
    try:
        details = bounded(lambda: judge_function(seed, dict(criterion.params), observed(observation), **extra),
                          JUDGE_SECONDS)
    except Fail as failure:
        return Status.FAILED, str(failure), failure.details
    except TooSlow:
        message = (
            f"the grader's check of what your code produced did not finish within {JUDGE_SECONDS:g} s (a correct "
            "run's takes well under a second): what came back is far larger or stranger than expected, and the "
            "course staff will review it"
        )
        return Status.FAILED, message, {JUDGE_ERROR: f"the judge ran past {JUDGE_SECONDS:g} s"}
    except Exception as error:  # noqa: BLE001 - the observation came from the child: it is data
        message = (
            f"the grader could not read what your code produced ({type(error).__name__}: {error}); "
            "the check stopped on data of a shape it does not expect, and the course staff will review it"
        )
        return Status.FAILED, message, {JUDGE_ERROR: traceback.format_exc(limit=-3)}
    return Status.PASSED, "", details if isinstance(details, dict) else {}


def judge(criterion: Criterion, seed: int, outcome: Outcome, submission: Submission, timeout: float, output_limit_mb: float) -> tuple[Status, str]:
    """``(status, message)`` for what a child produced, unless it is an observation to judge
    (see :func:`judge_observation`): a failure, a timeout, an early exit, tampering."""
    envelope = outcome.envelope
    if envelope.get("tampered"):
        changed = ", ".join(envelope["tampered"][:5])
        return Status.FAILED, (
            f"your code replaced part of the grader or of torch's comparison functions while it ran ({changed}); "
            "what this criterion observed cannot be trusted, so it scores 0 and the course staff will review it"
        )
    if outcome.kind == Kind.FAIL:
        return Status.FAILED, envelope["message"]
    if outcome.kind == Kind.EXCEPTION:
        missing = envelope.get("module_not_found") or ""
        if missing.startswith("minitorch.") and missing.split(".", 1)[1] + ".py" in submission.missing():
            return Status.FAILED, f"missing {missing.split('.', 1)[1]}.py (not in the submission)"
        if envelope["not_implemented"]:
            return Status.FAILED, _not_implemented(criterion.problem, envelope["message"])
        return Status.FAILED, "your code raised an exception:\n" + envelope["traceback"]
    if outcome.kind == Kind.GARBAGE:
        return Status.FAILED, f"your code handed back something the grader cannot use: {envelope.get('message', '')}"
    if outcome.kind == Kind.TIMEOUT:
        return Status.TIMEOUT, f"did not finish within {timeout:g} s and was stopped (an endless loop, a deadlock, or a stage that never returns?)"
    if outcome.kind == Kind.FLOOD:
        return Status.FAILED, _flood_reason(outcome, output_limit_mb)
    if outcome.kind == Kind.EXITED:
        return Status.FAILED, _exit_reason(outcome)
    if outcome.kind == Kind.MEMORY:
        return Status.FAILED, (f"its processes together held {format_bytes(outcome.memory_bytes or 0)}, more than a "
                               "criterion may use (the memory limit counts all of its processes), and were stopped")
    return Status.ERROR, f"grader error in the child for {criterion.check}:\n{envelope.get('message', outcome.kind)}"


def grade(
    submission: Submission,
    rubric: Rubric,
    only: list[str] | None = None,
    timeout: float | None = None,
    seed: int | None = None,
    on_result: Callable[[Report, Result], None] | None = None,
    budget: Budget | None = None,
) -> Report:
    """Grade ``submission`` against the active criteria of ``rubric``.

    ``timeout`` replaces every criterion's own; ``seed`` (fresh when None) makes a run
    reproducible; ``on_result(report, result)`` is called as each criterion finishes.
    ``budget``: the whole run's time; a criterion gets at most what is left of it, and once less
    than ``MIN_CRITERION_SECONDS`` is left the rest are not run (status ``timeout``, with why).

    Raises:
        ValueError: ``only`` names no criterion.
    """
    criteria = select(rubric.active(), only)
    report = _new_report(submission, rubric, len(criteria), seed)
    with contextlib.ExitStack() as stack:
        harness = _start_harness(stack, report, submission, rubric, criteria)
        for criterion in criteria:
            result = _grade_criterion(criterion, report, submission, rubric, harness, timeout, budget)
            report.results.append(result)
            if on_result is not None:
                on_result(report, result)
    if report.count(Status.ERROR):
        report.flag("grader error")
    report.complete = True
    return report


def _new_report(submission: Submission, rubric: Rubric, planned: int, seed: int | None) -> Report:
    """An empty report with what is known before any criterion runs (the policy scan too)."""
    report = Report(
        submission=submission.path, files=submission.sha256(), environment=environment(),
        seed=secrets.randbelow(2**31 - 1) if seed is None else seed, planned=planned,
        rubric=rubric_fingerprint(rubric.active()),
    )
    findings = policy.scan(submission.files, rubric.forbidden)
    report.policy_findings = findings[:policy.FINDINGS_KEPT]
    if findings:
        names = sorted({f["name"] for f in findings})
        report.flag(f"policy scan: {', '.join(names)}")
    if len(findings) > policy.FINDINGS_KEPT:
        report.note(f"the policy scan found {len(findings)} uses; the report lists the first {policy.FINDINGS_KEPT}")
    for note in submission.notes:  # what was graded from where (a browser's rename, a file in an archive)
        if note not in (f"{name} from {name}" for name in STUDENT_FILES):
            report.note(note)
    if submission.skipped:
        report.note(f"skipped in the archive: {'; '.join(submission.skipped)}")
    if submission.ignored:
        report.note(f"ignored files in the submission (only the student files are graded): {', '.join(submission.ignored[:10])}")
    return report


def _start_harness(stack: contextlib.ExitStack, report: Report, submission: Submission, rubric: Rubric,
                   criteria: list[Criterion]) -> Harness | str | None:
    """The harness for the criteria this machine can run; None when none needs one; the
    reason as a string when it could not start (those criteria are the grader's ``error``)."""
    runnable = [c for c in criteria if HARDWARE[c.needs] <= report.environment["gpus"]]
    if not runnable or submission.problem is not None:
        return None
    try:
        harness = stack.enter_context(Harness(submission, rubric.settings, sorted({c.observe_module for c in runnable})))
        report.child_seconds = harness.start()
    except (HarnessError, OSError) as error:
        return f"grader error: could not start isolated children: {error}"
    for note in harness.notes:
        report.note(note)
    report.environment["children_uid"] = harness.user[0] if harness.user else os.geteuid()
    report.environment["defences"] = harness.defences
    return harness


def _grade_criterion(criterion: Criterion, report: Report, submission: Submission, rubric: Rubric,
                     harness: Harness | str | None, timeout: float | None, budget: Budget | None) -> Result:
    started = time.perf_counter()
    limit = timeout if timeout is not None else criterion.timeout
    try:
        status, message, output, details = _verdict(criterion, report, submission, rubric, harness, limit, budget)
    except Exception:  # noqa: BLE001 - the grader broke: say so loudly, and grade the other criteria
        status, output, details = Status.ERROR, "", {}
        message = f"grader error grading {criterion.id}:\n{traceback.format_exc(limit=-4)}"
    return Result(
        id=criterion.id, problem=criterion.problem, title=criterion.title, points=criterion.points,
        earned=criterion.points if status == Status.PASSED else 0, status=status, message=message,
        seconds=round(time.perf_counter() - started, 3), output=output if status != Status.PASSED else "",
        details=details, fingerprint=check_fingerprint(criterion),
    )


def _verdict(criterion: Criterion, report: Report, submission: Submission, rubric: Rubric,
             harness: Harness | str | None, limit: float, budget: Budget | None) -> tuple[Status, str, str, dict]:
    """``(status, message, output, details)`` of one criterion."""
    gpus, wanted = report.environment["gpus"], HARDWARE[criterion.needs]
    if wanted > gpus:
        return Status.BLOCKED, f"needs {wanted} CUDA GPU{'s' if wanted > 1 else ''} (this machine has {gpus})", "", {}
    if submission.problem is not None:
        return Status.FAILED, submission.problem, "", {}
    missing = submission.missing_file_for(criterion.problem)
    if missing:
        return Status.FAILED, f"missing {missing} (not in the submission)", "", {}
    if not isinstance(harness, Harness):
        return Status.ERROR, harness or "grader error: no harness was started", "", {}
    full_limit = limit
    if budget is not None:
        if budget.left() < MIN_CRITERION_SECONDS:
            return Status.TIMEOUT, (
                f"not graded: the whole run's time budget ({budget.seconds:.0f} s) was used up before this criterion "
                "(earlier criteria ran long or timed out)"
            ), "", {}
        limit = min(limit, round(budget.left(), 1))
    if not criterion.fallback:
        return _run_and_judge(criterion, report, submission, rubric, harness, limit, full_limit, budget)
    own = _run_and_judge(replace(criterion, params={**criterion.params, "pieces": "own"}), report, submission,
                         rubric, harness, limit, full_limit, budget)
    if own[0] not in (Status.FAILED, Status.TIMEOUT):
        return own
    if budget is not None:
        limit = min(full_limit, round(budget.left(), 1))
    theirs = _run_and_judge(replace(criterion, params={**criterion.params, "pieces": "grader"}), report, submission,
                            rubric, harness, limit, full_limit, budget)
    if theirs[0] == Status.PASSED:  # the mistake is in another criterion's piece: it costs that one only
        note = (f"passed with the grader's {criterion.fallback} in place of yours; with yours it did not: "
                f"{own[1]}")
        return Status.PASSED, note, own[2], {**theirs[3], "own_pieces": {"status": str(own[0]), "message": own[1]}}
    return theirs  # it fails with the grader's pieces too: the mistake is this criterion's own


def _run_and_judge(criterion: Criterion, report: Report, submission: Submission, rubric: Rubric, harness: Harness,
                   limit: float, full_limit: float, budget: Budget | None) -> tuple[Status, str, str, dict]:
    """One child run of ``criterion`` and its verdict: ``(status, message, output, details)``."""
    try:
        outcome = harness.run(criterion, report.seed, limit)
    except (HarnessError, OSError) as error:
        return Status.ERROR, f"grader error running {criterion.id}: {error}", "", {}
    _note_outcome(report, criterion, outcome)
    if outcome.kind == Kind.OBSERVATION and not outcome.envelope.get("tampered"):
        status, message, details = judge_observation(criterion, report.seed, outcome.envelope["observation"],
                                                     Outside(wall_seconds=outcome.seconds))
        if JUDGE_ERROR in details:
            report.flag(f"{criterion.id}: the judge could not read what the child reported")
        if status == Status.FAILED and details.get("tampered"):
            report.flag(f"{criterion.id}: what the child reported contradicts the grader's own measurement")
        return status, message, outcome.output, details
    status, message = judge(criterion, report.seed, outcome, submission, limit, rubric.settings.output_limit_mb)
    if status == Status.TIMEOUT and limit < full_limit and budget is not None:
        message += f" (its limit is {full_limit:g} s; only {limit:.0f} s of the run's {budget.seconds:.0f} s budget were left)"
    return status, message, outcome.output, {}


def _note_outcome(report: Report, criterion: Criterion, outcome: Outcome) -> None:
    """What a child did that the score does not show, for the report and for review."""
    if outcome.orphans:
        report.note(
            f"{criterion.id}: your code left {counted(outcome.orphans, 'process', 'processes')} running after the "
            f"criterion ended (setsid or a double fork?); the grader killed {'it' if outcome.orphans == 1 else 'them'}"
        )
        report.flag("processes left running")
    if outcome.first_signal is not None:
        again = foreign_signal(outcome)
        if again is None:
            report.note(f"{criterion.id}: its first run was killed by {outcome.first_signal}, a signal the grader "
                        "did not send; it was run again and the second run counts")
        else:
            report.flag(f"{criterion.id}: killed by {outcome.first_signal}, then by {again} when run again "
                        "(signals the grader did not send)")
    if outcome.envelope.get("tampered"):
        report.flag(f"{criterion.id} replaced grader or torch code")
    if outcome.envelope.get("forged"):
        report.flag(f"{criterion.id}: the child's report claimed a grader error after the student's code had started")
