"""Hidden checks, one module per area (``pipeline``, ``tensor_parallel``, ``schedules``, ...).

Contract between a check module and the harness
-----------------------------------------------
A criterion in ``grader/rubric.toml`` names its check as ``"<module>:<name>"``. The module
``grader/checks/<module>.py`` then defines two functions:

``observe_<name>(seed: int, params: dict) -> observation``
    Runs in the isolated CHILD process, where ``minitorch.pipeline`` and
    ``minitorch.tensor_parallel`` are the submitted files and the provided modules are
    the grader's own copies. It drives the student's code and returns what it saw. The
    observation must be built only from ``dict``/``list``/``tuple``/``str``/``int``/
    ``float``/``bool``/``None`` and plain ``torch.Tensor`` (moved to CPU): it travels to
    the parent through ``torch.save`` and is read with ``torch.load(weights_only=True)``,
    which cannot execute code, so a hostile child cannot attack the parent through it.
    It may raise ``Fail(message)`` when a fact can only be judged in the child.

``judge_<name>(seed: int, params: dict, observation) -> dict | None``
    Runs in the PARENT. It computes the expected values itself from plain PyTorch
    (sequential stages, dense single-process layers), from the same ``seed``, and raises
    ``Fail(message)`` on the first mismatch. Returning normally means passed. A judge may
    return (or pass as ``Fail(message, details=...)``) a JSON-able dict of measurements,
    e.g. raw timings; the JSON report keeps it as the criterion's ``details``.

``seed`` is drawn fresh for every grading run; ``params`` is the criterion's
``params`` table from the rubric (empty dict when absent). Any other exception from
``observe_*`` (for example the stub's ``NotImplementedError``) is reported by the harness
as the criterion's failure with the student's frames of the traceback.

Failure messages speak to the student: what was expected and what was observed, in the
terms of the write-up (``wave 2: expected submit(0) submit(1) receive(0) ...; got ...``).
"""
import os
import sys
import threading
import time
import types


class Fail(Exception):
    """A student-facing reason why a criterion failed, with optional JSON-able ``details``."""

    def __init__(self, message: str, details: dict | None = None):
        super().__init__(message)
        self.details = details or {}


class Malformed(Fail):
    """The observation is not shaped as the check's observe function builds it: something in
    the child (the student's code) changed what came back. A failure, not a grader error."""


def _where(path: str) -> str:
    return f"{path} (the data your code's run handed back to the grader)"


class ObservedDict(dict):
    """A dict of the observation: a missing key is :class:`Malformed`, naming where."""

    path = "observation"

    def __missing__(self, key):
        raise Malformed(f"the grader could not read what your code produced: {_where(self.path)} has no {key!r}")

    def __iter__(self):  # keys iterated where the check expects a list of entries stay checked
        for key in dict.__iter__(self):
            yield observed(key, f"{self.path}, key {key!r},") if type(key) is str else key


class ObservedList(list):
    """A list of the observation: an index out of range is :class:`Malformed`, naming where."""

    path = "observation"

    def __getitem__(self, index):
        try:
            return super().__getitem__(index)
        except IndexError:
            raise Malformed(
                f"the grader could not read what your code produced: {_where(self.path)} has {len(self)} "
                f"entries, no entry {index}"
            ) from None
        except TypeError:
            raise Malformed(
                f"the grader could not read what your code produced: {_where(self.path)} is a list where "
                f"the grader expected a mapping (looked up {index!r})"
            ) from None


class ObservedStr(str):
    """A string of the observation: used as a mapping, a list or a tensor, it is
    :class:`Malformed` (a string where the check's observe function puts something else)."""

    path = "observation"

    def __getitem__(self, index):
        if isinstance(index, (int, slice)):
            return str.__getitem__(self, index)
        raise Malformed(f"the grader could not read what your code produced: {_where(self.path)} is a string "
                        f"({str(self)[:40]!r}) where the grader expected a mapping")

    def __getattr__(self, name):
        raise Malformed(f"the grader could not read what your code produced: {_where(self.path)} is a string "
                        f"({str(self)[:40]!r}) where the grader expected a tensor or an object with .{name}")


def observed(value, path: str = "observation"):
    """``value`` (an observation, plain data) with dicts and lists that fail as
    :class:`Malformed` instead of KeyError / IndexError, so a judge given data of the wrong
    shape fails the criterion with a reason rather than crashing as a grader error."""
    wrapped: ObservedDict | ObservedList | ObservedStr
    if type(value) is dict:
        wrapped = ObservedDict({key: observed(item, f"{path}[{key!r}]") for key, item in value.items()})
    elif type(value) is list:
        wrapped = ObservedList(observed(item, f"{path}[{index}]") for index, item in enumerate(value))
    elif type(value) is str:
        wrapped = ObservedStr(value)
    else:
        return value
    wrapped.path = path
    return wrapped


def expect_tensor(value, what: str):
    """``value`` if it is a tensor, else :class:`Malformed` saying what came back instead."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise Malformed(f"{what}: your code returned {_kind(value)} where a tensor was expected")
    return value


def _kind(value) -> str:
    if value is None:
        return "None"
    text = repr(value)
    return f"a {type(value).__name__} ({text[:60] + '...' if len(text) > 60 else text})"



def student_tensor(value, what: str):
    """A plain ``torch.Tensor`` view of ``value``, something the student's code returned, made
    without running any method of it: a Tensor subclass's overrides (``detach``, ``__eq__``,
    ``__torch_function__``) never see the grader's observation. It shares storage and autograd
    history with ``value``. Anything but a tensor is :class:`Fail`, naming ``what``."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise Fail(f"{what}: your code returned {_kind(value)} where a tensor was expected")
    if type(value) is torch.Tensor:
        return value
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor.as_subclass(value, torch.Tensor)


def _as_plain_case(case):
    if isinstance(case, (list, tuple)):
        return tuple(_as_plain_case(item) for item in case)
    if isinstance(case, dict):
        return tuple(sorted((str(key), _as_plain_case(dict.__getitem__(case, key))) for key in dict.keys(case)))
    return str(case) if isinstance(case, str) else case


def expect_cases(entries, asked: list, what: str, key: str = "case") -> list:
    """``entries``, one per case, after checking that they are exactly the cases the parent
    asked for, in order: entry ``i`` is a mapping whose ``key`` equals ``asked[i]`` (lists and
    tuples compare alike). A judge calls this before it judges any value, so an observation
    that leaves out, adds, reorders or relabels cases is :class:`Malformed`, never judged on
    the cases it chose to send."""
    if not isinstance(entries, list):
        raise Malformed(f"{what}: the grader could not read what your code produced: "
                        f"{_where(getattr(entries, 'path', 'observation'))} is {_kind(entries)}, not a list of cases")
    if len(entries) != len(asked):
        raise Malformed(f"{what}: the grader asked for {len(asked)} cases and got {len(entries)} back "
                        f"({_where(getattr(entries, 'path', 'observation'))})")
    for index, (entry, case) in enumerate(zip(entries, asked)):
        if not isinstance(entry, dict) or key not in dict.keys(entry):
            raise Malformed(f"{what}: case {index} came back without its {key!r} "
                            f"({_where(getattr(entries, 'path', 'observation'))})")
        if _as_plain_case(dict.__getitem__(entry, key)) != _as_plain_case(case):
            raise Malformed(f"{what}: case {index} came back as {dict.__getitem__(entry, key)!r}, "
                            f"but the grader asked for {case!r}")
    return entries


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
# Names written on a watched module while the student's code ran (see :func:`record_writes`).
WRITES: list[str] = []
# What the checks rely on in a child and in every rank it forks: (name, object) whose every
# attribute must keep its identity; torch's comparison functions; the thread functions.
WATCHED_TORCH = ("allclose", "isclose", "equal", "testing.assert_close", "save", "load")
WATCHED_THREADING = ("current_thread", "get_ident", "Thread", "Lock", "Event")
# Modules a write to is recorded (a function replaced and put back between two snapshots).
RECORDED_MODULES = ("time", "threading", "torch", "torch.testing", "minitorch")


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


def _namespace_ids(prefix: str, namespace, seen: dict, contents: bool = False) -> None:
    """Every attribute of a module, or of a class as its instances see it (through its bases:
    ``torch.Tensor.to = ...`` shadows ``TensorBase.to``, which is what the checks call);
    with ``contents``, also what its containers hold."""
    found: dict = {}
    for scope in reversed(namespace.__mro__) if isinstance(namespace, type) else (namespace,):
        found.update(vars(scope))
    for attribute, value in found.items():
        seen[f"{prefix}.{attribute}"] = id(value)
        if contents and _content(value) is not None:
            seen[f"{prefix}.{attribute}[...]"] = _content(value)


def identities(watched: dict[str, types.ModuleType]) -> dict[str, object]:
    """What the grader relies on, by identity: the modules of ``watched`` (the grader's and
    the provided ones: their attributes, their classes' attributes, and for the provided
    ones what their containers hold), ``sys.modules``'s entries for them, torch's comparison
    functions, the tensor methods, the clocks, the threading functions that name threads, the
    builtins, and how many writes to watched modules were recorded."""
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
        seen[f"torch.{path}"] = id(_lookup(torch, path))
    for prefix, namespace in (("torch.Tensor", torch.Tensor), ("time", time)):
        _namespace_ids(prefix, namespace, seen)
    for name in WATCHED_THREADING:
        seen[f"threading.{name}"] = id(getattr(threading, name, None))
    _namespace_ids("builtins", builtins, seen)
    seen["(writes to watched modules)"] = len(WRITES)
    return seen


def changed(before: dict[str, object], now: dict[str, object]) -> list[str]:
    """The names whose identity differs between two :func:`identities`, and the modules'
    attributes written in between (even if put back)."""
    names = sorted(name for name, identity in before.items() if now.get(name) != identity and not name.startswith("("))
    mark = before.get("(writes to watched modules)", 0)
    written = WRITES[mark if isinstance(mark, int) else 0:]
    return names + [f"{name} (written)" for name in dict.fromkeys(written) if name not in names]


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
            WRITES.append(qualified)
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if not _by_grader():
            WRITES.append(f"{self.__name__}.{name}")
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
            WRITES.append(f"{self.name} (changed by {method})")
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
    and every change to the lists the provided ones hold (each replaced by a
    :class:`_RecordedList` with the same items, before anything looked at it)."""
    global _TRUSTED_FOLDERS
    import torch

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
    """The values of ranks run with :func:`in_every_rank`; Fail saying what was replaced, with
    ``details["tampered"]`` (the child reports it as tampering, for review), when a rank
    replaced what the grader relies on."""
    values = []
    for rank, result in enumerate(results):
        if "tampered" in result:
            names = ", ".join(result["tampered"][:5])
            raise Fail(f"rank {rank}: your code replaced part of the grader or of torch while it ran ({names})",
                       details={"tampered": [f"rank {rank}: {name}" for name in result["tampered"]]})
        values.append(result["value"])
    return values
