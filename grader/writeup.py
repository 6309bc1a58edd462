"""Render the assignment write-up ``handout/README.md`` from ``writeup/`` and the rubric.

The template ``writeup/README.md.in`` is Markdown with a few directives, each in ``{{ }}``:

``{{include problem2.md}}``   the rendered text of another file in ``writeup/``
``{{points_summary}}``        a table of points per problem, from ``grader/rubric.toml``
``{{points_table 2}}``        the criteria of Problem 2 (2.1, 2.2, ...) with their points
``{{points 2.2}}``            the points of one problem or sub-problem, inline
``{{figure NAME ARGS}}``      a figure computed at build time by ``FIGURES[NAME](*ARGS)``

Notes ``{# ... #}`` (starting a line, possibly spanning several) are for whoever edits the
template and are dropped. The points come from the same rubric the grader uses, so the
write-up never retypes a number.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Callable

HARDWARE = {"cpu": "CPU", "cuda2": "2 CUDA GPUs"}
_DIRECTIVE = re.compile(r"\{\{(.*?)\}\}")
_NOTE = re.compile(r"^\{#.*?#\}[ \t]*\n", re.MULTILINE | re.DOTALL)


class WriteupError(Exception):
    """A problem with the write-up sources or the rubric; the message names the file."""


def read_criteria(rubric_path: Path) -> list[dict]:
    """The enabled criteria of the rubric: dicts with id, problem, title, points, needs."""
    if not rubric_path.exists():
        raise WriteupError(f"{rubric_path} not found: the write-up's points tables are generated from the rubric")
    try:
        tables = tomllib.loads(rubric_path.read_text()).get("criterion", [])
    except tomllib.TOMLDecodeError as error:
        raise WriteupError(f"{rubric_path}: not valid TOML: {error}") from None
    criteria = []
    for index, table in enumerate(tables):
        missing = [key for key in ("id", "problem", "title", "points") if key not in table]
        if missing:
            raise WriteupError(f"{rubric_path}: criterion #{index + 1} lacks {', '.join(missing)}")
        if table.get("needs", "cpu") not in HARDWARE:
            raise WriteupError(f"{rubric_path}: {table['id']}: needs must be one of {sorted(HARDWARE)}")
        if table.get("enabled", True):
            criteria.append({"needs": "cpu", **table})
    if not criteria:
        raise WriteupError(f"{rubric_path}: no enabled [[criterion]] tables")
    return criteria


def _in_problem(criterion: dict, problem: str) -> bool:
    return criterion["problem"] == problem or criterion["problem"].startswith(problem + ".")


def _points(value: float) -> str:
    return f"{value:g}"


def points(criteria: list[dict], problem: str) -> str:
    chosen = [c for c in criteria if _in_problem(c, problem)]
    if not chosen:
        raise WriteupError(f"no enabled criterion for problem {problem} in the rubric")
    return _points(sum(c["points"] for c in chosen))


def points_table(criteria: list[dict], problem: str) -> str:
    """Markdown table of the criteria of ``problem`` (e.g. ``2`` or ``2.2``)."""
    rows = [c for c in criteria if _in_problem(c, problem)]
    if not rows:
        raise WriteupError(f"no enabled criterion for problem {problem} in the rubric")
    lines = ["| Criterion | What is checked | Points | Runs on |", "|---|---|---:|---|"]
    lines += [f"| `{c['id']}` | {c['title']} | {_points(c['points'])} | {HARDWARE[c['needs']]} |" for c in rows]
    lines.append(f"| | **Problem {problem} total** | **{points(criteria, problem)}** | |")
    return "\n".join(lines)


def points_summary(criteria: list[dict]) -> str:
    """Markdown table: points per sub-problem, how many need 2 CUDA GPUs, and the total."""
    problems = sorted({c["problem"] for c in criteria}, key=lambda p: tuple(int(n) for n in p.split(".")))
    lines = ["| Problem | Criteria | Points | of which need 2 CUDA GPUs |", "|---|---:|---:|---:|"]
    for problem in problems:
        rows = [c for c in criteria if c["problem"] == problem]
        gpu = sum(c["points"] for c in rows if c["needs"] == "cuda2")
        lines.append(f"| {problem} | {len(rows)} | {_points(sum(c['points'] for c in rows))} | {_points(gpu)} |")
    total = sum(c["points"] for c in criteria)
    gpu = sum(c["points"] for c in criteria if c["needs"] == "cuda2")
    lines.append(f"| **Total** | {len(criteria)} | **{_points(total)}** | {_points(gpu)} |")
    return "\n".join(lines)


def clock_cycles_waves(num_microbatches: str, num_stages: str) -> str:
    """The answer key's ``clock_cycles(M, K)``, one wave per line, as in the lecture."""
    from minitorch.pipeline import clock_cycles

    lines = [f"clock_cycles({num_microbatches}, {num_stages}):"]
    for index, wave in enumerate(clock_cycles(int(num_microbatches), int(num_stages))):
        lines.append(f"  k = {index}: {wave}")
    return "\n".join(lines)


def clock_cycles_grid(num_microbatches: str, num_stages: str) -> str:
    """The answer key's ``clock_cycles(M, K)`` as a stage x wave grid of ``(i, j)`` cells."""
    from minitorch.pipeline import clock_cycles

    waves = list(clock_cycles(int(num_microbatches), int(num_stages)))
    cell = "{:<8}"
    lines = ["wave     " + "".join(cell.format(k) for k in range(len(waves))).rstrip()]
    for stage in range(int(num_stages)):
        cells = []
        for wave in waves:
            pair = next(((i, j) for i, j in wave if j == stage), None)
            cells.append(cell.format(f"({pair[0]},{pair[1]})" if pair else ""))
        lines.append(f"stage {stage:<3}" + "".join(cells).rstrip())
    return "\n".join(lines)


# Figures computed from code at build time. When minitorch/schedules.py lands, register its
# timeline renderer here (e.g. "timeline": lambda name, K, M: ...) and use
# {{figure timeline gpipe 4 8}} in the write-up instead of the lecture's static copy.
FIGURES: dict[str, Callable[..., str]] = {
    "clock_cycles_waves": clock_cycles_waves,
    "clock_cycles_grid": clock_cycles_grid,
}


def _expand(text: str, source: Path, criteria: list[dict], depth: int = 0) -> str:
    if depth > 4:
        raise WriteupError(f"{source}: includes nested too deeply")
    text = _NOTE.sub("", text)

    def directive(match: re.Match) -> str:
        words = match[1].split()
        line = text.count("\n", 0, match.start()) + 1
        where = f"{source}:{line}"
        if not words:
            raise WriteupError(f"{where}: empty directive {{{{}}}}")
        name, args = words[0], words[1:]
        if name == "include" and len(args) == 1:
            path = source.parent / args[0]
            if not path.exists():
                raise WriteupError(f"{where}: included file {path} not found")
            return _expand(path.read_text(), path, criteria, depth + 1).rstrip("\n")
        if name == "points_summary" and not args:
            return points_summary(criteria)
        if name == "points_table" and len(args) == 1:
            return points_table(criteria, args[0])
        if name == "points" and len(args) == 1:
            return points(criteria, args[0])
        if name == "figure" and args and args[0] in FIGURES:
            return FIGURES[args[0]](*args[1:])
        raise WriteupError(f"{where}: unknown directive {match[0]!r}")

    try:
        return _DIRECTIVE.sub(directive, text)
    except WriteupError:
        raise
    except Exception as error:  # a figure's code failed: say where it was asked for
        raise WriteupError(f"{source}: rendering failed: {type(error).__name__}: {error}") from error


def render(template: Path, rubric_path: Path) -> str:
    """The rendered write-up: ``template`` with every directive expanded."""
    return _expand(template.read_text(), template, read_criteria(rubric_path))
