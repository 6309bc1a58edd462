"""The solution regions of the answer key, as the mutation operators see them.

:func:`kit.handout.find_regions` finds the regions (the kit's own parser: ``# BEGIN SOLUTION N.M``
... ``# END SOLUTION``); here each becomes a :class:`RegionContext`: its problem, the function it
is the body of, its statements, and the little the operators need to know about types (which
names hold tensors), so that tensor-only operators (in place, dtype, ``.detach()``) are not
spent on ints.
"""
from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field

from kit.handout import Region, find_regions

# Calls on a tensor that return something other than a tensor.
NOT_TENSOR_METHODS = frozenset({
    "size", "dim", "numel", "item", "tolist", "chunk", "split", "unbind", "element_size", "is_contiguous",
    "data_ptr", "parameters", "named_parameters", "stride", "nelement",
})
# torch functions that return something other than a tensor.
NOT_TENSOR_TORCH = frozenset({
    "split", "chunk", "unbind", "device", "get_default_dtype", "is_tensor", "is_grad_enabled", "Generator",
})
TENSOR_ATTRIBUTES = frozenset({"weight", "bias", "grad", "data", "T"})
TENSOR_ANNOTATIONS = frozenset({"Tensor", "torch.Tensor"})


@dataclass
class RegionContext:
    """One solution region and what the operators may ask about it."""

    file: str  # the student file's name, e.g. "pipeline.py"
    problem: str
    qualname: str  # the function whose body the region is, e.g. "Pipe.forward"
    function: ast.FunctionDef
    statements: list[ast.stmt]  # the region's statements (the function's body after its docstring)
    source: str  # the whole file
    region: Region
    tensor_functions: frozenset[str] = frozenset()  # functions of the file annotated to return a tensor
    tensor_names: set[str] = field(default_factory=set)

    @property
    def id(self) -> str:
        """``2.2:Pipe.forward``: stable while the function keeps its name."""
        return f"{self.problem}:{self.qualname}"

    @property
    def parameters(self) -> list[ast.arg]:
        arguments = self.function.args
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        return every + [a for a in (arguments.vararg, arguments.kwarg) if a is not None]

    @property
    def is_autograd(self) -> bool:
        """A static method of a ``torch.autograd.Function`` (its first parameter is ``ctx``)."""
        arguments = self.function.args.args
        return bool(arguments) and arguments[0].arg == "ctx"

    @property
    def is_generator(self) -> bool:
        return any(isinstance(node, (ast.Yield, ast.YieldFrom)) for node in _own_nodes(self.statements))

    @property
    def returns_value(self) -> bool:
        return any(isinstance(node, ast.Return) and node.value is not None for node in _own_nodes(self.statements))

    def annotation(self) -> str:
        return ast.unparse(self.function.returns) if self.function.returns is not None else ""

    def returns_tensor(self) -> bool:
        return self.annotation() in TENSOR_ANNOTATIONS or (self.is_autograd and self.function.name == "forward")

    def is_tensor(self, node: ast.AST | None) -> bool:
        """Whether ``node`` evaluates to a tensor, as far as a look at the region can tell."""
        return _tensor_like(node, self.tensor_names, self.tensor_functions)

    @functools.cached_property
    def lines(self) -> list[str]:
        return self.source.splitlines()

    def line_of(self, node: ast.AST) -> str:
        """The first line of ``node`` in the file, stripped (for descriptions)."""
        return self.lines[node.lineno - 1].strip()  # type: ignore[attr-defined]

    @functools.cached_property
    def self_updates(self) -> frozenset[int]:
        """The ids of the ``x op y`` of every ``x = x op y`` (``x`` a plain name) in the region."""
        return frozenset(
            id(n.value) for n in ast.walk(ast.Module(body=self.statements, type_ignores=[]))
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.BinOp) and isinstance(n.value.left, ast.Name) and n.value.left.id == n.targets[0].id)


def _own_nodes(statements: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of ``statements`` outside nested functions and lambdas."""
    stack: list[ast.AST] = list(statements)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def _tensor_like(node: ast.AST | None, names: set[str], tensor_functions: frozenset[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute):
        return node.attr in TENSOR_ATTRIBUTES
    if isinstance(node, ast.Subscript):
        return _tensor_like(node.value, names, tensor_functions)
    if isinstance(node, ast.BinOp):
        return _tensor_like(node.left, names, tensor_functions) or _tensor_like(node.right, names, tensor_functions)
    if isinstance(node, ast.UnaryOp):
        return _tensor_like(node.operand, names, tensor_functions)
    if isinstance(node, ast.IfExp):
        return _tensor_like(node.body, names, tensor_functions) or _tensor_like(node.orelse, names, tensor_functions)
    if isinstance(node, ast.Call):
        function = node.func
        if isinstance(function, ast.Name):
            return function.id in tensor_functions
        if isinstance(function, ast.Attribute):
            root = function.value
            if isinstance(root, ast.Name) and root.id in ("torch", "F"):
                return function.attr not in NOT_TENSOR_TORCH
            if isinstance(root, ast.Attribute) and root.attr == "apply":
                return True
            return function.attr not in NOT_TENSOR_METHODS and _tensor_like(root, names, tensor_functions)
    return False


def _tensor_names(context: RegionContext) -> set[str]:
    """Names that hold tensors: tensor-annotated parameters (every parameter but ``ctx`` of an
    autograd Function's method), then, in order, names assigned a tensor and loop variables
    over ``.parameters()``."""
    names = {a.arg for a in context.parameters
             if (a.annotation is not None and ast.unparse(a.annotation) in TENSOR_ANNOTATIONS)
             or (context.is_autograd and a.annotation is None and a.arg != "ctx")}
    for node in ast.walk(ast.Module(body=context.statements, type_ignores=[])):
        if isinstance(node, ast.Assign) and _tensor_like(node.value, names, context.tensor_functions):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Call) \
                and isinstance(node.iter.func, ast.Attribute) and node.iter.func.attr == "parameters":
            names.add(node.target.id)
    return names


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef]]:
    """Every function of ``tree`` with its qualified name (``Pipe.forward``)."""
    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef):
                yield prefix + child.name, child
                yield from visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, prefix + child.name + ".")
            else:
                yield from visit(child, prefix)

    return visit(tree, "")


def region_contexts(source: str, file: str) -> list[RegionContext]:
    """The regions of the student file ``file`` (its text ``source``), in file order.

    Raises:
        kit.handout.HandoutError: malformed markers (the kit refuses them too).
        ValueError: a region that is not inside a function.
    """
    tree = ast.parse(source, file)
    functions = list(_functions(tree))
    tensor_functions = frozenset(name for name, f in functions
                                 if f.returns is not None and ast.unparse(f.returns) in TENSOR_ANNOTATIONS)
    contexts = []
    for region in find_regions(source, file):
        enclosing = [(name, f) for name, f in functions if f.lineno < region.begin <= (f.end_lineno or f.lineno)]
        if not enclosing:
            raise ValueError(f"{file}:{region.begin}: solution region {region.problem} is not inside a function")
        qualname, function = max(enclosing, key=lambda item: item[1].lineno)
        statements = [s for s in function.body if region.begin < s.lineno < region.end]
        context = RegionContext(file, region.problem, qualname, function, statements, source, region, tensor_functions)
        context.tensor_names = _tensor_names(context)
        contexts.append(context)
    return contexts
