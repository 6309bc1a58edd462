"""Solution stripping: the answer key with every solution region replaced by a stub.

Solutions are written once, in ``minitorch/``, between markers that sit alone on their lines::

    def clock_cycles(num_microbatches, num_stages):
        \"\"\"docstring the student reads\"\"\"
        # BEGIN SOLUTION 2.1
        ...
        # END SOLUTION

:func:`strip_solutions` turns each region (markers included) into::

        # TODO: Implement for Problem 2.1.
        raise NotImplementedError("Problem 2.1: clock_cycles")
"""
from __future__ import annotations

import ast
import re

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION (?P<problem>\d+\.\d+)[ \t]*$")
_END = re.compile(r"^[ \t]*# END SOLUTION[ \t]*$")
_ANY_MARKER = re.compile(r"(BEGIN|END)\s+SOLUTION", re.IGNORECASE)


class HandoutError(ValueError):
    """Malformed solution markers; the message starts with ``filename:line``."""


def _regions(lines: list[str], filename: str) -> list[tuple[int, int, str, str]]:
    """``(begin, end, indent, problem)`` per region, 0-based line indices of the markers."""
    regions, opened = [], None
    for index, line in enumerate(lines):
        begin, end = _BEGIN.match(line.rstrip("\r\n")), _END.match(line.rstrip("\r\n"))
        where = f"{filename}:{index + 1}"
        if begin:
            if opened is not None:
                raise HandoutError(f"{where}: BEGIN SOLUTION inside the region opened at line {opened[0] + 1} (markers must not nest)")
            opened = (index, begin["indent"], begin["problem"])
        elif end:
            if opened is None:
                raise HandoutError(f"{where}: END SOLUTION without a BEGIN SOLUTION")
            regions.append((opened[0], index, opened[1], opened[2]))
            opened = None
        elif _ANY_MARKER.search(line):
            raise HandoutError(f"{where}: malformed marker {line.strip()!r}; expected '# BEGIN SOLUTION N.M' or '# END SOLUTION'")
    if opened is not None:
        raise HandoutError(f"{filename}:{opened[0] + 1}: BEGIN SOLUTION {opened[2]} is never closed")
    return regions


def _function_names(source: str, filename: str) -> dict[int, str]:
    """Qualified function name (``Pipe.forward``) for every 1-based line inside a function."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for line in range(child.lineno, child.end_lineno + 1):
                    names[line] = prefix + child.name
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    try:
        visit(ast.parse(source, filename), "")
    except SyntaxError as error:
        raise HandoutError(f"{filename}:{error.lineno}: does not compile: {error.msg}") from None
    return names


def strip_solutions(source: str, filename: str = "<source>") -> str:
    """Return ``source`` with every solution region replaced by a NotImplementedError stub.

    Raises:
        HandoutError: an END without a BEGIN, a BEGIN never closed, nested regions, a
            malformed marker, or a source that does not compile.
    """
    lines = source.splitlines(keepends=True)
    regions = _regions(lines, filename)
    names = _function_names(source, filename)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    for begin, end, indent, problem in reversed(regions):
        name = names.get(begin + 1, "solution")
        lines[begin : end + 1] = [
            f"{indent}# TODO: Implement for Problem {problem}.{newline}",
            f'{indent}raise NotImplementedError("Problem {problem}: {name}"){newline}',
        ]
    return "".join(lines)
