"""A static scan (AST) of the student files for what a course forbids or wants to look at.

The rubric's ``[policy] forbidden`` lists dotted names. A file is flagged where it

* imports one (``import subprocess``, ``from os import _exit``, ``import torch.distributed.pipelining``,
  or ``importlib.import_module("ctypes")`` / ``__import__("ctypes")`` with a literal name);
* uses one through an imported name (``sys.modules[...]``, ``os._exit(0)``; aliases resolved:
  ``import os as o; o._exit(0)``);
* names a builtin on the list (``__import__``, ``eval``, ``open``);
* accesses an attribute listed with a leading dot (``.__wrapped__``, ``.__globals__``).

A file that does not parse has no findings (every criterion says what the error is).
Findings never change the score: the report lists them and marks the submission "needs
review", so a person decides. The scan is a tripwire for the obvious, not a sandbox:
``getattr(__import__("o" + "s"), ...)`` is flagged for ``__import__``, but code built at run
time can hide anything, which is why the children are isolated as well.
"""
from __future__ import annotations

import ast
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    name: str  # the forbidden entry that matched
    code: str  # the line, trimmed

    def describe(self) -> str:
        return f"{self.file}:{self.line}: {self.name}: {self.code}"


def _matches(dotted: str, forbidden: str) -> bool:
    return dotted == forbidden or dotted.startswith(forbidden + ".")


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of an attribute chain rooted at a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


class _Scanner(ast.NodeVisitor):
    def __init__(self, forbidden: tuple[str, ...]):
        self.modules = [f for f in forbidden if not f.startswith(".")]
        self.attributes = {f[1:] for f in forbidden if f.startswith(".")}
        self.aliases: dict[str, str] = {}  # local name -> full dotted name it was imported as
        self.hits: list[tuple[int, str]] = []

    def _flag(self, node: ast.expr | ast.stmt, dotted: str) -> None:
        for name in self.modules:
            if _matches(dotted, name):
                self.hits.append((node.lineno, name))
                return

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._flag(node, alias.name)
            local = alias.asname or alias.name.split(".")[0]
            self.aliases[local] = alias.name if alias.asname else local

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}" if module else alias.name
            self._flag(node, full)
            self.aliases[alias.asname or alias.name] = full

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in self.attributes:
            self.hits.append((node.lineno, "." + node.attr))
        dotted = _dotted(node)
        if dotted is not None:
            root, _, rest = dotted.partition(".")
            if root in self.aliases:
                self._flag(node, self.aliases[root] + "." + rest)
                return  # the chain's inner nodes are the same use
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id not in self.aliases:  # an imported module's bare name was flagged at the import
            self._flag(node, node.id)

    def visit_Call(self, node: ast.Call) -> None:
        function = _dotted(node.func)
        if function in ("__import__", "importlib.import_module") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self._flag(node, first.value)
        self.generic_visit(node)


def scan_source(name: str, source: bytes | str, forbidden: tuple[str, ...]) -> list[Finding]:
    """Findings in one student file, in line order, one per (line, entry)."""
    text = source.decode("utf-8", errors="replace") if isinstance(source, bytes) else source
    try:
        tree = ast.parse(text, filename=name)
    except (SyntaxError, ValueError):
        return []  # the criteria report the error itself; nothing here to review
    scanner = _Scanner(tuple(forbidden))
    scanner.visit(tree)
    lines = text.splitlines()
    seen, findings = set(), []
    for line, entry in sorted(scanner.hits):
        if (line, entry) not in seen:
            seen.add((line, entry))
            code = lines[line - 1].strip()[:160] if 0 < line <= len(lines) else ""
            findings.append(Finding(name, line, entry, code))
    return findings


def scan(files: dict[str, bytes], forbidden: tuple[str, ...]) -> list[dict]:
    """Findings over every student file, as plain dicts for the JSON report."""
    return [asdict(f) for name in sorted(files) for f in scan_source(name, files[name], forbidden)]
