"""A static scan (AST) of the student files for what a course forbids or wants to look at.

The rubric's ``[policy] forbidden`` lists dotted names. A file is flagged where it

* imports one (``import subprocess``, ``from os import _exit``, ``import torch.distributed.pipelining``,
  or ``importlib.import_module("ctypes")`` / ``__import__("ctypes")`` with a literal name);
* uses one through an imported name (``sys.modules[...]``, ``os._exit(0)``; aliases resolved:
  ``import os as o; o._exit(0)``);
* names a builtin on the list (``__import__``, ``eval``, ``open``);
* accesses an attribute listed with a leading dot (``.__wrapped__``, ``.__globals__``).

A file that does not parse has no findings (every criterion says what the error is); one
nested too deep for Python's parser gets one finding, ``(not scanned)``.
Findings never change the score: the report lists them and marks the submission "needs
review", so a person decides. The scan is a tripwire for the obvious, not a sandbox:
``getattr(__import__("o" + "s"), ...)`` is flagged for ``__import__``, but code built at run
time can hide anything, which is why the children are isolated as well.
"""
from __future__ import annotations

import ast
from dataclasses import asdict, dataclass

UNSCANNABLE = "(not scanned)"  # the name of the finding for a file the scan could not read
FINDINGS_KEPT = 100  # findings a report lists (a file may repeat a forbidden name thousands of times)


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


class _Scanner:
    """Walks a syntax tree depth-first in source order with a stack of its own, not with
    recursion: a student file nested thousands deep (``1+1+...``) must not crash the scan."""

    def __init__(self, forbidden: tuple[str, ...]):
        self.modules = [f for f in forbidden if not f.startswith(".")]
        self.attributes = {f[1:] for f in forbidden if f.startswith(".")}
        self.aliases: dict[str, str] = {}  # local name -> full dotted name it was imported as
        self.hits: list[tuple[int, str]] = []

    def scan(self, tree: ast.AST) -> None:
        stack = [tree]
        while stack:
            node = stack.pop()
            if self._visit(node):
                stack.extend(reversed(list(ast.iter_child_nodes(node))))

    def _flag(self, node: ast.expr | ast.stmt, dotted: str) -> None:
        for name in self.modules:
            if _matches(dotted, name):
                self.hits.append((node.lineno, name))
                return

    def _visit(self, node: ast.AST) -> bool:
        """Note what ``node`` uses; whether its children still need a look."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._flag(node, alias.name)
                local = alias.asname or alias.name.split(".")[0]
                self.aliases[local] = alias.name if alias.asname else local
            return False
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}" if module else alias.name
                self._flag(node, full)
                self.aliases[alias.asname or alias.name] = full
            return False
        if isinstance(node, ast.Attribute):
            return self._visit_attribute(node)
        if isinstance(node, ast.Name):
            if node.id not in self.aliases:  # an imported module's bare name was flagged at the import
                self._flag(node, node.id)
            return False
        if isinstance(node, ast.Call):
            function = _dotted(node.func)
            if function in ("__import__", "importlib.import_module") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    self._flag(node, first.value)
        return True

    def _visit_attribute(self, node: ast.Attribute) -> bool:
        if node.attr in self.attributes:
            self.hits.append((node.lineno, "." + node.attr))
        dotted = _dotted(node)
        if dotted is not None:
            root, _, rest = dotted.partition(".")
            if root in self.aliases:
                self._flag(node, self.aliases[root] + "." + rest)
                for inner in rest.split(".")[:-1]:  # the chain's inner attributes (torch.sys.modules)
                    if inner in self.attributes:
                        self.hits.append((node.lineno, "." + inner))
                return False  # the chain's inner nodes are the same use
        return True


def scan_source(name: str, source: bytes | str, forbidden: tuple[str, ...]) -> list[Finding]:
    """Findings in one student file, in line order, one per (line, entry). A file too deeply
    nested for Python's own parser gets one finding saying it could not be scanned."""
    text = source.decode("utf-8", errors="replace") if isinstance(source, bytes) else source
    try:
        tree = ast.parse(text, filename=name)
    except (SyntaxError, ValueError):
        return []  # the criteria report the error itself; nothing here to review
    except (RecursionError, MemoryError) as error:  # "too complex to parse": nested too deep
        return [Finding(name, 0, UNSCANNABLE, f"the file could not be scanned ({type(error).__name__})")]
    scanner = _Scanner(tuple(forbidden))
    scanner.scan(tree)
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
