"""Exact comparisons are stated, never accidental (issue 27, item 1).

Two computations that may round differently (other batch shapes, kernels, thread counts) are
compared within a tolerance. Where code here compares exactly (``torch.equal``, a tolerance of
0), a comment ``# exact: <why>`` on the comparison or on the line above its statement says why
the two sides cannot round differently: a tensor against its own copy, an RNG state, integer
values, the same computation on the same shapes. Scanned: the suite, the answer key and the
hidden checks."""
from __future__ import annotations

import ast
from pathlib import Path

from grader.layout import REPOSITORY

SCANNED = ("tests", "minitorch", "grader/checks")
MARKER = "# exact:"


def _is_exact(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    if isinstance(function, ast.Attribute) and function.attr == "equal" and isinstance(function.value, ast.Name) \
            and function.value.id == "torch":
        return True
    zero = {keyword.arg for keyword in node.keywords
            if isinstance(keyword.value, ast.Constant) and keyword.value.value == 0}
    return {"rtol", "atol"} <= zero


def unexplained(source: str) -> list[int]:
    """Lines of exact comparisons in ``source`` that no ``# exact:`` comment explains."""
    lines = source.splitlines()
    found = []
    for statement in ast.walk(ast.parse(source)):
        if not isinstance(statement, ast.stmt):
            continue
        inner = [child for child in ast.iter_child_nodes(statement) if not isinstance(child, ast.stmt)]
        for call in (node for child in inner for node in ast.walk(child) if _is_exact(node)):
            around = lines[max(0, statement.lineno - 2): call.end_lineno]
            if not any(MARKER in line for line in around):
                found.append(call.lineno)
    return sorted(set(found))


def test_the_scan_sees_an_unexplained_exact_comparison_and_accepts_an_explained_one():
    bare = "import torch\nassert torch.equal(a, b)\nif not torch.equal(\n    c, d):\n    pass\nf(x, rtol=0, atol=0)\n"
    assert unexplained(bare) == [2, 3, 6]
    explained = ("import torch\n# exact: a copy against its original\nassert torch.equal(a, b)\n"
                 "if not torch.equal(c, d):  # exact: RNG states\n    pass\nf(x, rtol=0, atol=0.0)  # exact: ints\ng(x, rtol=0, atol=1e-6)\n")
    assert unexplained(explained) == []


def test_every_exact_comparison_says_why_it_cannot_round_differently():
    problems = []
    for folder in SCANNED:
        for path in sorted((REPOSITORY / folder).rglob("*.py")):
            if path.resolve() == Path(__file__).resolve():
                continue
            for line in unexplained(path.read_text()):
                problems.append(f"{path.relative_to(REPOSITORY)}:{line}")
    assert not problems, ("exact comparisons without a '# exact: <why>' comment (compare within a tolerance "
                          "where the two sides may round differently):\n" + "\n".join(problems))
