"""Grade mutants with the hidden checks of their problem, on worker processes.

Each worker holds one :class:`grader.harness.Harness` built from the answer key (so mutants run
exactly as a submission's criteria do: an isolated child per criterion, the real ``observe_*`` in
the child and the real ``judge_*`` in the parent, through :func:`grader.grading.judge_observation`
and :func:`grader.grading.judge`). For a mutant, the worker writes the mutated student file into
the harness's tree (:meth:`Harness.student_paths`), runs the criteria of its problem cheapest
first and stops at the first that does not pass (the mutant is killed), then puts the answer
key's file back.

Time: the answer key is graded first, once per criterion; a criterion's bound for a mutant is
``BOUND_FACTOR`` times the key's own time, at least ``BOUND_FLOOR_S`` seconds (an endless loop
costs seconds, not the rubric's 60). A timeout is confirmed once with ``CONFIRM_FACTOR`` times
the bound, so a loaded machine does not pass off a slow mutant as a killed one.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from grader.layout import PROVIDED_FOLDER, STUDENT_FILES
from grader.mutation.generate import Mutant
from grader.rubric import HARDWARE, Criterion, Rubric, load_rubric

BOUND_FACTOR = 5.0
BOUND_FLOOR_S = 5.0
CONFIRM_FACTOR = 3.0
WORKER_START_S = 300.0  # a worker imports torch and starts its harness (a minute on a loaded machine)
MESSAGE_CHARACTERS = 300  # of a killing criterion's message kept in the results
CONVENTIONS_OF_PROBLEM_3 = "3.0"  # its criteria grade conventions every part of Problem 3 shares


class DriverError(RuntimeError):
    """The measure cannot run: the answer key fails a criterion, or a worker died."""


# Criteria that grade code written inside another sub-problem's region: the sequence-parallel
# path of 3.2's linear layers is 3.5's work (its promises name 3.5-sequence-parallel, which runs
# the student's own layers), so a mutant there is judged by 3.5 as grading would judge it.
ALSO_JUDGED_BY = {"3.2": ("3.5",)}


def criteria_for(problem: str, rubric: Rubric) -> list[Criterion]:
    """The active criteria that judge ``problem``'s code on a CPU: its own, for a part of
    Problem 3 also the conventions common to Problem 3 (3.0), and those of
    :data:`ALSO_JUDGED_BY`."""
    wanted = {problem, *ALSO_JUDGED_BY.get(problem, ())} | ({CONVENTIONS_OF_PROBLEM_3} if problem.startswith("3.") else set())
    return [c for c in rubric.active() if c.problem in wanted and HARDWARE[c.needs] == 0]


@dataclass
class Verdict:
    """A criterion's verdict on one file set: the grader's status and message."""

    status: str
    message: str
    seconds: float
    judge_error: bool = False


class _Grader:
    """A worker's harness over the answer key, and how it judges one criterion."""

    # The grader's engine imports torch: only the workers need it (`list`, `show` stay quick).
    def __init__(self, rubric: Rubric, seed: int, criteria: Sequence[Criterion]):
        from grader.harness import Harness
        from grader.submission import Submission

        self.rubric, self.seed = rubric, seed
        self.key = {name: (PROVIDED_FOLDER / name).read_bytes() for name in STUDENT_FILES}
        self.submission = Submission("answer key (mutation)", files=dict(self.key))
        self.harness = Harness(self.submission, rubric.settings, sorted({c.observe_module for c in criteria}))
        self.harness.__enter__()
        self.harness.start()
        self.paths = {name: Path(path) for name, path in zip(STUDENT_FILES, self.harness.student_paths())}

    def close(self) -> None:
        self.harness.__exit__(None, None, None)

    def verdict(self, criterion: Criterion, bound: float) -> Verdict:
        """The grader's verdict. A criterion with a ``fallback`` (a rubric field newer than some
        graders) is judged as grading judges it: the student's own pieces first, and where they
        fail, again with the grader's pieces swapped in; it passes if that run passes."""
        if not getattr(criterion, "fallback", ""):
            return self._judged(criterion, bound)
        own = self._judged(replace(criterion, params={**criterion.params, "pieces": "own"}), bound)
        if own.status not in ("failed", "timeout"):
            return own
        theirs = self._judged(replace(criterion, params={**criterion.params, "pieces": "grader"}), bound)
        return Verdict(theirs.status, theirs.message, own.seconds + theirs.seconds, theirs.judge_error)

    def _judged(self, criterion: Criterion, bound: float) -> Verdict:
        """One child run of ``criterion`` and the grader's judgement of it."""
        from grader.checks.judging import Outside
        from grader.grading import JUDGE_ERROR, judge, judge_observation
        from grader.protocol import Kind

        started = time.perf_counter()
        outcome = self.harness.run(criterion, self.seed, bound)
        if outcome.kind == Kind.OBSERVATION and not outcome.envelope.get("tampered"):
            status, message, details = judge_observation(criterion, self.seed, outcome.envelope["observation"],
                                                         Outside(wall_seconds=outcome.seconds))
            judge_error = JUDGE_ERROR in details
        else:
            status, message = judge(criterion, self.seed, outcome, self.submission, bound, self.rubric.settings.output_limit_mb)
            judge_error = False
        return Verdict(status.value, message, time.perf_counter() - started, judge_error)

    def grade_mutant(self, file: str, source: str, plan: Sequence[tuple[Criterion, float]]) -> dict:
        """Run ``plan`` (criterion, bound) on the key with ``file`` replaced by ``source``; stop
        at the first criterion that does not pass."""
        started, run = time.perf_counter(), 0
        self.paths[file].write_text(source)
        try:
            for criterion, bound in plan:
                run += 1
                verdict = self.verdict(criterion, bound)
                if verdict.status == "timeout":
                    verdict = self.verdict(criterion, bound * CONFIRM_FACTOR)
                if verdict.status != "passed":
                    return {"outcome": "error" if verdict.status == "error" else "killed", "criterion": criterion.id,
                            "status": verdict.status, "message": verdict.message[:MESSAGE_CHARACTERS],
                            "judge_error": verdict.judge_error, "criteria_run": run,
                            "seconds": round(time.perf_counter() - started, 2)}
            return {"outcome": "survived", "criterion": None, "status": "passed", "message": "", "judge_error": False,
                    "criteria_run": run, "seconds": round(time.perf_counter() - started, 2)}
        finally:
            self.paths[file].write_bytes(self.key[file])


def _next_task(tasks, parent: int):
    """The next task; None once the main process is gone (its tasks will never come)."""
    while True:
        try:
            return tasks.get(timeout=5.0)
        except queue.Empty:
            if os.getppid() != parent:
                return None


def _worker(rubric_path: str, seed: int, criterion_ids: list[str], tasks, results, parent: int) -> None:
    """A worker process: baseline tasks ``("baseline", criterion id)`` and mutant tasks
    ``("mutant", id, file, source, [(criterion id, bound), ...])`` until ``None``. SIGTERM (the
    main process stopping the run) ends it through its harness's clean-up."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        rubric = load_rubric(rubric_path)
        by_id = {c.id: c for c in rubric.criteria}
        grader = _Grader(rubric, seed, [by_id[i] for i in criterion_ids])
    except BaseException:  # noqa: BLE001 - said to the main process, which stops the run
        results.put(("crash", traceback.format_exc()))
        return
    results.put(("ready", None))
    try:
        while (task := _next_task(tasks, parent)) is not None:
            if task[0] == "baseline":
                verdict = grader.verdict(by_id[task[1]], by_id[task[1]].timeout)
                results.put(("baseline", task[1], verdict.status, verdict.message, verdict.seconds))
            else:
                _, mutant_id, file, source, plan = task
                result = grader.grade_mutant(file, source, [(by_id[i], bound) for i, bound in plan])
                results.put(("mutant", mutant_id, result))
    except Exception:  # noqa: BLE001
        results.put(("crash", traceback.format_exc()))
    finally:
        grader.close()


class _Pool:
    """``jobs`` worker processes fed from one task queue."""

    def __init__(self, rubric: Rubric, seed: int, criteria: Sequence[Criterion], jobs: int):
        context = multiprocessing.get_context("spawn")
        self.tasks, self.results = context.Queue(), context.Queue()
        self.processes = [context.Process(target=_worker, name=f"mutation-worker-{n}",
                                          args=(str(rubric.path), seed, [c.id for c in criteria], self.tasks, self.results,
                                                os.getpid()))
                          for n in range(jobs)]
        try:
            for process in self.processes:
                process.start()
            for _ in self.processes:
                self.receive(WORKER_START_S)
        except BaseException:
            self.close(finished=False)
            raise

    def receive(self, timeout: float = 3600.0) -> tuple:
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.results.get(timeout=2.0)
            except queue.Empty:
                if not all(p.is_alive() for p in self.processes):
                    raise DriverError("a mutation worker died without a word (killed from outside?)") from None
                if time.monotonic() > deadline:
                    raise DriverError(f"no word from the mutation workers in {timeout:.0f} s") from None
                continue
            if message[0] == "crash":
                raise DriverError(f"a mutation worker crashed:\n{message[1]}")
            return message

    def close(self, finished: bool) -> None:
        """Stop the workers: after their last task when ``finished``, at once otherwise."""
        if not finished:  # tasks nobody will read: do not wait at exit to hand them over
            self.tasks.cancel_join_thread()
        for process in self.processes:
            if finished:
                self.tasks.put(None)
            elif process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join()


def measure_key(pool: _Pool, criteria: Sequence[Criterion]) -> dict[str, float]:
    """Seconds the answer key takes on each criterion.

    Raises:
        DriverError: the key does not pass one (the measure would mean nothing)."""
    for criterion in criteria:
        pool.tasks.put(("baseline", criterion.id))
    seconds, failing = {}, []
    for _ in criteria:
        _, criterion_id, status, message, elapsed = pool.receive()
        seconds[criterion_id] = elapsed
        if status != "passed":
            failing.append(f"{criterion_id}: {status}: {message[:500]}")
    if failing:
        raise DriverError("the answer key does not pass every criterion, so its mutants cannot be judged:\n" + "\n".join(failing))
    return seconds


def bound_of(seconds: float) -> float:
    return round(max(BOUND_FLOOR_S, BOUND_FACTOR * seconds), 1)


def grade_mutants(mutants: Sequence[Mutant], rubric_path: str, seed: int, jobs: int,
                  on_result: Callable[[Mutant, dict], None] | None = None,
                  key_seconds: dict[str, float] | None = None) -> tuple[dict[str, dict], dict[str, float]]:
    """``({mutant id: result}, {criterion id: the key's seconds})`` for ``mutants``, on ``jobs``
    workers. A result says ``outcome`` (killed, survived or error), the criterion that killed it,
    its status and message, how many criteria ran and the seconds spent. ``key_seconds``: the
    key's times from an earlier run (the criteria it lacks are measured now)."""
    if not mutants:
        return {}, {}
    rubric = load_rubric(rubric_path)
    plans = {m.problem: criteria_for(m.problem, rubric) for m in mutants}
    criteria = list({c.id: c for plan in plans.values() for c in plan}.values())
    pool = _Pool(rubric, seed, criteria, jobs)
    try:
        known = {c.id: key_seconds[c.id] for c in criteria if key_seconds and c.id in key_seconds}
        measured = {**known, **measure_key(pool, [c for c in criteria if c.id not in known])}
        cost = {problem: sum(measured[c.id] for c in plan) for problem, plan in plans.items()}
        for mutant in sorted(mutants, key=lambda m: -cost[m.problem]):  # the long ones first: both workers end together
            plan = sorted(plans[mutant.problem], key=lambda c: measured[c.id])
            pool.tasks.put(("mutant", mutant.id, mutant.file, mutant.source(), [(c.id, bound_of(measured[c.id])) for c in plan]))
        by_id, results = {m.id: m for m in mutants}, {}
        for _ in mutants:
            _, mutant_id, result = pool.receive()
            results[mutant_id] = result
            if on_result is not None:
                on_result(by_id[mutant_id], result)
    except BaseException:
        pool.close(finished=False)
        raise
    pool.close(finished=True)
    return results, measured
