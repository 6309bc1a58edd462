"""Generate the mutants of the answer key's solution regions.

Each mutant is one :class:`~grader.mutation.operators.Change` at one node of one region. Its
id names the region (problem and function), the operator, the node's path inside the region
and a short hash of the mutated code::

    2.1:clock_cycles:comparison:3.test:4f1c2a

so it survives edits anywhere else in the file (line numbers are not part of it). The mutated
file is the original with the region's statements rewritten from the mutated syntax tree
(``ast.unparse``; comments inside the region are lost, nothing outside it changes). The hash is
of :func:`canonical`, so ids are the same on every supported Python. A mutant
whose region's syntax tree equals the original's, or whose file does not compile, is
discarded (counted in :class:`Generated`).
"""
from __future__ import annotations

import ast
import copy
import functools
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.layout import PROVIDED_FOLDER, STUDENT_FILES
from grader.mutation.domain import DOMAIN_OPERATORS
from grader.mutation.operators import STANDARD_OPERATORS, Change, Operator
from grader.mutation.regions import RegionContext, region_contexts

OPERATORS: tuple[Operator, ...] = STANDARD_OPERATORS + DOMAIN_OPERATORS
CONTEXT_CHARACTERS = 70  # of the source line a description quotes
Path_ = tuple[tuple[str, int | None], ...]  # (field, index) steps from the region's statements to a node


@dataclass(frozen=True)
class Mutant:
    """One mutant of a student file."""

    id: str
    problem: str
    family: str
    operator: str
    file: str
    description: str
    render: Callable[[], str] = field(repr=False, compare=False)

    def source(self) -> str:
        """The whole mutated file (built on demand: most runs grade a few of the mutants)."""
        return self.render()


@dataclass
class Generated:
    """The mutants, and how many candidates were discarded and why."""

    mutants: list[Mutant] = field(default_factory=list)
    identical: int = 0
    not_compiling: int = 0
    not_compiling_ids: list[str] = field(default_factory=list)


def _walk(statements: list[ast.stmt]) -> Iterator[tuple[Path_, ast.AST, ast.stmt]]:
    """``(path, node, innermost statement holding it)`` for every node of ``statements``,
    parents first; f-strings (messages) are not entered."""
    def visit(node: ast.AST, path: Path_, statement: ast.stmt) -> Iterator[tuple[Path_, ast.AST, ast.stmt]]:
        statement = node if isinstance(node, ast.stmt) else statement
        yield path, node, statement
        if isinstance(node, ast.JoinedStr):
            return
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        yield from visit(item, (*path, (name, index)), statement)
            elif isinstance(value, ast.AST):
                yield from visit(value, (*path, (name, None)), statement)

    for index, statement in enumerate(statements):
        yield from visit(statement, (("body", index),), statement)


def path_text(path: Path_) -> str:
    """``3.test.ops.0`` (the region's statement 3, its test, that test's first operator)."""
    if not path:
        return "region"
    steps = [str(path[0][1])]
    for name, index in path[1:]:
        steps.append(name if index is None else f"{name}.{index}")
    return ".".join(steps)


def _replaced(statements: list[ast.stmt], path: Path_, replacement: ast.AST | list[ast.stmt]) -> list[ast.stmt]:
    """The region's statements with the node at ``path`` replaced (a list of statements replaces
    a statement in its block, or, at the empty path, the whole region). Only the nodes on the
    path are copied; the rest is shared with the original, which is never changed."""
    if not path:
        assert isinstance(replacement, list)
        return replacement
    (_, first), rest = path[0], path[1:]
    assert first is not None  # the first step is always an index into the region's statements
    copies = list(statements)
    if not rest:
        copies[first:first + 1] = replacement if isinstance(replacement, list) else [replacement]  # type: ignore[list-item]  # a statement
        return copies
    parent = copies[first] = copy.copy(statements[first])
    for name, index in rest[:-1]:
        value = getattr(parent, name)
        if index is None:
            child = copy.copy(value)
            setattr(parent, name, child)
        else:
            value = list(value)
            setattr(parent, name, value)
            child = value[index] = copy.copy(value[index])
        parent = child
    name, index = rest[-1]
    if index is None:
        setattr(parent, name, replacement)
    else:
        block = list(getattr(parent, name))
        block[index:index + 1] = replacement if isinstance(replacement, list) else [replacement]
        setattr(parent, name, block)
    return copies


def _located(replacement: ast.AST | list[ast.stmt], original: ast.AST | None) -> ast.AST | list[ast.stmt]:
    """A copy of ``replacement`` whose new nodes have the original's location (compile needs one)."""
    new = copy.deepcopy(replacement)
    for node in new if isinstance(new, list) else [new]:
        if original is not None:
            ast.copy_location(node, original)
        ast.fix_missing_locations(node)
    return new


def _compiles(context: RegionContext, statements: list[ast.stmt]) -> bool:
    """Whether the region's function compiles with ``statements`` as its body."""
    function = copy.copy(context.function)
    function.body = statements or [ast.copy_location(ast.Pass(), context.function)]
    function.decorator_list = []
    try:  # every node is located: the region's own, and the replacement (see _located)
        compile(ast.Module(body=[function], type_ignores=[]), context.file, "exec")
    except (SyntaxError, ValueError, TypeError):
        return False
    return True


def _mutated_file(context: RegionContext, statements: list[ast.stmt]) -> str:
    """The file with the region's lines (between its markers) rewritten from ``statements``."""
    lines = context.source.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    body = ast.unparse(ast.Module(body=statements, type_ignores=[]))
    rewritten = [context.region.indent + line + newline if line else newline for line in body.splitlines()]
    return "".join(lines[: context.region.begin] + rewritten + lines[context.region.end - 1:])


def canonical(node: object) -> str:
    """A text of a syntax tree that is the same on every Python the course supports (3.10-3.13):
    fields holding None or an empty list are left out (3.12 added ``type_params = []`` to every
    function; ``ast.dump`` and ``ast.unparse`` both differ between versions)."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={canonical(value)}" for name, value in ast.iter_fields(node) if value is not None and value != []]
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(canonical(item) for item in node) + "]"
    return repr(node)


def _digest(operator: Operator, replacement: ast.AST | list[ast.stmt]) -> str:
    return hashlib.sha1(f"{operator.name}\n{canonical(replacement)}".encode()).hexdigest()[:6]


def _description(context: RegionContext, change: Change, statement: ast.stmt | None) -> str:
    text = f"{context.problem} {context.qualname}: {change.what}"
    if statement is None:
        return text
    line = context.line_of(statement)
    if line in change.what:
        return text
    line = line if len(line) <= CONTEXT_CHARACTERS else line[: CONTEXT_CHARACTERS - 3] + "..."
    return f'{text} in "{line}"'


def _candidates(context: RegionContext, operators: Sequence[Operator]
                ) -> Iterator[tuple[Operator, Path_, Change, ast.AST | None, ast.stmt | None]]:
    """``(operator, path, change, the node changed, its statement)``; node and statement are
    None for an operator of the whole region."""
    for operator in operators:
        if operator.whole_region:
            for change in operator.mutate(None, context):
                yield operator, (), change, None, None
    nodes = list(_walk(context.statements))
    for operator in operators:
        if not operator.whole_region:
            for path, node, statement in nodes:
                for change in operator.mutate(node, context):
                    yield operator, path, change, node, statement


def _same(change: Change, node: ast.AST | None, context: RegionContext) -> bool:
    """Whether the change leaves the syntax tree as it was."""
    before = context.statements if node is None else [node]
    after = change.replacement if isinstance(change.replacement, list) else [change.replacement]
    return [ast.dump(n) for n in before] == [ast.dump(n) for n in after]


def region_mutants(context: RegionContext, operators: Sequence[Operator], generated: Generated) -> None:
    """Add the mutants of one region to ``generated`` (and count the discarded ones)."""
    seen = set()
    for operator, path, change, node, statement in _candidates(context, operators):
        replacement = _located(change.replacement, node if node is not None else context.statements[0])
        mutant_id = f"{context.id}:{operator.name}:{path_text(path)}:{_digest(operator, replacement)}"
        if _same(change, node, context) or mutant_id in seen:
            generated.identical += 1
            continue
        seen.add(mutant_id)
        statements = _replaced(context.statements, path, replacement)
        if not _compiles(context, statements):
            generated.not_compiling += 1
            generated.not_compiling_ids.append(mutant_id)
            continue
        generated.mutants.append(Mutant(mutant_id, context.problem, operator.family, operator.name, context.file,
                                        _description(context, change, statement),
                                        functools.partial(_mutated_file, context, statements)))


def generate(sources: dict[str, str] | None = None, operators: Sequence[Operator] = OPERATORS) -> Generated:
    """Every mutant of the student files (``sources``: name -> text; default: the answer key
    in ``minitorch/``), in file, region, operator and node order."""
    if sources is None:
        sources = {name: (Path(PROVIDED_FOLDER) / name).read_text() for name in STUDENT_FILES}
    generated = Generated()
    for file, source in sources.items():
        for context in region_contexts(source, file):
            region_mutants(context, operators, generated)
    return generated
