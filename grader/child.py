"""What runs inside one criterion's child process (forked from the grader's forkserver, or
started by bubblewrap: see :mod:`grader.sandbox`).

The child confines itself before any student code runs, in this order:

1. :func:`grader.sandbox.confine.open_channel`: its own session, stdin from /dev/null,
   output captured, the result file and the "started" marker open, no other descriptor;
2. the check module is imported (normally preloaded), then ``sys.path`` is rebuilt with the
   disposable tree first and without any folder that holds another ``minitorch`` (the
   repository root, where the answer key lives), and every ``minitorch*`` module is purged,
   so ``import minitorch.pipeline`` finds the submitted file and nothing else;
3. :func:`grader.sandbox.confine.enter`: limits, the jail, the leased uid, no keyrings, a
   private working folder and an environment of only what the harness passed; and
   ``torch.load`` made to load weights only (:func:`grader.checks.recording.refuse_pickles`);
4. the grader's modules are taken out of ``sys.modules`` (the student's code cannot look up
   the hidden checks there), the provided modules the checks rely on are imported and handed
   to the checks' toolkit, writes to the watched modules start being recorded, what
   reporting needs is made ready (the encoder warmed up, descriptors reserved), and the
   objects the checks trust are noted (see :func:`grader.checks.recording.identities`); then the
   marker says "started": any grader error reported after this point is forged.

Then ``observe_<name>(seed, params)`` runs and its observation (or what went wrong) is
written as JSON plus safetensors (:mod:`grader.result_file`: no pickle, nothing that runs
code or unfolds when read); the parent reads it back and is the only one that judges and
writes results. Reporting uses the child's own streams and descriptors, never the
student's ``sys.stdout``.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import random
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import torch

from grader.checks import recording as toolkit
from grader.checks.recording import Tampered, Unusable
from grader.protocol import Kind
from grader.result_file import encode
from grader.sandbox import confine
from grader.sandbox.confine import flush

# Provided modules the student files import and the checks rely on (their attributes, their
# classes' attributes and what their containers hold): imported from the tree before the
# student's code runs, so a replacement shows (see grader.checks.recording.identities), and so code that
# exhausts the descriptors at import cannot stop the student file's own imports.
WATCHED_PROVIDED = ("minitorch", "minitorch.runtime", "minitorch.schedules", "minitorch.distributed",
                    "minitorch.cost_model", "minitorch.executor")
RESERVED_DESCRIPTORS = 16  # kept open while the student's code runs, closed for reporting
_write = os.write  # the child's own, whatever the student's code does to os.write


@dataclass(frozen=True)
class Job:
    """Everything a child needs; pickled to the child."""

    criterion: str
    module: str
    name: str
    seed: int
    params: dict
    tree: str
    student_files: tuple[str, ...]
    confinement: confine.Confinement


def ping() -> None:
    """A child that does nothing: starts the forkserver and measures a child's cost."""
    os._exit(0)


def _isolate_imports(tree: str) -> None:
    """Only the tree provides ``minitorch``: drop every other sys.path entry that holds one."""
    tree = os.path.realpath(tree)

    def provides_minitorch(entry: str) -> bool:
        folder = os.path.realpath(entry or os.getcwd())
        return folder != tree and (
            os.path.isdir(os.path.join(folder, "minitorch")) or os.path.isfile(os.path.join(folder, "minitorch.py"))
        )

    sys.path[:] = [tree] + [entry for entry in sys.path if entry not in ("", ".") and not provides_minitorch(entry)]
    for name in list(sys.modules):
        if name == "minitorch" or name.startswith("minitorch."):
            del sys.modules[name]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    sys.dont_write_bytecode = True
    spec = importlib.util.find_spec("minitorch")
    origin = os.path.realpath(spec.origin) if spec is not None and spec.origin else None
    if origin is None or not origin.startswith(tree + os.sep):
        raise RuntimeError(f"grader isolation broken: minitorch resolves to {origin}, not the tree {tree}")


def _student_traceback(error: BaseException, student_files: tuple[str, ...]) -> str:
    """The traceback of ``error`` with only the frames from the student's files, then the
    exception line (``ValueError: ...``)."""
    files = {os.path.realpath(path): os.path.basename(path) for path in student_files}
    lines = []
    for frame in traceback.extract_tb(error.__traceback__):
        name = files.get(os.path.realpath(frame.filename))
        if name is not None:
            lines.append(f'  File "{name}", line {frame.lineno}, in {frame.name}')
            if frame.line:
                lines.append(f"    {frame.line.strip()}")
    lines.extend(line.rstrip("\n") for line in traceback.format_exception_only(type(error), error))
    return "\n".join(lines)


class NotPlain(TypeError):
    """An observation holds something other than plain data."""


def plain_copy(value, path: str = "observation"):
    """``value`` rebuilt from plain containers, numbers, strings and plain CPU tensors;
    NotPlain for anything else (the report format cannot hold it: see grader.result_file)."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (list, tuple):
        items = [plain_copy(item, f"{path}[{index}]") for index, item in enumerate(value)]
        return items if type(value) is list else tuple(items)
    if type(value) is dict:
        if not all(type(key) in (str, int) for key in value):
            raise NotPlain(f"{path} has a key that is not a str or int")
        return {key: plain_copy(item, f"{path}[{key!r}]") for key, item in value.items()}
    if type(value) is torch.Tensor or type(value) is torch.nn.Parameter:
        return value.detach().cpu().clone().as_subclass(torch.Tensor)
    raise NotPlain(f"{path} is a {type(value).__module__}.{type(value).__qualname__}, not plain data")


class _Reporter:
    """Writes the child's one envelope whatever the student's code did to the process.

    Made before the student's code runs: the encoder is warmed up (on a tensor, so that
    nothing is imported later, when descriptors may be scarce), a fallback envelope is encoded in advance, and
    a few descriptors are reserved and given back only for reporting (a traceback reads the
    student's source), so code that opens descriptors up to the limit does not silence the
    child. It flushes the child's own streams, never the student's ``sys.stdout``.
    """

    def __init__(self, fd: int, streams: tuple):
        self.fd, self.streams = fd, streams
        encode({"kind": Kind.OBSERVATION.value, "observation": (torch.zeros(1), 1.0, {1: None})})
        self.fallback = encode({"kind": Kind.GARBAGE.value, "message": (
            "the grader could not save what your code's run produced (it could not be serialised)")})
        self.reserved = [os.open(os.devnull, os.O_RDONLY) for _ in range(RESERVED_DESCRIPTORS)]

    def release(self) -> None:
        """Give the reserved descriptors back (before building the envelope)."""
        for fd in self.reserved:
            try:
                os.close(fd)
            except OSError:
                pass
        self.reserved = []

    def write(self, envelope: dict) -> None:
        self.release()
        for stream in self.streams:
            flush(stream)
        try:
            data = memoryview(encode(envelope))
        except BaseException:  # noqa: BLE001 - whatever the envelope holds, say it could not be saved
            data = memoryview(self.fallback)
        try:
            while data:
                data = data[_write(self.fd, data):]
        except OSError:
            pass  # the student's code closed or replaced the descriptor: the parent sees no result


def main(job: Job) -> None:
    """The target of a criterion's child process; never returns."""
    channel = confine.open_channel(job.confinement)
    result_fd, started_fd, streams = channel.result_fd, channel.started_fd, channel.streams
    reporter = None
    try:
        observe = getattr(importlib.import_module(job.module), "observe_" + job.name)
        _isolate_imports(job.tree)
        confine.enter(job.confinement)
        toolkit.refuse_pickles()
        watched = _watched_modules()
        reporter = _Reporter(result_fd, streams)
        torch.manual_seed(job.seed)
        random.seed(job.seed)
        before = toolkit.identities(watched)
    except BaseException as error:
        failure = {"kind": Kind.GRADER_ERROR.value, "message": "".join(traceback.format_exception(error))}
        (reporter or _Reporter(result_fd, streams)).write(failure)
        os._exit(0)
    _write(started_fd, b"started")  # from here on the student's code runs: it cannot un-write this
    os.close(started_fd)
    try:
        envelope = _observe(observe, job, reporter)
        changed = toolkit.changed(before, toolkit.identities(watched))
        if envelope.get("tampered"):  # a rank's own check (see grader.checks.recording.in_every_rank)
            changed = [*map(str, envelope["tampered"]), *changed]  # type: ignore[call-overload]
        if changed:
            envelope["tampered"] = changed[:20]
    except BaseException as error:  # noqa: BLE001 - e.g. a RecursionError the student's data caused
        envelope = {"kind": Kind.GARBAGE.value, "message": f"the grader could not handle what your code produced ({type(error).__name__})"}
    reporter.write(envelope)
    os._exit(0)


def _watched_modules() -> dict[str, Any]:
    """The grader's modules (taken out of ``sys.modules``, so the student's code cannot look
    the hidden checks up there; the child keeps them here) and the provided modules the
    checks rely on (imported now, from the tree, and handed to the checks' toolkit: see
    :func:`grader.checks.recording.provided`). From now on every write to a module of
    :data:`grader.checks.recording.RECORDED_MODULES` or a provided one is recorded. A check module
    that imports lazily must therefore import what it needs at its top."""
    grader = {name: module for name, module in sys.modules.items() if name == "grader" or name.startswith("grader.")}
    for name in grader:
        del sys.modules[name]
    provided = {name: importlib.import_module(name) for name in WATCHED_PROVIDED}
    toolkit._PROVIDED.update(provided)
    toolkit._WATCHED.update({**grader, **provided})
    toolkit.record_writes([*map(importlib.import_module, toolkit.RECORDED_MODULES), *provided.values()])
    return {**grader, **provided}


def _observe(observe, job: Job, reporter: _Reporter) -> dict[str, object]:
    """Run the check's observe function; what it saw, or what went wrong, as an envelope."""
    try:
        observation = observe(job.seed, dict(job.params))
    except Tampered as replaced:
        reporter.release()
        return {"kind": Kind.FAIL.value, "message": str(replaced), "tampered": [str(name) for name in replaced.names]}
    except Unusable as unusable:  # worded by the toolkit from the facts: nothing hidden
        reporter.release()
        return {"kind": Kind.FAIL.value, "message": str(unusable)}
    except BaseException as error:  # the student's code raised (SystemExit included)
        reporter.release()
        return _exception_envelope(error, job)
    reporter.release()
    try:
        return {"kind": Kind.OBSERVATION.value, "observation": plain_copy(observation)}
    except NotPlain as error:
        return {"kind": Kind.GARBAGE.value, "message": str(error)}


def _exception_envelope(error: BaseException, job: Job) -> dict:
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    return {
        "kind": Kind.EXCEPTION.value,
        "type": type(error).__name__,
        "module_not_found": missing if type(missing) is str else None,
        "not_implemented": isinstance(error, NotImplementedError),
        "message": _text_of(error)[:2000],
        "traceback": _student_traceback(error, job.student_files)[-6000:],
    }


def _text_of(error: BaseException) -> str:
    """``str(error)``, or a stand-in when the student's exception cannot say what it is."""
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        return f"<a {type(error).__name__} whose str() raised>"
