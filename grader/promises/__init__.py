"""The promise registry (``grader/promises/problemN.toml``, one file per problem): every promise of every student docstring,
the hidden criteria that try it and the public tests that fail for its mistake.

A *unit* is something a student writes, or whose contract a student's code must keep: each
function or class of a student file (``minitorch/pipeline.py``, ``minitorch/tensor_parallel.py``)
whose body holds a solution region, the classes around it, the public function that a private
region serves (``copy_to_tensor_model_parallel_region`` for ``_CopyToModelParallelRegion``:
units are listed in the registry, and :func:`problems` finds the rest), and the student files'
module docstrings. Each unit's docstring is split into clauses (sentences and list items, code
blocks left out); every clause must hold the quote of a registered promise, or be listed by the
unit as ``prose`` (explanation that promises nothing). A registered docstring fingerprint makes
any change to a docstring fail until the registry has been reviewed for it.

:func:`problems_with` validates everything and returns the list of problems found (empty:
the registry is complete); ``tests/grader/test_promises.py`` runs it, and ``python -m
grader.promises`` prints it (``--fingerprints`` prints each unit's current fingerprint).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grader.layout import REPOSITORY, STUDENT_FILES
from grader.rubric import load_rubric
from grader.tomlcompat import tomllib

REGISTRY = REPOSITORY / "grader" / "promises"
ANSWER_KEY = REPOSITORY / "minitorch"
PUBLIC_TESTS = REPOSITORY / "tests" / "public"
_MARKER = re.compile(r"#\s*BEGIN SOLUTION\b")
_SECTION = re.compile(r"^(Args|Arguments|Returns|Yields|Raises|Guarantees|Communication|Forward|Backward|Example|Examples)\s*:")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z`(\"'*])")


@dataclass(frozen=True)
class Promise:
    id: str
    unit: str
    quote: str
    criteria: tuple[str, ...] = ()
    public: tuple[str, ...] = ()
    unchecked: str = ""


@dataclass(frozen=True)
class Unit:
    name: str  # "minitorch.pipeline.Pipe.forward"; a module docstring: "minitorch.pipeline"
    problem: str
    fingerprint: str
    prose: tuple[str, ...] = ()


@dataclass
class Registry:
    units: dict[str, Unit] = field(default_factory=dict)
    promises: list[Promise] = field(default_factory=list)


def normalise(text: str) -> str:
    """Whitespace collapsed and rST double backquotes made single, for quoting."""
    return " ".join(text.replace("``", "`").split())


def fingerprint(docstring: str) -> str:
    return hashlib.sha256(normalise(docstring).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------- the student files


def _qualified(stack: list[str]) -> str:
    return ".".join(stack)


def docstrings(path: Path, module: str) -> dict[str, tuple[str, bool]]:
    """``{unit name: (docstring, holds a solution region)}`` for the module and every function
    and class of ``path`` (nested ones by their dotted path)."""
    source = path.read_text()
    tree = ast.parse(source)
    marker_lines = [number for number, line in enumerate(source.splitlines(), 1) if _MARKER.search(line)]
    found: dict[str, tuple[str, bool]] = {module: (ast.get_docstring(tree) or "", False)}

    def visit(node: ast.AST, stack: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = _qualified([*stack, child.name])
                end = child.end_lineno or child.lineno
                holds = any(child.lineno <= line <= end for line in marker_lines)
                found[name] = (ast.get_docstring(child) or "", holds)
                visit(child, [*stack, child.name])

    visit(tree, [module])
    return found


def student_units() -> dict[str, str]:
    """``{unit name: docstring}`` of every unit that must be in the registry: the student files'
    module docstrings and every function or class that holds a solution region, with the
    classes around it (a nested helper inside a region is the student's own, not a unit)."""
    units: dict[str, str] = {}
    for file_name in STUDENT_FILES:
        module = "minitorch." + file_name.removesuffix(".py")
        found = docstrings(ANSWER_KEY / file_name, module)
        units[module] = found[module][0]
        holding = [name for name, (_, holds) in found.items() if holds and name != module]
        innermost = [name for name in holding if not any(other.startswith(name + ".") for other in holding)]
        for name in innermost:
            parts = name.split(".")
            for end in range(3, len(parts) + 1):  # the enclosing classes, then the function itself
                units[".".join(parts[:end])] = found[".".join(parts[:end])][0]
    return units


def all_docstrings() -> dict[str, str]:
    """Every docstring of the student files by unit name (also units the registry adds itself)."""
    found: dict[str, str] = {}
    for file_name in STUDENT_FILES:
        module = "minitorch." + file_name.removesuffix(".py")
        found.update({name: text for name, (text, _) in docstrings(ANSWER_KEY / file_name, module).items()})
    return found


def clauses(docstring: str) -> list[str]:
    """The docstring's clauses: its sentences and list items, each normalised, without code
    blocks (``::`` blocks and ``>>>`` examples) and without section headings."""
    kept: list[str] = []
    code_indent: int | None = None
    for line in docstring.splitlines():
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if code_indent is not None:
            if stripped and indent <= code_indent:
                code_indent = None
            else:
                continue
        if stripped.startswith(">>>"):
            continue
        if stripped.endswith("::"):
            code_indent = indent
            stripped = stripped[:-2] + ":" if stripped != "::" else ""
        heading = _SECTION.match(stripped)
        if heading:
            stripped = stripped[heading.end():].strip()
        if stripped.startswith(("- ", "* ")) or re.match(r"^[A-Za-z_]+(\s*\([^)]*\))?\s*:\s", stripped):
            kept.append("\n")  # a list item or an argument's entry starts a clause of its own
            stripped = stripped.lstrip("-* ")
        kept.append(stripped if stripped else "\n")
    text = " ".join(kept)
    pieces = []
    for block in text.split("\n"):
        pieces.extend(_SENTENCE_END.split(normalise(block)))
    return [piece for piece in (p.strip() for p in pieces) if len(piece) > 2]


# ---------------------------------------------------------------------------------------------- the registry


def load(folder: Path = REGISTRY) -> Registry:
    """Every ``*.toml`` of the registry's folder, in name order."""
    registry = Registry()
    for path in sorted(folder.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        for entry in data.get("unit", []):
            unit = Unit(entry["name"], entry["problem"], entry["fingerprint"], tuple(entry.get("prose", ())))
            registry.units[unit.name] = unit
        for entry in data.get("promise", []):
            registry.promises.append(Promise(
                entry["id"], entry["unit"], entry["quote"], tuple(entry.get("criteria", ())),
                tuple(entry.get("public", ())), entry.get("unchecked", ""),
            ))
    return registry


def public_test_names(folder: Path = PUBLIC_TESTS) -> dict[str, set[str]]:
    """``{"tests/public/test_x.py::test_name": {criterion ids of its marks}}`` for every test
    function of the public tests (read with ast: nothing is imported or run)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.glob("test_*.py")):
        relative = path.relative_to(REPOSITORY).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                marks: set[str] = set()
                for decorator in node.decorator_list:
                    if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("mark.criterion"):
                        marks.update(arg.value for arg in decorator.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str))
                found[f"{relative}::{node.name}"] = marks
    return found


def problems_with(registry: Registry) -> list[tuple[str, str]]:
    """Everything that keeps the registry from being complete and true: ``(problem, line)``
    pairs, the problem being the unit's or the criterion's ("" for a unit with none)."""
    found: list[tuple[str, str]] = []
    docs = all_docstrings()
    required = student_units()
    criteria = {c.id: c for c in load_rubric().criteria}
    tests = public_test_names()
    for name in sorted(set(required) - set(registry.units)):
        found.append(("", f"{name}: a student unit with no [[unit]] entry"))
    for name, unit in registry.units.items():
        if name not in docs:
            found.append((unit.problem, f"{name}: [[unit]] names nothing in the student files"))
            continue
        if fingerprint(docs[name]) != unit.fingerprint:
            found.append((unit.problem, f"{name}: its docstring changed (fingerprint {fingerprint(docs[name])}, "
                                        f"registered {unit.fingerprint}): review its promises, then register the new fingerprint"))
        quotes = [normalise(p.quote) for p in registry.promises if p.unit == name] + [normalise(q) for q in unit.prose]
        for clause in clauses(docs[name]):
            if not any(quote and quote in clause for quote in quotes) and not any(clause in quote for quote in quotes):
                found.append((unit.problem, f"{name}: no promise or prose quotes the clause {clause!r}"))
    seen_ids: set[str] = set()
    for promise in registry.promises:
        owner = registry.units.get(promise.unit)
        problem = owner.problem if owner else ""
        found.extend((problem, line) for line in _promise_problems(promise, registry, docs, criteria, tests, seen_ids))
    named = {criterion for promise in registry.promises for criterion in promise.criteria}
    for criterion_id in sorted(set(criteria) - named):
        found.append((criteria[criterion_id].problem, f"criterion {criterion_id}: no promise names it (a check must try a promise)"))
    return found


def _promise_problems(promise: Promise, registry: Registry, docs: dict[str, str], criteria: dict,
                      tests: dict[str, set[str]], seen_ids: set[str]) -> list[str]:
    where = f"promise {promise.id}"
    found = []
    if promise.id in seen_ids:
        found.append(f"{where}: the id is used twice")
    seen_ids.add(promise.id)
    if promise.unit not in registry.units:
        return [*found, f"{where}: its unit {promise.unit} has no [[unit]] entry"]
    if promise.unit in docs and normalise(promise.quote) not in normalise(docs[promise.unit]):
        found.append(f"{where}: its quote is not in the docstring of {promise.unit}: {promise.quote!r}")
    if promise.unchecked:
        if promise.criteria or promise.public:
            found.append(f"{where}: 'unchecked' and checks at once")
        return found
    if not promise.criteria:
        found.append(f"{where}: no hidden criterion tries it (or say why nobody can: unchecked = \"...\")")
    if not promise.public:
        found.append(f"{where}: no public test fails for its mistake")
    for criterion_id in promise.criteria:
        if criterion_id not in criteria:
            found.append(f"{where}: criterion {criterion_id} is not in the rubric")
    for test in promise.public:
        if test not in tests:
            found.append(f"{where}: public test {test} does not exist")
        elif not tests[test] & set(promise.criteria):
            found.append(f"{where}: public test {test} is marked for {sorted(tests[test])}, none of the "
                         f"promise's criteria {list(promise.criteria)}")
    return found


def table(registry: Registry, problem: str) -> str:
    """The write-up's "What the grader checks" table for ``problem``: each promise, the hidden
    criteria that try it and the public tests that fail for its mistake."""
    units = {name for name, unit in registry.units.items() if unit.problem == problem}
    rows = ["| promise | graded by | public test |", "|---|---|---|"]
    for promise in registry.promises:
        if promise.unit in units:
            graded = ", ".join(f"`{c}`" for c in promise.criteria) or f"not graded: {promise.unchecked}"
            public = ", ".join(f"`{t.split('::')[-1]}`" for t in promise.public) or "none"
            quote = normalise(promise.quote).replace("|", "\\|")
            rows.append(f"| {quote} | {graded} | {public} |")
    return "\n".join(rows)


def describe_criterion(criterion_id: str) -> str:
    """Where a criterion's check lives and what it tries: its rubric entry, its check's two
    sides (files), the promises that name it and their public tests."""
    criteria = {c.id: c for c in load_rubric().criteria}
    if criterion_id not in criteria:
        close = sorted(c for c in criteria if c.startswith(criterion_id.split("-")[0]))
        raise ValueError(f"no criterion {criterion_id!r} in the rubric" + (f"; {problem_hint(close)}" if close else ""))
    criterion = criteria[criterion_id]
    lines = [f"{criterion.id} ({criterion.points:g} points): {criterion.title}", f"  check   {criterion.check}"]
    for side, module in (("child", criterion.observe_module), ("parent", criterion.judge_module)):
        lines.append(f"  {side:<7} {module.replace('.', '/')}.py")
    if criterion.fallback:
        lines.append(f"  fallback: the grader's {criterion.fallback} where the student's own fail")
    for promise in load().promises:
        if criterion_id in promise.criteria:
            lines.append(f"  promise {promise.id}: {normalise(promise.quote)}")
            lines.extend(f"          public test {test}" for test in promise.public)
    return "\n".join(lines)


def problem_hint(close: list[str]) -> str:
    return "did you mean " + ", ".join(close[:6]) + "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.promises", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fingerprints", action="store_true", help="print every student unit's current fingerprint")
    parser.add_argument("--criterion", metavar="ID", help="where a criterion's check lives, and the promises and public tests it tries")
    args = parser.parse_args(argv)
    if args.criterion:
        try:
            print(describe_criterion(args.criterion))
        except ValueError as error:
            print(f"python -m grader.promises: {error}", file=sys.stderr)
            return 2
        return 0
    if args.fingerprints:
        for name, text in sorted(student_units().items()):
            print(f"{fingerprint(text)}  {name}")
        return 0
    found = problems_with(load())
    for problem, line in found:
        print(f"{problem or '-'}: {line}")
    print(f"{len(found)} problem(s) in {REGISTRY.relative_to(REPOSITORY)}/" if found else "the registry is complete")
    return 1 if found else 0
