"""A static scan (AST) of the student files for what a course forbids or wants to look at.

Two layers. The allowlist (this module's constants: what the homework needs) flags, with the
line, anything else in a student file:

* an import of a module not in :data:`ALLOWED_MODULES` (``os``, ``io``, ``sys``, ``types``),
  or of a private name (``from minitorch.runtime import _observers``, ``torch._C``);
* a builtin not in :data:`ALLOWED_BUILTINS` (``compile``, ``vars``, ``globals``);
* a dunder attribute not in :data:`ORDINARY_DUNDERS` (``__closure__``, ``__dict__``) and the
  attributes of frames and cells (:data:`INTERNAL_ATTRIBUTES`: ``cell_contents``, ``f_locals``);
* a private attribute of an imported module (``torch._C``) and an assignment to an attribute
  of an imported module or class (``time.perf_counter = ...``, ``torch.Tensor.to = ...``,
  ``setattr(torch, ...)``), also where it is put back;
* a tool of an allowed module that rewrites how other code runs or what it returns
  (:data:`REWRITING`: tracing and profiling hooks, torch function modes and its operator
  registry, serialisation internals) and ``torch.load`` without ``weights_only=True``;
* assignments through an alias are resolved: ``_T = torch.Tensor; _T.x = ...``, a ``for`` or
  ``with`` target over an imported class, ``getattr(torch, "Tensor")``, ``type(x)``;
* a source encoding other than UTF-8 (a PEP 263 line such as ``# -*- coding: utf-7 -*-``
  makes the interpreter run what the scan would read as a comment), or bytes that are not UTF-8.

The rubric's ``[policy] forbidden`` (a denylist) lists dotted names. A file is flagged where it

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
import builtins
import re
from dataclasses import asdict, dataclass

from grader.bounded import TooSlow, bounded

UNSCANNABLE = "(not scanned)"  # the name of the finding for a file the scan could not read
FINDINGS_KEPT = 100  # findings a report lists (a file may repeat a forbidden name thousands of times)
# A student file's scan takes milliseconds; one built to make it slow is reported unscanned, not waited for.
SCAN_SECONDS = 10.0

# Modules (and their submodules) the two student files may import: torch as the spec uses it
# (the denylist still forbids torch.distributed.pipelining and torch.utils.checkpoint), the
# standard library's pure-computation modules, threads and queues for the Pipe, and the
# provided minitorch modules (public names only).
ALLOWED_MODULES = (
    "__future__", "torch", "math", "cmath", "itertools", "functools", "collections", "typing", "dataclasses",
    "threading", "queue", "enum", "abc", "contextlib", "operator", "heapq", "bisect", "numbers", "copy",
    "statistics", "fractions", "decimal", "time", "random", "warnings", "logging", "string", "minitorch",
)
ALLOWED_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "classmethod", "complex",
    "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "getattr", "hasattr", "hash", "hex",
    "id", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next", "object", "oct",
    "ord", "pow", "print", "property", "range", "repr", "reversed", "round", "set", "setattr", "slice", "sorted",
    "staticmethod", "str", "sum", "super", "tuple", "type", "zip", "NotImplemented", "Ellipsis", "__name__",
    "__file__", "__doc__", "aiter", "anext",
})
ORDINARY_DUNDERS = frozenset({
    "__init__", "__name__", "__qualname__", "__module__", "__doc__", "__class__", "__len__", "__iter__", "__next__",
    "__call__", "__enter__", "__exit__", "__repr__", "__str__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
    "__ge__", "__hash__", "__bool__", "__getitem__", "__setitem__", "__contains__", "__post_init__", "__all__",
    "__version__", "__add__", "__sub__", "__mul__", "__matmul__", "__truediv__", "__neg__", "__annotations__",
    "__future__",
})
# Attributes of frames, code, generators, tracebacks and cells: how code reaches another
# function's variables (the recorder's original collective read from its closure).
INTERNAL_ATTRIBUTES = frozenset({
    "cell_contents", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "gi_frame", "gi_code",
    "cr_frame", "ag_frame", "tb_frame", "tb_next", "co_code", "co_consts", "_current_frames", "_getframe",
})
# Inside the allowed modules, the tools that rewrite how other code runs or what it returns:
# tracing and profiling hooks, torch's function and dispatch modes and its operator registry,
# and serialisation internals (a pickle runs code when it is loaded). A use is flagged.
REWRITING = (
    "threading.settrace", "threading.setprofile", "threading.settrace_all_threads",
    "threading.setprofile_all_threads", "torch.overrides", "torch.library", "torch.profiler",
    "torch.autograd.profiler", "torch.serialization", "torch.utils.hooks", "torch.autograd.graph",
)
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


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

    def __init__(self, forbidden: tuple[str, ...], bound: frozenset[str] = frozenset()):
        self.modules = [f for f in forbidden if not f.startswith(".")]
        self.attributes = {f[1:] for f in forbidden if f.startswith(".")}
        self.aliases: dict[str, str] = {}  # local name -> the dotted name it was imported as, or is an alias of
        self.bound = bound  # every name the file binds (a local `open` is not the builtin)
        self.hits: list[tuple[int, str]] = []

    def scan_file(self, tree: ast.AST) -> None:
        """Scan a whole file: the names it binds first (a local ``open`` is not the builtin)."""
        self.bound = _bound_names(tree)
        self.scan(tree)

    def scan(self, tree: ast.AST) -> None:
        self._imports(tree)
        self._local_aliases(tree)
        stack = [tree]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Attribute):  # a whole chain at once: its links are not walked again
                base = self._visit_chain(node)
                if base is not None:
                    stack.append(base)
            elif self._visit(node):
                stack.extend(reversed(list(ast.iter_child_nodes(node))))

    def _imports(self, tree: ast.AST) -> None:
        """The names the file's imports bind, wherever the import is (the alias pass needs them)."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    self.aliases[local] = alias.name if alias.asname else local
            elif isinstance(node, ast.ImportFrom):
                module = ("minitorch." * bool(node.level)) + (node.module or "") if node.level else node.module or ""
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}" if module else alias.name

    def _local_aliases(self, tree: ast.AST) -> None:
        """Names bound to an imported module or class, or to a class found at run time, by an
        assignment (``_T = torch.Tensor``, ``T = type(x)``, ``T = getattr(torch, "Tensor")``, a walrus,
        tuple unpacking), a ``for`` target over a literal of them, or a ``with`` target whose
        context names one; repeated until nothing new is found (aliases of aliases)."""
        for _ in range(10):
            before = dict(self.aliases)
            for node in ast.walk(tree):
                for target, value in _bindings(node):
                    resolved = self._resolve(value)
                    if resolved is not None and target not in self.aliases:
                        self.aliases[target] = resolved
            if self.aliases == before:
                return

    def _resolve(self, node: ast.AST) -> str | None:
        """What ``node`` refers to when it is an imported name or a chain rooted at one, a
        literal ``getattr`` of one, or a class found at run time (``type(x)``, ``x.__class__``)."""
        if isinstance(node, ast.Call):
            function = _dotted(node.func)
            if function == "type" and len(node.args) == 1:
                return "type(...)"
            name = node.args[1].value if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) else None
            if function == "getattr" and isinstance(name, str):
                owner = self._resolve(node.args[0])
                return f"{owner}.{name}" if owner is not None else None
            return None
        if isinstance(node, ast.Attribute) and node.attr == "__class__":
            return "type(...)"
        if isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Tuple, ast.List)) and isinstance(node.slice, ast.Constant):
            items = node.value.elts
            index = node.slice.value
            return self._resolve(items[index]) if isinstance(index, int) and -len(items) <= index < len(items) else None
        return self._root_import(node) if isinstance(node, (ast.Name, ast.Attribute)) else None

    def _flag(self, node: ast.expr | ast.stmt, dotted: str) -> None:
        for name in self.modules:
            if _matches(dotted, name):
                self.hits.append((node.lineno, name))
                break
        for name in REWRITING:
            if _matches(dotted, name):
                self.hits.append((node.lineno, f"rewrites execution: {name}"))
                return

    def _visit(self, node: ast.AST) -> bool:
        """Note what ``node`` uses; whether its children still need a look."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._flag(node, alias.name)
                self._allow_module(node, alias.name)
            return False
        if isinstance(node, ast.ImportFrom):
            module = ("minitorch." * bool(node.level)) + (node.module or "") if node.level else node.module or ""
            self._allow_module(node, module.rstrip("."))
            for alias in node.names:
                full = f"{module}.{alias.name}" if module else alias.name
                self._flag(node, full)
                if _private(alias.name) and module != "__future__":
                    self.hits.append((node.lineno, f"private name {full}"))
            return False
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                self._check_assignment(target)
            return True
        if isinstance(node, ast.Name):
            if node.id not in self.aliases:  # an imported module's bare name was flagged at the import
                self._flag(node, node.id)
                self._allow_builtin(node)
            return False
        if isinstance(node, ast.Call):
            self._visit_call(node)
        return True

    def _allow_module(self, node: ast.stmt, module: str) -> None:
        if not any(_matches(module, allowed) for allowed in ALLOWED_MODULES):
            self.hits.append((node.lineno, f"module {module}"))
        elif any(_private(part) for part in module.split(".")[1:]):
            self.hits.append((node.lineno, f"private module {module}"))

    def _allow_builtin(self, node: ast.Name) -> None:
        name = node.id
        if name in self.bound or name in ALLOWED_BUILTINS or not hasattr(builtins, name):
            return
        value = getattr(builtins, name)
        if not (isinstance(value, type) and issubclass(value, BaseException)):  # raising ValueError is ordinary
            self.hits.append((node.lineno, f"builtin {name}"))

    def _allow_attribute(self, node: ast.Attribute, imported: bool) -> None:
        """An attribute name: dunders beyond the ordinary ones, frame and cell attributes, and
        (of an imported module or class) private names."""
        name = node.attr
        if name.startswith("__") and name.endswith("__") and name not in ORDINARY_DUNDERS:
            self.hits.append((node.lineno, f"attribute {name}"))
        elif name in INTERNAL_ATTRIBUTES:
            self.hits.append((node.lineno, f"attribute {name}"))
        elif imported and _private(name):
            self.hits.append((node.lineno, f"private attribute {name}"))

    def _root_import(self, node: ast.expr) -> str | None:
        """``torch.Tensor.to`` when ``node`` is an attribute chain rooted at an imported name."""
        dotted = _dotted(node)
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        return f"{self.aliases[root]}.{rest}".rstrip(".") if root in self.aliases else None

    def _check_assignment(self, target: ast.expr) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for item in target.elts:
                self._check_assignment(item)
        elif isinstance(target, ast.Starred):
            self._check_assignment(target.value)
        elif isinstance(target, ast.Attribute):
            dotted = self._root_import(target)
            if dotted is not None:
                self.hits.append((target.lineno, f"assigns {dotted}"))

    def _visit_call(self, node: ast.Call) -> None:
        function = _dotted(node.func)
        loader = self._root_import(node.func) if isinstance(node.func, (ast.Name, ast.Attribute)) else None
        if loader == "torch.load" and not any(
                k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords):
            self.hits.append((node.lineno, "torch.load without weights_only=True (a pickle runs code)"))
        if function in ("__import__", "importlib.import_module") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self._flag(node, first.value)
        if function in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
            owner, name = node.args[0], node.args[1]
            dotted = self._root_import(owner) if isinstance(owner, (ast.Name, ast.Attribute)) else None
            if function in ("setattr", "delattr") and dotted is not None:
                self.hits.append((node.lineno, f"assigns {dotted}.{getattr(name, 'value', '?')}"))
            elif function in ("setattr", "delattr") and not isinstance(name, ast.Constant):
                self.hits.append((node.lineno, f"{function} of a name built at run time"))
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                self._allow_attribute(ast.Attribute(value=owner, attr=name.value, lineno=node.lineno), dotted is not None)

    def _visit_chain(self, node: ast.Attribute) -> ast.expr | None:
        """Note an attribute chain (``a.b.c``) and each of its links, in one pass however long
        the chain; the node below its links that still needs a look (``f()`` of ``f().b``), if any."""
        links: list[ast.Attribute] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            links.append(base)
            base = base.value
        imported = isinstance(base, ast.Name) and base.id in self.aliases
        if imported:
            assert isinstance(base, ast.Name)
            self._flag(node, ".".join([self.aliases[base.id], *(link.attr for link in reversed(links))]))
        for link in links:
            if link.attr in self.attributes:
                self.hits.append((node.lineno if imported else link.lineno, "." + link.attr))
            self._allow_attribute(link, imported=imported)
        return None if imported else base


def _bindings(node: ast.AST) -> list[tuple[str, ast.AST]]:
    """``(name, value)`` pairs ``node`` binds that may make an alias: assignments (tuple
    unpacking pairwise), walruses, ``for`` targets over each item of a literal, and ``with``
    targets over the context expression or, for a call (``nullcontext(torch.Tensor)``), its arguments."""
    pairs: list[tuple[ast.AST, ast.AST]] = []
    if isinstance(node, ast.Assign):
        pairs = [(target, node.value) for target in node.targets]
    elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        pairs = [(node.target, node.value)]
    elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
        pairs = [(node.target, item) for item in node.iter.elts]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        context = node.context_expr
        values = [context, *context.args] if isinstance(context, ast.Call) else [context]
        pairs = [(node.optional_vars, value) for value in values]
    found: list[tuple[str, ast.AST]] = []
    for target, value in pairs:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            found.extend((t.id, v) for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name))
        elif isinstance(target, ast.Name):
            found.append((target.id, value))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _bound_names(tree: ast.AST) -> frozenset[str]:
    """Every name the file binds anywhere: assigned, defined, an argument, imported."""
    bound = set()
    for node in ast.walk(tree):  # iterative (a queue), however deep the tree
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return frozenset(bound)


def _encoding_findings(name: str, data: bytes) -> list[Finding]:
    """A PEP 263 coding line naming anything but UTF-8 (the interpreter would decode the file
    as another program than the one scanned), or bytes that are not UTF-8."""
    for number, line in enumerate(data.splitlines()[:2], start=1):
        declared = _CODING.match(line)
        if declared is not None:
            encoding = declared.group(1).decode("ascii", "replace").lower().replace("_", "-")
            if encoding not in ("utf-8", "utf8"):
                return [Finding(name, number, f"encoding {encoding}", line.decode("utf-8", "replace").strip()[:160])]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_number = data[:error.start].count(b"\n") + 1
        return [Finding(name, line_number, "encoding not UTF-8", f"byte {data[error.start]:#x} at offset {error.start}")]
    return []


def scan_source(name: str, source: bytes | str, forbidden: tuple[str, ...]) -> list[Finding]:
    """Findings in one student file, in line order, one per (line, entry). A file too deeply
    nested for Python's own parser gets one finding saying it could not be scanned."""
    data = source if isinstance(source, bytes) else source.encode("utf-8", "surrogatepass")
    encoding = _encoding_findings(name, data)
    text = data.decode("utf-8", errors="replace")
    try:
        tree = ast.parse(text, filename=name)
    except (SyntaxError, ValueError):
        return encoding  # the criteria report the error itself; nothing else here to review
    except (RecursionError, MemoryError) as error:  # "too complex to parse": nested too deep
        return [*encoding, Finding(name, 0, UNSCANNABLE, f"the file could not be scanned ({type(error).__name__})")]
    scanner = _Scanner(tuple(forbidden))
    try:
        bounded(lambda: scanner.scan_file(tree), SCAN_SECONDS)
    except TooSlow:
        return [*encoding, Finding(name, 0, UNSCANNABLE, f"the file could not be scanned within {SCAN_SECONDS:g} s")]
    lines = text.splitlines()
    seen, findings = set(), list(encoding)
    for line, entry in sorted(scanner.hits):
        if (line, entry) not in seen:
            seen.add((line, entry))
            code = lines[line - 1].strip()[:160] if 0 < line <= len(lines) else ""
            findings.append(Finding(name, line, entry, code))
    return findings


def scan(files: dict[str, bytes], forbidden: tuple[str, ...]) -> list[dict]:
    """Findings over every student file, as plain dicts for the JSON report."""
    return [asdict(f) for name in sorted(files) for f in scan_source(name, files[name], forbidden)]
