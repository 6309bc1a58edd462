"""Mutation operators, and the standard family: comparison, arithmetic, constant, boolean and
return-value operators, the classic single-point changes.

An operator looks at one node of a region (or, for a ``whole_region`` operator, at the region
itself) and yields :class:`Change` s: the node that replaces it (a list of statements where a
statement becomes several, or none) and what changed, in a few words for the description. An
operator never changes the node it is given: it builds new ones (sharing unchanged children).
"""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from grader.mutation.regions import RegionContext

STANDARD, DOMAIN = "standard", "domain"
FAMILIES = (STANDARD, DOMAIN)


class Change(NamedTuple):
    """A node's replacement (a list of statements: the statement becomes these) and what changed."""

    replacement: ast.AST | list[ast.stmt]
    what: str


@dataclass(frozen=True)
class Operator:
    """A named mutation operator of a family. ``mutate(node, context)`` yields changes of
    ``node``; a ``whole_region`` operator is called once per region with ``node`` None and
    replaces the region's statements."""

    name: str
    family: str
    mutate: Callable[[ast.AST | None, RegionContext], Iterable[Change]]
    whole_region: bool = False


SYMBOLS: dict[type, str] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is",
    ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
    ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**", ast.And: "and", ast.Or: "or",
}
# Each comparison to its boundary neighbour or its opposite: the mistakes of a limit.
COMPARISONS: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
}
ARITHMETIC: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult,
}


def _comparison(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            new = COMPARISONS.get(type(op))
            if new is not None:
                ops = [*node.ops[:index], new(), *node.ops[index + 1:]]
                yield Change(ast.Compare(node.left, ops, node.comparators), f"'{SYMBOLS[type(op)]}' -> '{SYMBOLS[new]}'")


def _arithmetic(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ARITHMETIC:
        new = ARITHMETIC[type(node.op)]
        suffix = "=" if isinstance(node, ast.AugAssign) else ""
        what = f"'{SYMBOLS[type(node.op)]}{suffix}' -> '{SYMBOLS[new]}{suffix}'"
        if isinstance(node, ast.BinOp):
            yield Change(ast.BinOp(node.left, new(), node.right), what)
        else:
            yield Change(ast.AugAssign(node.target, new(), node.value), what)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        yield Change(node.operand, "drop the unary '-'")


def _constant(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """Ints n -> n + 1 and n - 1 (so 0 <-> 1), floats c -> c + 1, True <-> False."""
    if not isinstance(node, ast.Constant):
        return
    value = node.value
    if isinstance(value, bool):
        yield Change(ast.Constant(not value), f"{value} -> {not value}")
    elif isinstance(value, int):
        for new in (value + 1, value - 1):
            yield Change(ast.Constant(new), f"{value} -> {new}")
    elif isinstance(value, float):
        yield Change(ast.Constant(value + 1.0), f"{value!r} -> {value + 1.0!r}")


def _boolean(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    if isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield Change(ast.BoolOp(new(), node.values), f"'{SYMBOLS[type(node.op)]}' -> '{SYMBOLS[new]}'")
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield Change(node.operand, "drop 'not'")


def _return_value(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    if isinstance(node, ast.Return) and node.value is not None and \
            not (isinstance(node.value, ast.Constant) and node.value.value is None):
        yield Change(ast.Return(ast.Constant(None)), "return None instead")


STANDARD_OPERATORS = (
    Operator("comparison", STANDARD, _comparison),
    Operator("arithmetic", STANDARD, _arithmetic),
    Operator("constant", STANDARD, _constant),
    Operator("boolean", STANDARD, _boolean),
    Operator("return-value", STANDARD, _return_value),
)
