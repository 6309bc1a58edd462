"""The CHILD side's toolkit: what observe functions use while the student's code runs.

It records, it never judges: no message, no expected value, no threshold (those live in the
parent, see :mod:`grader.checks.judging`). What cannot be observed as a check needs is raised as
:class:`Unusable` or :class:`Tampered`, with the facts only; the child reports them and the
parent words the failure.
"""
from __future__ import annotations

import operator
import os
import sys
import threading
import time
import types


class Unusable(Exception):
    """What the student's code handed back cannot be observed as the check needs it: ``what``
    (the check's name for it), ``found`` (a short description of the value) and ``expected``
    (what the check needed, e.g. "a tensor")."""

    def __init__(self, what: str, found: str, expected: str):
        super().__init__(f"{what}: your code returned {found} where {expected} was expected")
        self.what, self.found, self.expected = what, found, expected


class Tampered(Exception):
    """The student's code replaced what the grader relies on, in a process the child's own
    check does not cover (a forked rank): ``names`` says what."""

    def __init__(self, names: list[str]):
        super().__init__(f"your code replaced part of the grader or of torch while it ran ({', '.join(names[:5])})")
        self.names = names


def describe(value) -> str:
    """A short description of a value the student's code returned (its kind and start)."""
    if value is None:
        return "None"
    text, kind = repr(value), type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return f"{article} {kind} ({text[:60] + '...' if len(text) > 60 else text})"


def integer_value(value) -> int | None:
    """``value`` as an int when it is an integer of any type (3, 3.0, NumPy's 3, a 0-d torch integer), else None: the
    value is judged by one criterion, the type (recorded apart) by another."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    try:
        return operator.index(value)
    except TypeError:
        return None


def student_tensor(value, what: str):
    """A plain ``torch.Tensor`` view of ``value``, something the student's code returned, made
    without running any method of it: a Tensor subclass's overrides (``detach``, ``__eq__``,
    ``__torch_function__``) never see the grader's observation. It shares storage and autograd
    history with ``value``. Anything but a tensor is :class:`Unusable`, naming ``what``."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise Unusable(what, describe(value), "a tensor")
    if type(value) is torch.Tensor:
        return value
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor.as_subclass(value, torch.Tensor)


# ---------------------------------------------------------------------------------------
# Integrity: what the student's code may not change while the grader observes it
# ---------------------------------------------------------------------------------------
# Captured when this module is imported: in the grader's forkserver, before any student code
# exists. A check that calls ``trusted.perf_counter()`` gets the real clock whatever the
# student's code did to ``time.perf_counter`` (replaced, or replaced and put back).
trusted = types.SimpleNamespace(
    perf_counter=time.perf_counter, monotonic=time.monotonic, sleep=time.sleep, time=time.time,
    current_thread=threading.current_thread, get_ident=threading.get_ident, Thread=threading.Thread,
    Lock=threading.Lock, Event=threading.Event,
)
# The provided modules as the child imported them before the student's code ran (filled by the
# child): ``provided("minitorch.runtime")`` is the grader's copy even if the student's code
# rebound ``minitorch.runtime`` or replaced ``sys.modules["minitorch.runtime"]``.
_PROVIDED: dict[str, types.ModuleType] = {}
# The grader's modules and the provided ones, as the child holds them (filled by the child).
_WATCHED: dict[str, types.ModuleType] = {}
# Names written on a watched module while the student's code ran, and the tools that rewrite
# execution it installed (see :func:`record_writes`); and how many were recorded, apart: code
# that empties or edits the list cannot make the two agree again without knowing of both.
WRITES: list[str] = []
_RECORDED = 0
# What the checks rely on in a child and in every rank it forks: (name, object) whose every
# attribute must keep its identity; torch's comparison functions; the thread functions.
WATCHED_TORCH = ("allclose", "isclose", "equal", "testing.assert_close", "save", "load")
WATCHED_THREADING = ("current_thread", "get_ident", "Thread", "Lock", "Event")
# Modules a write to is recorded (a function replaced and put back between two snapshots); json's
# are what the child's report is encoded with (see grader.result_file).
RECORDED_MODULES = ("time", "threading", "torch", "torch.testing", "minitorch", "json", "json.encoder")
# Audit events of the tools that rewrite how other code runs: tracing and profiling hooks (a
# tracer can jump over a grader's line or rewrite its variables). Python raises them in each
# thread that installs a hook, threads started while ``threading.settrace``'s hook is set
# included, and an audit hook cannot be taken off: a hook set and removed again is seen.
REWRITING_EVENTS = frozenset({"sys.settrace", "sys.setprofile", "sys._settraceallthreads",
                              "sys._setprofileallthreads", "sys.monitoring.register_callback"})


def _record(name: str) -> None:
    """Note ``name`` (a written attribute, a hook installed) for :func:`changed`."""
    global _RECORDED
    _RECORDED += 1
    WRITES.append(name)


def _audited(event: str, arguments: tuple) -> None:
    """The audit hook of :func:`record_writes`: a tracing or profiling hook installed."""
    if event in REWRITING_EVENTS:
        _record(f"{event} (a tracing or profiling hook was installed)")


def provided(name: str) -> types.ModuleType:
    """The provided module ``name`` (``"minitorch.runtime"``) as imported before the student's
    code ran; in the parent (no child) the one of ``sys.modules``."""
    return _PROVIDED.get(name) or sys.modules[name]


def _lookup(root, path: str):
    for name in path.split("."):
        root = getattr(root, name, None)
    return root


def _content(value) -> object:
    """The identities of a container's items (an observer list keeps its identity when the
    grader's callback in it is swapped for another); None for anything else."""
    if type(value) in (list, tuple, set, frozenset):
        return tuple(sorted(id(item) for item in value))
    if type(value) is dict:
        return tuple(sorted((id(key), id(item)) for key, item in value.items()))
    return None


def _function_parts(value) -> tuple[int, int, int] | None:
    """The identities of what a Python function runs (its code, its defaults): a function whose
    code object is swapped keeps its own identity. None for anything else."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if type(value) is not types.FunctionType:
        return None
    return id(value.__code__), id(value.__defaults__), id(value.__kwdefaults__)


def _namespace_ids(prefix: str, namespace, seen: dict, contents: bool = False) -> None:
    """Every attribute of a module, or of a class as its instances see it (through its bases:
    ``torch.Tensor.to = ...`` shadows ``TensorBase.to``, which is what the checks call), and
    what each Python function among them runs; with ``contents``, also what its containers hold."""
    found: dict = {}
    for scope in reversed(namespace.__mro__) if isinstance(namespace, type) else (namespace,):
        found.update(vars(scope))
    for attribute, value in found.items():
        seen[f"{prefix}.{attribute}"] = id(value)
        parts = _function_parts(value)
        if parts is not None:
            seen[f"{prefix}.{attribute}.__code__"] = parts
        if contents and _content(value) is not None:
            seen[f"{prefix}.{attribute}[...]"] = _content(value)


def identities(watched: dict[str, types.ModuleType]) -> dict[str, object]:
    """What the grader relies on, by identity: the modules of ``watched`` (the grader's and
    the provided ones: their attributes, their classes' attributes, and for the provided
    ones what their containers hold), ``sys.modules``'s entries for them, torch's comparison
    functions, the tensor methods, the clocks, the threading functions that name threads, the
    builtins; the tracing and profiling hooks and torch's function and dispatch modes left on
    (a mode left on answers for every torch function: ``torch.equal`` that always agrees);
    and how many writes to watched modules were recorded."""
    import builtins

    import torch

    seen: dict[str, object] = {}
    for name, module in watched.items():
        contents = name.startswith("minitorch")
        _namespace_ids(name, module, seen, contents)
        seen[f"sys.modules[{name!r}]"] = id(sys.modules.get(name, module))
        for attribute, value in list(vars(module).items()):
            if isinstance(value, type) and value.__module__ == name:
                _namespace_ids(f"{name}.{attribute}", value, seen, contents)
    for path in WATCHED_TORCH:
        function = _lookup(torch, path)
        seen[f"torch.{path}"] = id(function)
        if _function_parts(function) is not None:
            seen[f"torch.{path}.__code__"] = _function_parts(function)
    for prefix, namespace in (("torch.Tensor", torch.Tensor), ("time", time)):
        _namespace_ids(prefix, namespace, seen)
    for name in WATCHED_THREADING:
        seen[f"threading.{name}"] = id(getattr(threading, name, None))
    _namespace_ids("builtins", builtins, seen)
    for name, hook in (("threading.settrace's hook", getattr(threading, "_trace_hook", None)),
                       ("threading.setprofile's hook", getattr(threading, "_profile_hook", None)),
                       ("sys.settrace's hook", sys.gettrace()), ("sys.setprofile's hook", sys.getprofile())):
        seen[name] = id(hook)
    seen["torch function modes left on"] = torch._C._len_torch_function_stack()
    seen["torch dispatch modes left on"] = torch._C._len_torch_dispatch_stack()
    seen["(writes to watched modules)"] = (len(WRITES), _RECORDED)
    return seen


def changed(before: dict[str, object], now: dict[str, object]) -> list[str]:
    """The names whose identity differs between two :func:`identities`, the modules'
    attributes written in between (even if put back) and the hooks installed, and whether
    the record of those was edited."""
    names = sorted(name for name, identity in before.items() if now.get(name) != identity and not name.startswith("("))
    mark = before.get("(writes to watched modules)")
    listed, counted = mark if isinstance(mark, tuple) else (0, 0)
    written = WRITES[listed:]
    if len(WRITES) - listed != _RECORDED - counted:
        names.append("the grader's record of writes to watched modules (edited)")
    return names + [name if "(" in name else f"{name} (written)" for name in dict.fromkeys(written) if name not in names]


GRADER_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Code whose writes to watched modules are not the student's: the grader's own (a check that
# makes torch.utils.checkpoint refuse while the student's code runs) and torch's (importing
# torch._dynamo wraps torch.manual_seed). Set by record_writes.
_TRUSTED_FOLDERS: tuple[str, ...] = (GRADER_FOLDER + os.sep,)


def _by_grader() -> bool:
    """Whether the code writing a watched module's attribute (two frames up) is trusted code."""
    return sys._getframe(2).f_code.co_filename.startswith(_TRUSTED_FOLDERS)


class _RecordedModule(types.ModuleType):
    """A watched module's class while the student's code runs: every attribute written or
    deleted from outside the module is recorded (its own ``global`` statements are not: they
    do not go through here), except by the grader's own code and an import binding a
    submodule to its package."""

    def __setattr__(self, name: str, value) -> None:
        qualified = f"{self.__name__}.{name}"
        is_submodule = isinstance(value, types.ModuleType) and value.__name__ == qualified
        if not (is_submodule and (qualified not in _PROVIDED or _PROVIDED[qualified] is value)) and not _by_grader():
            _record(qualified)
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if not _by_grader():
            _record(f"{self.__name__}.{name}")
        super().__delattr__(name)


def _by_provided_code() -> bool:
    """Whether the code changing a watched list (two frames up) is the grader's or a provided
    module's (``minitorch.runtime.observe`` adding the grader's callback)."""
    filename = sys._getframe(2).f_code.co_filename
    provided_files = {getattr(module, "__file__", None) for module in _PROVIDED.values()}
    return filename.startswith(_TRUSTED_FOLDERS) or filename in provided_files


def _recording(method: str):
    def recorded(self, *args, **kwargs):
        if not _by_provided_code():
            _record(f"{self.name} (changed by {method})")
        return getattr(list, method)(self, *args, **kwargs)

    recorded.__name__ = method
    return recorded


class _RecordedList(list):
    """A provided module's list (the runtime's observers) while the student's code runs: every
    change made from outside the grader and the provided modules is recorded, even if undone."""

    name = "list"
    for _method in ("__setitem__", "__delitem__", "__iadd__", "append", "extend", "insert", "remove", "pop",
                    "clear", "sort", "reverse"):
        locals()[_method] = _recording(_method)
    del _method


def record_writes(modules: list[types.ModuleType]) -> None:
    """Record every write to these modules from now on (in this process and those it forks),
    every change to the lists the provided ones hold (each replaced by a
    :class:`_RecordedList` with the same items, before anything looked at it), and every
    tracing or profiling hook installed (:data:`REWRITING_EVENTS`, through an audit hook; not
    where the grader itself runs under a tracer, a coverage tool's, which every thread installs)."""
    global _TRUSTED_FOLDERS
    import torch

    hooks = (getattr(threading, "_trace_hook", None), getattr(threading, "_profile_hook", None), sys.gettrace(),
             sys.getprofile())
    if hooks == (None, None, None, None):
        sys.addaudithook(_audited)

    _TRUSTED_FOLDERS = (GRADER_FOLDER + os.sep, os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
    for module in modules:
        if module in _PROVIDED.values():
            for attribute, value in list(vars(module).items()):
                if type(value) is list:
                    recorded = _RecordedList(value)
                    recorded.name = f"{module.__name__}.{attribute}"
                    vars(module)[attribute] = recorded
        if type(module) is types.ModuleType:
            module.__class__ = _RecordedModule


def refuse_pickles() -> None:
    """From now on ``torch.load`` in this process (and those it forks) loads weights only,
    whatever its caller asks: a pickle, which runs code when it is loaded, could carry code
    the policy scan never reads (``weights_only=False`` on a payload in a student's file).
    The grader's own loads (the launcher's rank results) already ask for weights only."""
    import torch
    import torch.serialization

    load = torch.serialization.load

    def weights_only_load(*args, **kwargs):
        kwargs["weights_only"] = True
        return load(*args, **kwargs)

    weights_only_load.__doc__ = load.__doc__
    torch.load = torch.serialization.load = weights_only_load


def in_every_rank(rank_fn):
    """``rank_fn`` checked in the rank process that runs it: the child's own tamper check
    never runs in the processes it forks, so this one compares :func:`identities` at the
    rank's start and end. Pass what ``launch`` returns through :func:`rank_values`."""
    watched = dict(_WATCHED)

    def checked(*args, **kwargs):
        before = identities(watched)
        value = rank_fn(*args, **kwargs)
        names = changed(before, identities(watched))
        return {"tampered": names[:20]} if names else {"value": value}

    return checked


def rank_values(results: list) -> list:
    """The values of ranks run with :func:`in_every_rank`; :class:`Tampered` naming what a
    rank replaced of what the grader relies on (the child reports it for review)."""
    values = []
    for rank, result in enumerate(results):
        if "tampered" in result:
            raise Tampered([f"rank {rank}: {name}" for name in result["tampered"]])
        values.append(result["value"])
    return values
