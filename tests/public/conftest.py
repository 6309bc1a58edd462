"""Shared test configuration: a hypothesis profile, and a short report for the starter kit.

On the starter kit every public test stops at a stub (``NotImplementedError("Problem 2.1:
clock_cycles")``); pages of identical tracebacks would hide what matters. So:

- a test that stopped at a stub is reported NOT IMPLEMENTED, without a traceback (it still
  fails the run); every other failure keeps its traceback;
- the run ends with one line per problem: how many of its tests pass, and which stub holds
  back the rest (a test of 3.3 may stop at a stub of 3.2, which it builds on);
- ``--smoke`` runs only the first test of each problem (``make submit`` runs that).
"""
from __future__ import annotations

import os
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings

from minitorch.cli import STUB_MESSAGE

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

_MARKER = re.compile(r"problem_(\d+)_(\d+)$")
NOT_IMPLEMENTED = "not implemented"
# nodeid -> (problem, outcome, stub): one entry per test, the worst of its phases.
_OUTCOMES: dict[str, tuple[str, str, str | None]] = {}


def pytest_addoption(parser):
    parser.addoption("--smoke", action="store_true", default=False,
                     help="run only the first test of each problem (a quick check before submitting)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("smoke", default=False):
        return
    seen, kept, dropped = set(), [], []
    for item in items:
        problem = problem_of(item)
        (dropped if problem in seen else kept).append(item)
        seen.add(problem)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def problem_of(item) -> str | None:
    """``"2.1"`` for a test marked ``problem_2_1``."""
    for marker in item.iter_markers():
        match = _MARKER.match(marker.name)
        if match:
            return f"{match[1]}.{match[2]}"
    return None


def stub_of(error: BaseException | None) -> str | None:
    """``"Problem 2.1: clock_cycles"`` when ``error`` is, or was caused by, a kit stub's
    NotImplementedError (also inside another rank's re-raised error or an exception group)."""
    todo, seen = [error], []
    while todo and len(seen) < 50:
        error = todo.pop()
        if error is None or any(error is s for s in seen):
            continue
        seen.append(error)
        if isinstance(error, NotImplementedError):
            match = STUB_MESSAGE.search(str(error))
            if match:
                return match[0]
        todo += [*getattr(error, "exceptions", ()), error.__cause__, error.__context__]
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    if call.excinfo is not None and stub_of(call.excinfo.value) and item.config.option.tbstyle != "long":
        # A stub's traceback is never printed (the summary names the stub): formatting every
        # frame of it took most of a first run's time. Unless --tb=long asks for it, keep the
        # test's frame and the stub's raise.
        frames = call.excinfo.traceback
        if len(frames) > 2:
            call.excinfo.traceback = type(frames)([frames[0], frames[-1]])
    report = yield
    report.problem = problem_of(item)
    if report.failed and call.excinfo is not None:
        report.stub = stub_of(call.excinfo.value)
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report, config):
    if report.failed and getattr(report, "stub", None):
        return NOT_IMPLEMENTED, "N", ("NOT IMPLEMENTED", {"yellow": True})
    return None


def pytest_runtest_logreport(report):
    problem = getattr(report, "problem", None)
    if problem is None:
        return
    stub = getattr(report, "stub", None)
    outcome = (NOT_IMPLEMENTED if stub else "failed") if report.failed else report.outcome
    previous = _OUTCOMES.get(report.nodeid)
    if previous is None or previous[1] == "passed":  # a later phase can only make it worse
        _OUTCOMES[report.nodeid] = (problem, outcome, stub)


def summary_lines(outcomes, titles: dict[str, str]) -> list[str]:
    """One line per problem: ``2.1  clock_cycles   0/12 pass   12 not implemented: ...``."""
    problems = sorted({problem for problem, _, _ in outcomes}, key=lambda p: tuple(map(int, p.split("."))))
    width = max([len(titles.get(p, "")) for p in problems] + [0])
    lines = []
    for problem in problems:
        mine = [(outcome, stub) for p, outcome, stub in outcomes if p == problem]
        counts = Counter(outcome for outcome, _ in mine)
        notes = [f"{counts['failed']} failed"] if counts["failed"] else []
        if counts["skipped"]:
            notes.append(f"{counts['skipped']} skipped")
        stubs = sorted({stub for outcome, stub in mine if outcome == NOT_IMPLEMENTED and stub},
                       key=lambda s: (not s.startswith(f"Problem {problem}:"), s))
        if stubs:
            shown = ", ".join(stubs[:2]) + (f" and {len(stubs) - 2} more" if len(stubs) > 2 else "")
            earlier = "" if all(s.startswith(f"Problem {problem}:") for s in stubs) else " (a part this one builds on)"
            notes.append(f"{counts[NOT_IMPLEMENTED]} not implemented yet: {shown}{earlier}")
        passed = f"{counts['passed']}/{len(mine)} pass"
        lines.append(f"{problem}  {titles.get(problem, ''):<{width}}  {passed:>10}   {'; '.join(notes)}".rstrip())
    return lines


def _titles(config) -> dict[str, str]:
    """``{"2.1": "clock_cycles", ...}`` from the marker descriptions in pyproject.toml."""
    titles = {}
    for line in config.getini("markers"):
        name, _, description = line.partition(":")
        match = _MARKER.match(name.strip())
        if match:
            problem = f"{match[1]}.{match[2]}"
            titles[problem] = description.strip().removeprefix(f"Problem {problem}").strip()
    return titles


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """After pytest's own summary: the per-problem lines, the last thing before the totals."""
    result = yield
    if _OUTCOMES:
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", "public tests by problem")
        for line in summary_lines(list(_OUTCOMES.values()), _titles(config)):
            write(line)
        failing = [(nodeid, problem) for nodeid, (problem, outcome, _) in _OUTCOMES.items() if outcome != "passed"]
        if failing and not config.getoption("smoke", default=False):
            nodeid, problem = failing[0]  # the first test that did not pass names the examples
            marker = "problem_" + problem.replace(".", "_")
            write(f'one problem: make test PYTEST_ARGS="-m {marker}"; one test with its whole traceback:')
            write(f'make test PYTEST_ARGS="{nodeid} --tb=long" (or pytest ... directly)')
    return result
