"""The domain family: the structural mistakes of this homework, which single-point operators
never make (issue 29: the realistic hidden rounds were caught at 11-17% while standard mutants
were killed at 180 of 195).

State across calls (a memoised function), a statement left out (a ``zero_grad``, a collective,
an argument check), a ``with``/``try`` unwrapped, a size or rank hard-coded, an early return on
an edge size, two arguments swapped, a result of another dtype or container, a generator that
builds everything first, in place instead of out of place, an ``except`` narrowed, a
``.contiguous()``/``.clone()``/``.detach()`` dropped or a ``.detach()`` added, a keyword
argument dropped, and a call confused with its sibling (f with g, split with chunk).
"""
from __future__ import annotations

import ast
import copy
from collections.abc import Iterable

from grader.mutation.operators import DOMAIN, Change, Operator
from grader.mutation.regions import RegionContext

PREFIX = "_mutant_"  # names the domain operators introduce
SMALL_SIZE = 2  # what a hard-coded size becomes
EDGE_SIZE = 1  # the edge an early return guards
NOT_SIZES = ("seed",)  # int parameters that are not sizes
DROPPED_METHODS = ("contiguous", "detach", "clone", "to", "float", "double", "requires_grad_", "cpu")
IN_PLACE_METHODS = ("add", "sub", "mul", "div", "masked_fill", "exp", "clamp", "neg", "log", "tanh")
IN_PLACE_OPERATORS = {ast.Add: "add_", ast.Sub: "sub_", ast.Mult: "mul_", ast.Div: "div_"}
COMMUTATIVE = ("max", "min")  # swapping their arguments changes nothing
CONFUSABLE: dict[str, str] = {
    "split": "chunk", "chunk": "split", "max": "min", "min": "max", "round": "int", "view": "reshape",
    "reshape": "view",
    "copy_to_tensor_model_parallel_region": "reduce_from_tensor_model_parallel_region",
    "reduce_from_tensor_model_parallel_region": "copy_to_tensor_model_parallel_region",
    "scatter_to_tensor_model_parallel_region": "gather_from_tensor_model_parallel_region",
    "gather_from_tensor_model_parallel_region": "scatter_to_tensor_model_parallel_region",
    "scatter_to_sequence_parallel_region": "gather_from_sequence_parallel_region",
    "gather_from_sequence_parallel_region": "scatter_to_sequence_parallel_region",
    "reduce_scatter_to_sequence_parallel_region": "scatter_to_sequence_parallel_region",
    "_split_along_last_dim": "_split_along_first_dim", "_split_along_first_dim": "_split_along_last_dim",
    "_gather_along_last_dim": "_gather_along_first_dim", "_gather_along_first_dim": "_gather_along_last_dim",
    "_reduce_scatter_along_first_dim": "_split_along_first_dim",
}


def _code(node: ast.AST, limit: int = 50) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _statements(text: str) -> list[ast.stmt]:
    return ast.parse(text).body


def _call_name(call: ast.Call) -> str | None:
    function = call.func
    return function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else None


def _method(receiver: ast.expr, name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Attribute(receiver, name, ast.Load()), list(args), [])


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Name(name, ast.Load()), list(args), [])


# ---------------------------------------------------------------- the region as a whole
def _inner_function(context: RegionContext, name: str) -> tuple[ast.FunctionDef, ast.Call]:
    """A nested copy of the region's function named ``name`` (no defaults, no annotations: it
    is always called with every argument) and the call passing the function's own arguments."""
    arguments = copy.deepcopy(context.function.args)
    for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]:
        if argument is not None:
            argument.annotation = None
    arguments.defaults, arguments.kw_defaults = [], [None] * len(arguments.kwonlyargs)
    inner = copy.copy(context.function)  # a copy keeps the fields other Pythons add (type_params)
    inner.name, inner.args, inner.decorator_list, inner.returns = name, arguments, [], None
    inner.body = copy.deepcopy(context.statements)
    given = context.function.args
    positional: list[ast.expr] = [ast.Name(a.arg, ast.Load()) for a in [*given.posonlyargs, *given.args]]
    if given.vararg is not None:
        positional.append(ast.Starred(ast.Name(given.vararg.arg, ast.Load()), ast.Load()))
    keywords = [ast.keyword(a.arg, ast.Name(a.arg, ast.Load())) for a in given.kwonlyargs]
    if given.kwarg is not None:
        keywords.append(ast.keyword(None, ast.Name(given.kwarg.arg, ast.Load())))
    return inner, ast.Call(ast.Name(name, ast.Load()), positional, keywords)


def _memoise(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """State across calls: results cached on the repr of the arguments, the same objects
    handed out again (a generator replays the waves it recorded)."""
    if context.is_autograd or context.function.name == "__init__" or not (context.returns_value or context.is_generator):
        return
    inner, call = _inner_function(context, PREFIX + "compute")
    names = ", ".join(a.arg for a in context.parameters)
    cache = f"{PREFIX}cache = globals().setdefault({PREFIX + 'cache_' + context.qualname.replace('.', '_')!r}, {{}})\n" \
            f"{PREFIX}key = repr(({names},))\n"
    if context.is_generator:
        body = _statements(cache + f"if {PREFIX}key in {PREFIX}cache:\n    yield from {PREFIX}cache[{PREFIX}key]\n"
                           f"    return\n{PREFIX}items = []\n")
        body += [inner] + _statements(f"for {PREFIX}item in CALL:\n    {PREFIX}items.append({PREFIX}item)\n"
                                      f"    yield {PREFIX}item\n{PREFIX}cache[{PREFIX}key] = {PREFIX}items")
        body[-2].iter = call  # type: ignore[attr-defined]
    else:
        body = _statements(cache + f"if {PREFIX}key not in {PREFIX}cache:\n    pass\n"
                           f"return {PREFIX}cache[{PREFIX}key]")
        store = _statements(f"{PREFIX}cache[{PREFIX}key] = CALL")[0]
        store.value = call  # type: ignore[attr-defined]
        body[2].body = [inner, store]  # type: ignore[attr-defined]
    yield Change(body, f"memoise {context.qualname} on the repr of its arguments")


def _early_return(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """Return early on an edge size: ``if n == 1: return <empty>`` for each int parameter that
    is a size (a seed is not)."""
    sized = [a.arg for a in context.parameters if a.annotation is not None and a.arg not in NOT_SIZES
             and ast.unparse(a.annotation) in ("int", "int | None")]
    annotation = context.annotation()
    if context.is_generator or context.function.name == "__init__" or not context.returns_value:
        value = ""
    elif annotation.startswith("list"):
        value = " []"
    elif context.returns_tensor() and context.tensor_names & {a.arg for a in context.parameters}:
        value = " " + next(a.arg for a in context.parameters if a.arg in context.tensor_names)
    else:
        value = " None"
    for name in sized:
        guard = _statements(f"if {name} == {EDGE_SIZE}:\n    return{value}")
        yield Change(guard + context.statements, f"return{value} early when {name} == {EDGE_SIZE}")


def _generator_to_list(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """A generator made a list, or made eager (every item computed before the first is handed out)."""
    if not context.is_generator:
        return
    inner, call = _inner_function(context, PREFIX + "generator")
    as_list = ast.Return(_call("list", call))
    yield Change([inner, as_list], "a list of every item instead of a generator")
    yield Change([copy.deepcopy(inner), ast.Return(_call("iter", _call("list", call)))],
                 "every item computed before the first is handed out")


# ---------------------------------------------------------------- statements
def _is_guard(statement: ast.stmt) -> bool:
    """``if ...: ... raise/return`` without an else: an argument check or an early exit."""
    return isinstance(statement, ast.If) and not statement.orelse and isinstance(statement.body[-1], (ast.Raise, ast.Return))


def _delete_statement(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """Leave a statement out: a call made for its effect (``zero_grad``, a collective,
    ``save_for_backward``), an update (``+=``), a result stored into a container, an argument
    check or early exit, a loop of argument checks."""
    deletable = (
        (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call))
        or isinstance(node, (ast.AugAssign, ast.Assert))
        or (isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) for t in node.targets))
        or (isinstance(node, ast.stmt) and _is_guard(node))
        or (isinstance(node, ast.For) and all(_is_guard(s) for s in node.body))
    )
    if deletable:
        assert isinstance(node, ast.stmt)
        yield Change([ast.Pass()], f"delete \"{context.line_of(node)}\"")


def _unwrap(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """A ``with`` unwrapped to its body; a ``try`` without its handlers (errors propagate at once)."""
    if isinstance(node, ast.With):
        yield Change(list(node.body), f"unwrap \"{context.line_of(node)}\" to its body")
    elif isinstance(node, ast.Try) and node.handlers:
        yield Change([*node.body, *node.orelse, *node.finalbody], "drop the try's except handlers")


def _narrow_except(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    if isinstance(node, ast.ExceptHandler) and (node.type is None or (isinstance(node.type, ast.Name) and node.type.id == "BaseException")):
        narrowed = ast.ExceptHandler(ast.Name("Exception", ast.Load()), node.name, node.body)
        yield Change(narrowed, f"'except {_code(node.type) if node.type else ''}' -> 'except Exception'")


# ---------------------------------------------------------------- expressions
def _hard_code_size(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """A size hard-coded to a small value (``len(...)``, ``.shape[k]``, ``.size(k)``), the world
    size to 1 or 2, the rank to 0."""
    values: tuple[int, ...] = ()
    if isinstance(node, ast.Call):
        name = _call_name(node)
        values = {"len": (SMALL_SIZE,), "size": (SMALL_SIZE,), "get_world_size": (1, SMALL_SIZE), "get_rank": (0,)}.get(name or "", ())
        if name == "size" and not node.args:
            values = ()
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        values = (SMALL_SIZE,)
    for value in values:
        yield Change(ast.Constant(value), f"'{_code(node)}' -> {value}")  # type: ignore[arg-type]


def _swap_arguments(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    if not isinstance(node, ast.Call) or _call_name(node) in COMMUTATIVE or any(isinstance(a, ast.Starred) for a in node.args):
        return
    for index in range(len(node.args) - 1):
        first, second = node.args[index], node.args[index + 1]
        if ast.dump(first) != ast.dump(second):
            args = [*node.args[:index], second, first, *node.args[index + 2:]]
            yield Change(ast.Call(node.func, args, node.keywords),
                         f"swap '{_code(first, 25)}' and '{_code(second, 25)}' in {_code(node.func, 30)}(...)")


def _dtype(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """A result of another dtype: a tensor as float64 or float32, ints as floats."""
    if not isinstance(node, ast.Return) or node.value is None:
        return
    if context.is_tensor(node.value) and not isinstance(node.value, ast.Tuple):
        for method in ("double", "float"):
            yield Change(ast.Return(_method(node.value, method)), f"return the result as .{method}()")
    elif context.annotation() == "list[int]":
        element = ast.Name(PREFIX + "value", ast.Load())
        floats = ast.ListComp(_call("float", element), [ast.comprehension(ast.Name(PREFIX + "value", ast.Store()), node.value, [], 0)])
        yield Change(ast.Return(floats), "return floats instead of ints")


def _container(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """A result in another container: list <-> tuple."""
    if isinstance(node, (ast.Return, ast.Yield)) and node.value is not None:
        value = node.value
        kind = type(node)
        if isinstance(value, (ast.List, ast.ListComp)) or (isinstance(node, ast.Return) and context.annotation().startswith("list")):
            yield Change(kind(_call("tuple", value)), "a tuple instead of a list")
        elif isinstance(value, ast.Tuple):
            yield Change(kind(ast.List(value.elts, ast.Load())), "a list instead of a tuple")


def _in_place(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """In place instead of out of place, on a tensor the function did not just create as a
    temporary: ``x = x + y`` -> ``x += y``, ``a + b`` -> ``a.add_(b)``, ``.exp()`` -> ``.exp_()``
    (``x = x + y`` is reported once, as ``x += y``)."""
    if isinstance(node, ast.Assign) and id(node.value) in context.self_updates and context.is_tensor(node.value.left):  # type: ignore[attr-defined]
        value, target = node.value, node.targets[0]
        assert isinstance(value, ast.BinOp) and isinstance(target, ast.Name)
        yield Change(ast.AugAssign(target, value.op, value.right), f"'{_code(node)}' -> in place")
    elif isinstance(node, ast.BinOp) and type(node.op) in IN_PLACE_OPERATORS and id(node) not in context.self_updates \
            and isinstance(node.left, (ast.Name, ast.Attribute)) and context.is_tensor(node.left):
        method = IN_PLACE_OPERATORS[type(node.op)]
        yield Change(_method(node.left, method, node.right), f"'{_code(node)}' -> '{_code(node.left, 20)}.{method}(...)'")
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in IN_PLACE_METHODS \
            and isinstance(node.func.value, (ast.Name, ast.Attribute)) and context.is_tensor(node.func.value):
        function = ast.Attribute(node.func.value, node.func.attr + "_", ast.Load())
        yield Change(ast.Call(function, node.args, node.keywords), f"'.{node.func.attr}(...)' -> '.{node.func.attr}_(...)'")


def _drop_call(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """``x.contiguous()``, ``.clone()``, ``.detach()``, ``.to(...)``, ... -> ``x``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DROPPED_METHODS:
        arguments = "(...)" if node.args or node.keywords else "()"
        yield Change(node.func.value, f"drop '.{node.func.attr}{arguments}' from '{_code(node, 40)}'")


def _add_detach(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """A tensor result ``.detach()`` ed. Not in an autograd Function's forward or backward:
    autograd attaches the Function's own graph to what forward returns, and runs backward
    without grad mode, so a ``.detach()`` there changes nothing."""
    if context.is_autograd:
        return
    if isinstance(node, ast.Return) and node.value is not None and context.is_tensor(node.value) and not isinstance(node.value, ast.Tuple):
        yield Change(ast.Return(_method(node.value, "detach")), "return the result .detach()ed")


def _drop_keyword(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    """A keyword argument left out (its default used instead). Not in a record built from
    keyword fields alone (``Estimate(t=..., p=..., ...)``): a field left out is a TypeError at
    once, a mistake nobody makes twice."""
    name = _call_name(node) if isinstance(node, ast.Call) else None
    if isinstance(node, ast.Call) and not (name and name[0].isupper() and not node.args):
        for index, keyword in enumerate(node.keywords):
            if keyword.arg is not None:
                keywords = [*node.keywords[:index], *node.keywords[index + 1:]]
                yield Change(ast.Call(node.func, node.args, keywords), f"drop '{keyword.arg}=...' from {_code(node.func, 30)}(...)")


def _confusable_call(node: ast.AST | None, context: RegionContext) -> Iterable[Change]:
    if not isinstance(node, ast.Call):
        return
    name = _call_name(node)
    other = CONFUSABLE.get(name or "")
    if other is None:
        return
    if isinstance(node.func, ast.Name):
        function: ast.expr = ast.Name(other, ast.Load())
    else:
        assert isinstance(node.func, ast.Attribute)
        function = ast.Attribute(node.func.value, other, ast.Load())
    yield Change(ast.Call(function, node.args, node.keywords), f"call '{other}' instead of '{name}'")


DOMAIN_OPERATORS = (
    Operator("memoise", DOMAIN, _memoise, whole_region=True),
    Operator("early-return", DOMAIN, _early_return, whole_region=True),
    Operator("generator-to-list", DOMAIN, _generator_to_list, whole_region=True),
    Operator("delete-statement", DOMAIN, _delete_statement),
    Operator("unwrap", DOMAIN, _unwrap),
    Operator("narrow-except", DOMAIN, _narrow_except),
    Operator("hard-code-size", DOMAIN, _hard_code_size),
    Operator("swap-arguments", DOMAIN, _swap_arguments),
    Operator("dtype", DOMAIN, _dtype),
    Operator("container", DOMAIN, _container),
    Operator("in-place", DOMAIN, _in_place),
    Operator("drop-call", DOMAIN, _drop_call),
    Operator("add-detach", DOMAIN, _add_detach),
    Operator("drop-keyword", DOMAIN, _drop_keyword),
    Operator("confusable-call", DOMAIN, _confusable_call),
)
