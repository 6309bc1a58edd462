"""The rubric: which criteria exist, what they are worth, what they need and which check runs them.

TAs edit ``grader/rubric.toml`` (points, timeouts, params, ``enabled = false``,
``[grader] disabled_problems``); :func:`load_rubric` validates it and names the entry and
field of every mistake, so a typo never silently changes a grade.
"""
from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grader.layout import DEFAULT_RUBRIC
from grader.tomlcompat import tomllib

# What each value of `needs` asks of the machine: the number of CUDA GPUs.
HARDWARE = {"cpu": 0, "cuda1": 1, "cuda2": 2}

_PROBLEM = re.compile(r"^\d+\.\d+$")
_ID = re.compile(r"^\d+\.\d+-[a-z0-9]+(-[a-z0-9]+)*$")
_NAME = re.compile(r"^\.?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_CHECK = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?:[a-z_][a-z0-9_]*$")

CRITERION_KEYS = {"id", "problem", "title", "points", "needs", "check", "timeout", "params", "enabled", "visibility",
                  "fallback"}
REQUIRED_KEYS = ("id", "problem", "title", "points", "needs", "check")
SETTINGS_KEYS = {"timeout", "memory_mb", "output_limit_mb", "max_processes", "user", "disabled_problems", "sandbox"}
SANDBOXES = ("auto", "in-house", "bubblewrap")
TOP_LEVEL_KEYS = {"grader", "problems", "criterion", "policy", "gradescope"}
POLICY_KEYS = {"forbidden"}
GRADESCOPE_KEYS = {"budget", "submission_limit", "limit_window_hours"}
# When Gradescope shows a test to the student (its results.json `visibility`).
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
# Gradescope stops an autograder at 10 minutes unless the assignment's settings say otherwise;
# the run's budget leaves room for starting Python and torch on a fraction of a CPU.
DEFAULT_GRADESCOPE_BUDGET = 480.0


@dataclass(frozen=True)
class SubmissionLimit:
    """At most ``submissions`` graded Gradescope submissions in any ``window_hours``
    (``[gradescope] submission_limit`` and ``limit_window_hours``; see grader.submission_limit)."""

    submissions: int
    window_hours: float


class RubricError(ValueError):
    """The rubric file is wrong; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class Settings:
    """Defaults for every criterion (``[grader]`` table of the rubric).

    ``timeout``: seconds per criterion when the criterion sets none. ``memory_mb``: memory a
    child may allocate on top of what it uses when it starts. ``output_limit_mb``: most a
    child may print (and the largest file it may write). ``max_processes``: processes and
    threads a child may add (Problem 3 forks ranks with torch threads: be generous).
    ``user``: the unprivileged account children run as when the grader runs as root.
    ``sandbox``: the backend that confines children (see grader/sandbox/README.md): ``auto``
    (in-house as root, bubblewrap otherwise), ``in-house`` or ``bubblewrap``.
    """

    timeout: float = 60.0
    memory_mb: int = 4096
    output_limit_mb: float = 16.0
    max_processes: int = 512
    user: str = "nobody"
    disabled_problems: tuple[str, ...] = ()
    sandbox: str = "auto"


@dataclass(frozen=True)
class Criterion:
    """One all-or-nothing rubric entry."""

    id: str
    problem: str
    title: str
    points: float
    needs: str
    check: str
    timeout: float
    params: dict = field(default_factory=dict)
    enabled: bool = True
    visibility: str = "visible"
    fallback: str = ""  # the grader's pieces a second run swaps in where the student's own fail (see grading)

    @property
    def observe_module(self) -> str:
        """The child side's import name: ``grader.checks.problem2.clock_cycles.observe`` for
        ``check = "problem2.clock_cycles:schedule"`` (see :mod:`grader.checks`)."""
        return check_modules(self.check)[0]

    @property
    def judge_module(self) -> str:
        """The parent side's import name: ``grader.checks.problem2.clock_cycles.judge``."""
        return check_modules(self.check)[1]

    @property
    def name(self) -> str:
        """The check's name: the child side defines ``observe_<name>``, the parent ``judge_<name>``."""
        return self.check.split(":")[1]


def check_modules(check: str) -> tuple[str, str]:
    """``(observe module, judge module)`` of a check ``"<package>:<name>"``: a concept's
    package (``problem2.clock_cycles``) has the two sides as ``observe`` and ``judge``; a
    one-module check (``selftest``, the grader's tests of itself) is both."""
    package = "grader.checks." + check.split(":")[0]
    return (f"{package}.observe", f"{package}.judge") if "." in check.split(":")[0] else (package, package)


@dataclass(frozen=True)
class Rubric:
    path: Path
    settings: Settings
    criteria: tuple[Criterion, ...]
    problem_titles: dict[str, str]
    forbidden: tuple[str, ...] = ()
    gradescope_budget: float = DEFAULT_GRADESCOPE_BUDGET
    submission_limit: SubmissionLimit | None = None

    def active(self) -> list[Criterion]:
        """The criteria to grade: enabled ones of problems that are not disabled."""
        off = set(self.settings.disabled_problems)
        return [c for c in self.criteria if c.enabled and c.problem not in off]

    def title_of(self, problem: str) -> str:
        return self.problem_titles.get(problem, "")

    def gpu_smoke(self) -> "Rubric":
        """Only the criteria that need GPUs, each in its one-GPU smoke mode worth 0 points.

        Their checks get ``params["smoke"] = True``: all stages on ``cuda:0`` and a small
        workload, which exercises the CUDA code paths on any single GPU; nothing is judged.
        """
        smoke = tuple(
            replace(c, needs="cuda1", points=0, title=f"{c.title} [one-GPU smoke run, not scored]",
                    params={**c.params, "smoke": True})
            for c in self.active()
            if HARDWARE[c.needs] > 0
        )
        return replace(self, criteria=smoke)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _settings(table: Any, where: str) -> Settings:
    if not isinstance(table, dict):
        raise RubricError(f"{where}: [grader] must be a table")
    unknown = sorted(set(table) - SETTINGS_KEYS)
    if unknown:
        raise RubricError(f"{where}: [grader] has unknown key {unknown[0]!r} (known: {', '.join(sorted(SETTINGS_KEYS))})")
    defaults = Settings()
    values = {}
    for key in ("timeout", "memory_mb", "output_limit_mb", "max_processes"):
        value = table.get(key, getattr(defaults, key))
        if not _is_number(value) or value <= 0:
            raise RubricError(f"{where}: [grader] {key} must be a positive number, got {value!r}")
        values[key] = value
    for key in ("memory_mb", "max_processes"):
        if not isinstance(values[key], int):
            raise RubricError(f"{where}: [grader] {key} must be a whole number, got {values[key]!r}")
    user = table.get("user", defaults.user)
    if not isinstance(user, str) or not user:
        raise RubricError(f"{where}: [grader] user must be a user name, got {user!r}")
    disabled = table.get("disabled_problems", [])
    if not isinstance(disabled, list) or not all(isinstance(p, str) and _PROBLEM.match(p) for p in disabled):
        raise RubricError(f'{where}: [grader] disabled_problems must be a list of problems like ["2.3"], got {disabled!r}')
    sandbox = table.get("sandbox", defaults.sandbox)
    if sandbox not in SANDBOXES:
        raise RubricError(f"{where}: [grader] sandbox must be one of {', '.join(SANDBOXES)}, got {sandbox!r}")
    return Settings(user=user, disabled_problems=tuple(disabled), sandbox=sandbox, **values)


def _check_function(check: str, label: str) -> None:
    """Fail unless the check's child side defines ``observe_<name>`` and its parent side ``judge_<name>``."""
    name = check.split(":")[1]
    for module_name, prefix in zip(check_modules(check), ("observe_", "judge_")):
        path = module_name.replace(".", "/") + ".py"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and module_name.startswith(error.name):
                raise RubricError(f"{label}: check {check!r}: no module {path}") from None
            raise
        if not callable(getattr(module, prefix + name, None)):
            raise RubricError(f"{label}: check {check!r}: {path} has no function {prefix}{name}")


def _criterion(entry: Any, index: int, settings: Settings, where: str) -> Criterion:
    label = f"{where}: criterion #{index + 1}"
    if not isinstance(entry, dict):
        raise RubricError(f"{label}: must be a [[criterion]] table")
    if isinstance(entry.get("id"), str):
        label += f" ({entry['id']})"
    unknown = sorted(set(entry) - CRITERION_KEYS)
    if unknown:
        raise RubricError(f"{label}: unknown key {unknown[0]!r} (known: {', '.join(sorted(CRITERION_KEYS))})")
    for key in REQUIRED_KEYS:
        if key not in entry:
            raise RubricError(f"{label}: missing key {key!r}")
    for key in ("id", "problem", "title", "needs", "check"):
        if not isinstance(entry[key], str) or not entry[key].strip():
            raise RubricError(f"{label}: {key} must be a non-empty string, got {entry[key]!r}")
    if not _PROBLEM.match(entry["problem"]):
        raise RubricError(f"{label}: problem must look like \"2.2\", got {entry['problem']!r}")
    if not _ID.match(entry["id"]) or not entry["id"].startswith(entry["problem"] + "-"):
        raise RubricError(
            f"{label}: id must be \"<problem>-<slug>\" with a lower-case slug, e.g. \"{entry['problem']}-forward\", got {entry['id']!r}"
        )
    if not _is_number(entry["points"]) or entry["points"] <= 0:
        raise RubricError(f"{label}: points must be a positive number, got {entry['points']!r}")
    if entry["needs"] not in HARDWARE:
        raise RubricError(f"{label}: needs must be one of {', '.join(repr(n) for n in HARDWARE)}, got {entry['needs']!r}")
    if not _CHECK.match(entry["check"]):
        raise RubricError(f"{label}: check must be \"<problem>.<concept>:<name>\", e.g. \"problem2.clock_cycles:schedule\", "
                          f"got {entry['check']!r}")
    timeout = entry.get("timeout", settings.timeout)
    if not _is_number(timeout) or timeout <= 0:
        raise RubricError(f"{label}: timeout must be a positive number of seconds, got {timeout!r}")
    params = entry.get("params", {})
    if not isinstance(params, dict):
        raise RubricError(f"{label}: params must be a table ([criterion.params]), got {params!r}")
    enabled = entry.get("enabled", True)
    if not isinstance(enabled, bool):
        raise RubricError(f"{label}: enabled must be true or false, got {enabled!r}")
    visibility = entry.get("visibility", "visible")
    if visibility not in VISIBILITIES:
        raise RubricError(f"{label}: visibility must be one of {', '.join(repr(v) for v in VISIBILITIES)}, got {visibility!r}")
    fallback = entry.get("fallback", "")
    if not isinstance(fallback, str):
        raise RubricError(f"{label}: fallback must say which of the grader's pieces replace the student's, got {fallback!r}")
    _check_function(entry["check"], label)
    return Criterion(
        id=entry["id"], problem=entry["problem"], title=entry["title"].strip(), points=entry["points"],
        needs=entry["needs"], check=entry["check"], timeout=float(timeout), params=params, enabled=enabled,
        visibility=visibility, fallback=fallback.strip(),
    )


def parse_rubric(text: str, path: Path = DEFAULT_RUBRIC) -> Rubric:
    """Validate rubric TOML ``text`` (read from ``path``, used in messages)."""
    where = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RubricError(f"{where}: not valid TOML: {error}") from None
    unknown = sorted(set(data) - TOP_LEVEL_KEYS)
    if unknown:
        raise RubricError(f"{where}: unknown top-level key {unknown[0]!r} (known: [grader], [problems], [policy], [gradescope], [[criterion]])")
    settings = _settings(data.get("grader", {}), where)
    titles = data.get("problems", {})
    if not isinstance(titles, dict) or not all(_PROBLEM.match(k) and isinstance(v, str) for k, v in titles.items()):
        raise RubricError(f'{where}: [problems] must map problems to titles, e.g. "2.1" = "clock_cycles"')
    entries = data.get("criterion", [])
    if not isinstance(entries, list) or not entries:
        raise RubricError(f"{where}: no [[criterion]] entries")
    criteria = [_criterion(entry, index, settings, where) for index, entry in enumerate(entries)]
    seen: dict[str, int] = {}
    for index, criterion in enumerate(criteria):
        if criterion.id in seen:
            raise RubricError(
                f"{where}: criterion #{index + 1}: duplicate id {criterion.id!r} (also criterion #{seen[criterion.id] + 1})"
            )
        seen[criterion.id] = index
    problems = {c.problem for c in criteria}
    for problem in settings.disabled_problems:
        if problem not in problems:
            raise RubricError(f"{where}: [grader] disabled_problems names {problem!r}, which no criterion belongs to")
    return Rubric(path=path, settings=settings, criteria=tuple(criteria), problem_titles=dict(titles),
                  forbidden=_policy(data.get("policy", {}), where),
                  gradescope_budget=_gradescope_budget(data.get("gradescope", {}), where),
                  submission_limit=_submission_limit(data.get("gradescope", {}), where))


def _gradescope_budget(table: Any, where: str) -> float:
    """``[gradescope] budget``: seconds the whole Gradescope run may take."""
    if not isinstance(table, dict):
        raise RubricError(f"{where}: [gradescope] must be a table")
    unknown = sorted(set(table) - GRADESCOPE_KEYS)
    if unknown:
        raise RubricError(f"{where}: [gradescope] has unknown key {unknown[0]!r} (known: {', '.join(sorted(GRADESCOPE_KEYS))})")
    budget = table.get("budget", DEFAULT_GRADESCOPE_BUDGET)
    if not _is_number(budget) or budget <= 0:
        raise RubricError(f"{where}: [gradescope] budget must be a positive number of seconds, got {budget!r}")
    return float(budget)


def _submission_limit(table: Any, where: str) -> SubmissionLimit | None:
    """``[gradescope] submission_limit`` (0 or absent: none) per ``limit_window_hours`` (default 24)."""
    if not isinstance(table, dict):
        raise RubricError(f"{where}: [gradescope] must be a table")
    count = table.get("submission_limit", 0)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise RubricError(f"{where}: [gradescope] submission_limit must be a whole number of submissions (0: no limit), got {count!r}")
    hours = table.get("limit_window_hours", 24)
    if not _is_number(hours) or hours <= 0:
        raise RubricError(f"{where}: [gradescope] limit_window_hours must be a positive number of hours, got {hours!r}")
    return SubmissionLimit(count, float(hours)) if count else None


def submission_limit(path: str | Path = DEFAULT_RUBRIC) -> SubmissionLimit | None:
    """The rubric's Gradescope submission limit, read without importing the checks; None when
    there is none, or when the file cannot be read or is wrong (the grader reports that itself)."""
    try:
        return _submission_limit(tomllib.loads(Path(path).read_text(encoding="utf-8")).get("gradescope", {}), str(path))
    except (OSError, ValueError):
        return None


def gradescope_budget(path: str | Path = DEFAULT_RUBRIC) -> float:
    """The ``[gradescope] budget`` of the rubric at ``path``, read without importing the checks
    (the Gradescope wrapper needs it before torch is loaded); the default when the file cannot
    be read or is wrong (the grader then reports the mistake itself)."""
    try:
        return _gradescope_budget(tomllib.loads(Path(path).read_text(encoding="utf-8")).get("gradescope", {}), str(path))
    except (OSError, ValueError):
        return DEFAULT_GRADESCOPE_BUDGET


def _policy(table: Any, where: str) -> tuple[str, ...]:
    """``[policy] forbidden``: dotted names (``os._exit``) or ``.attribute`` names."""
    if not isinstance(table, dict):
        raise RubricError(f"{where}: [policy] must be a table")
    unknown = sorted(set(table) - POLICY_KEYS)
    if unknown:
        raise RubricError(f"{where}: [policy] has unknown key {unknown[0]!r} (known: forbidden)")
    forbidden = table.get("forbidden", [])
    if not isinstance(forbidden, list) or not all(isinstance(n, str) and _NAME.match(n) for n in forbidden):
        raise RubricError(f'{where}: [policy] forbidden must be a list of dotted names like "os._exit" or ".__wrapped__", got {forbidden!r}')
    return tuple(forbidden)


def load_rubric(path: str | Path = DEFAULT_RUBRIC) -> Rubric:
    """Read and validate the rubric at ``path``.

    Raises:
        RubricError: unreadable file, invalid TOML, unknown keys, missing or ill-typed
            fields, duplicate ids, a check module or function that does not exist.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise RubricError(f"{path}: cannot read the rubric: {error.strerror}") from None
    return parse_rubric(text, path)
