"""Which public tests catch the kind of mistake each grader criterion grades.

One source: the ``@pytest.mark.criterion("2.2-transfers", ...)`` markers on the tests in
``tests/public/`` (a module's ``pytestmark`` counts for all of its tests). The write-up lists,
next to each criterion, the public tests that carry its id, so a student learns locally what
the grader will say; ``tests/kit/test_public_tests.py`` checks that every criterion of the
rubric has at least one such test and that every id a marker names is in the rubric.

The markers are read from the syntax tree, without importing the tests (which would run the
answer key at build time).
"""
from __future__ import annotations

import ast
from pathlib import Path

MARKER = "criterion"


class MarkerError(Exception):
    """A criterion marker the build cannot read; the message names file:line."""


def _marker_ids(node: ast.expr, where: str) -> list[str] | None:
    """The ids of ``pytest.mark.criterion("a", "b")``, or None when ``node`` is another decorator."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == MARKER):
        return None
    owner = node.func.value
    if not (isinstance(owner, ast.Attribute) and owner.attr == "mark"):
        return None
    ids = []
    for argument in node.args:
        if not (isinstance(argument, ast.Constant) and isinstance(argument.value, str)):
            raise MarkerError(f"{where}:{node.lineno}: criterion markers take criterion ids as string literals")
        ids.append(argument.value)
    if not ids or node.keywords:
        raise MarkerError(f"{where}:{node.lineno}: write @pytest.mark.criterion(\"<id>\", ...) with at least one id")
    return ids


def _module_ids(tree: ast.Module, where: str) -> list[str]:
    """Ids of the ``pytestmark = ...`` markers of a module (one marker or a list of them)."""
    ids: list[str] = []
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in statement.targets):
            values = statement.value.elts if isinstance(statement.value, (ast.List, ast.Tuple)) else [statement.value]
            for value in values:
                ids += _marker_ids(value, where) or []
    return ids


def _tests(tree: ast.Module):
    """Every test function of a module, at its top level or in a ``Test*`` class."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    yield f"{node.name}.{item.name}", item


def criterion_tests(folder: Path) -> dict[str, list[str]]:
    """``{criterion id: ["test_file.py::test_name", ...]}`` for the tests in ``folder``.

    Raises:
        MarkerError: a marker whose ids are not string literals.
    """
    found: dict[str, list[str]] = {}
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        every_test = _module_ids(tree, path.name)
        for name, function in _tests(tree):
            ids = list(every_test)
            for decorator in function.decorator_list:
                ids += _marker_ids(decorator, path.name) or []
            for criterion in dict.fromkeys(ids):
                found.setdefault(criterion, []).append(f"{path.name}::{name}")
    return found
