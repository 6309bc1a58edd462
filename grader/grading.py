"""Grade one submission: select criteria, run each in the harness, judge, collect results.

Statuses: ``passed``, ``failed`` (the submission's fault, with a reason in the student's
terms), ``timeout``, ``blocked`` (this machine lacks the hardware: never a failure) and
``error`` (the grader itself broke: loud, never a silent zero).
"""
from __future__ import annotations

import contextlib
import importlib
import os
import platform
import secrets
import signal
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from grader import policy
from grader.checks import Fail, observed
from grader.harness import Harness, HarnessError, Outcome, format_bytes
from grader.rubric import HARDWARE, Criterion, Rubric
from grader.submission import Submission

STATUSES = ("passed", "failed", "timeout", "blocked", "error")
# Less time than this left of a run's budget: the criterion is not started (it could not finish).
MIN_CRITERION_SECONDS = 2.0


@dataclass
class Result:
    """The outcome of one criterion, as the reports show it."""

    id: str
    problem: str
    title: str
    points: float
    earned: float
    status: str
    message: str
    seconds: float
    output: str = ""
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Budget:
    """A whole run's time: ``seconds`` in all, ending at ``ends`` (a ``time.monotonic()`` value)."""

    seconds: float
    ends: float

    def left(self) -> float:
        return self.ends - time.monotonic()


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
        return sum(r.points for r in self.results if r.status == "blocked")

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)


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
    text = f"not implemented yet (Problem {problem})"
    if message and not message.startswith(f"Problem {problem}:"):
        text += f"; your code raised NotImplementedError({message!r})"
    return text


def _exit_reason(code: int | None) -> str:
    if code is None or code >= 0:
        code = 0 if code is None else code
        return (
            f"exited with status {code} before reporting a result "
            f"(sys.exit or os._exit in your code?)"
        )
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    hint = " (out of memory?)" if name == "SIGKILL" else " (a crash in native code?)" if name in ("SIGSEGV", "SIGBUS", "SIGABRT") else ""
    return f"was killed by {name} before reporting a result{hint}"


def judge_observation(criterion: Criterion, seed: int, observation) -> tuple[str, str, dict]:
    """``(status, message, details)`` from the criterion's parent-side ``judge_*`` function."""
    judge_function = getattr(importlib.import_module(criterion.module), "judge_" + criterion.name)
    try:
        details = judge_function(seed, dict(criterion.params), observed(observation))
    except Fail as failure:
        return "failed", str(failure), failure.details
    except Exception:  # noqa: BLE001 - a broken judge is the grader's fault: say so loudly
        return "error", f"grader error in {criterion.check} (judge):\n{traceback.format_exc(limit=-3)}", {}
    return "passed", "", details if isinstance(details, dict) else {}


def judge(criterion: Criterion, seed: int, outcome: Outcome, submission: Submission, timeout: float, output_limit_mb: float) -> tuple[str, str]:
    """``(status, message)`` for what a child produced, unless it is an observation to judge
    (see :func:`judge_observation`): a failure, a timeout, an early exit, tampering."""
    envelope = outcome.envelope
    if envelope.get("tampered"):
        changed = ", ".join(envelope["tampered"][:5])
        return "failed", (
            f"your code replaced part of the grader or of torch's comparison functions while it ran ({changed}); "
            "what this criterion observed cannot be trusted, so it scores 0 and the course staff will review it"
        )
    if outcome.kind == "fail":
        return "failed", envelope["message"]
    if outcome.kind == "exception":
        missing = envelope.get("module_not_found") or ""
        if missing.startswith("minitorch.") and missing.split(".", 1)[1] + ".py" in submission.missing():
            return "failed", f"missing {missing.split('.', 1)[1]}.py (not in the submission)"
        if envelope["not_implemented"]:
            return "failed", _not_implemented(criterion.problem, envelope["message"])
        return "failed", "your code raised an exception:\n" + envelope["traceback"]
    if outcome.kind == "garbage":
        return "failed", f"your code handed back something the grader cannot use: {envelope.get('message', '')}"
    if outcome.kind == "timeout":
        return "timeout", f"did not finish within {timeout:g} s and was stopped (an endless loop, a deadlock, or a stage that never returns?)"
    if outcome.kind == "flood":
        return "failed", (
            f"printed more than the {output_limit_mb:g} MB output limit and was stopped "
            f"(printed {format_bytes(outcome.output_bytes)}; kept the last 64 KB)"
        )
    if outcome.kind == "exited":
        return "failed", _exit_reason(outcome.exitcode)
    return "error", f"grader error in the child for {criterion.check}:\n{envelope.get('message', outcome.kind)}"


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
    report = Report(
        submission=submission.path, files=submission.sha256(), environment=environment(),
        seed=secrets.randbelow(2**31 - 1) if seed is None else seed, planned=len(criteria),
    )
    report.policy_findings = policy.scan(submission.files, rubric.forbidden)
    if report.policy_findings:
        names = sorted({f["name"] for f in report.policy_findings})
        _flag(report, f"policy scan: {', '.join(names)}")
    if submission.skipped:
        report.notes.append(f"skipped in the archive: {'; '.join(submission.skipped)}")
    if submission.ignored:
        report.notes.append(f"ignored files in the submission (only the student files are graded): {', '.join(submission.ignored[:10])}")
    gpus = report.environment["gpus"]
    runnable = [c for c in criteria if HARDWARE[c.needs] <= gpus]
    with contextlib.ExitStack() as stack:
        harness, broken = None, None
        if runnable and submission.problem is None:
            modules = sorted({c.module for c in runnable})
            try:
                harness = stack.enter_context(Harness(submission, rubric.settings, modules))
                report.child_seconds = harness.start()
                report.notes.extend(harness.notes)
                report.environment["children_uid"] = harness.user[0] if harness.user else os.geteuid()
                report.environment["defences"] = harness.defences
            except (HarnessError, OSError) as error:
                broken = f"grader error: could not start isolated children: {error}"
        for criterion in criteria:
            started = time.perf_counter()
            limit = timeout if timeout is not None else criterion.timeout
            output, details = "", {}
            if HARDWARE[criterion.needs] > gpus:
                wanted = HARDWARE[criterion.needs]
                status, message = "blocked", f"needs {wanted} CUDA GPU{'s' if wanted > 1 else ''} (this machine has {gpus})"
            elif submission.problem is not None:
                status, message = "failed", submission.problem
            elif submission.missing_file_for(criterion.problem):
                status, message = "failed", f"missing {submission.missing_file_for(criterion.problem)} (not in the submission)"
            elif broken is not None:
                status, message = "error", broken
            elif budget is not None and budget.left() < MIN_CRITERION_SECONDS:
                status, message = "timeout", (
                    f"not graded: the whole run's time budget ({budget.seconds:.0f} s) was used up before this criterion "
                    "(earlier criteria ran long or timed out)"
                )
            else:
                limit, full_limit = (limit, limit) if budget is None else (min(limit, round(budget.left(), 1)), limit)
                try:
                    outcome = harness.run(criterion, report.seed, limit)
                    if outcome.kind == "observation" and not outcome.envelope.get("tampered"):
                        status, message, details = judge_observation(criterion, report.seed, outcome.envelope["observation"])
                    else:
                        status, message = judge(criterion, report.seed, outcome, submission, limit, rubric.settings.output_limit_mb)
                    output = outcome.output
                    _note_outcome(report, criterion, outcome)
                    if status == "timeout" and limit < full_limit:
                        message += f" (its limit is {full_limit:g} s; only {limit:.0f} s of the run's {budget.seconds:.0f} s budget were left)"
                except (HarnessError, OSError) as error:
                    status, message = "error", f"grader error running {criterion.id}: {error}"
            result = Result(
                id=criterion.id, problem=criterion.problem, title=criterion.title, points=criterion.points,
                earned=criterion.points if status == "passed" else 0, status=status, message=message,
                seconds=round(time.perf_counter() - started, 3), output=output if status != "passed" else "",
                details=details,
            )
            report.results.append(result)
            if on_result is not None:
                on_result(report, result)
    if report.count("error"):
        _flag(report, "grader error")
    report.complete = True
    return report


def _note_outcome(report: Report, criterion: Criterion, outcome: Outcome) -> None:
    """What a child did that the score does not show, for the report and for review."""
    if outcome.orphans:
        report.notes.append(
            f"{criterion.id}: your code left {outcome.orphans} process(es) running after the criterion "
            "ended (setsid or a double fork?); the grader killed them"
        )
        _flag(report, "processes left running")
    if outcome.envelope.get("tampered"):
        _flag(report, f"{criterion.id} replaced grader or torch code")


def _flag(report: Report, reason: str) -> None:
    if reason not in report.review:
        report.review.append(reason)


def as_json(report: Report) -> dict:
    """The ``--json`` report, schema_version 1."""
    return {
        "schema_version": 1,
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
