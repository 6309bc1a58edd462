"""What runs inside one criterion's child process (forked from the grader's forkserver).

The child isolates itself before any student code runs, in this order:

1. its own session and process group (``os.setsid``), so a timeout kills everything it started;
2. stdout and stderr go to one capture file; the result file is opened now, while the
   child may still create files in the grader's private folder;
3. the check module is imported (normally preloaded), then ``sys.path`` is rebuilt with the
   disposable tree first and without any folder that holds another ``minitorch`` (the
   repository root, where the answer key lives), and every ``minitorch*`` module is purged,
   so ``import minitorch.pipeline`` finds the submitted file and nothing else;
4. resource limits (memory, processes, file size) on top of what the child already uses;
5. when the grader runs as root, the child becomes an unprivileged user with a private
   TMPDIR/HOME/working directory.

Then ``observe_<name>(seed, params)`` runs and its observation (or what went wrong) is
written with ``torch.save``; the parent reads it with ``torch.load(weights_only=True)`` and
is the only one that judges and writes results.
"""
from __future__ import annotations

import builtins
import ctypes
import fcntl
import importlib
import importlib.util
import io
import os
import random
import resource
import signal
import socket
import struct
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.checks import Fail
from grader.protocol import Kind

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# What a child must not change in the grader's own code (checked after observe: a child that
# monkeypatches them has its observation voided, whatever the judge would say).
WATCHED_TORCH = ("allclose", "isclose", "equal", "testing.assert_close", "Tensor.__eq__", "Tensor.allclose",
                 "Tensor.equal", "Tensor.detach", "Tensor.clone", "save")


@dataclass(frozen=True)
class Job:
    """Everything a child needs; pickled to the forkserver child."""

    criterion: str
    module: str
    name: str
    seed: int
    params: dict
    tree: str
    workdir: str
    output_path: str
    result_path: str
    student_files: tuple[str, ...]
    memory_bytes: int
    file_bytes: int
    max_processes: int
    process_base: int = 0
    uid: int | None = None
    gid: int | None = None
    expose: tuple = ()
    hide: tuple = ()
    private_network: bool = False
    environment: dict = field(default_factory=dict)


def ping() -> None:
    """A child that does nothing: starts the forkserver and measures a child's cost."""
    os._exit(0)


def _close_forkserver_fds() -> None:
    """Close the fds a forkserver child inherits (its alive pipe, the resource tracker's):
    writing garbage into them would crash the grader's forkserver."""
    from multiprocessing import forkserver, resource_tracker

    server: Any = forkserver._forkserver  # private attributes: multiprocessing has no API for this
    if getattr(server, "_forkserver_alive_fd", None) is not None:
        _close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
    for fd in getattr(server, "_inherited_fds", None) or ():
        _close(fd)
    tracker: Any = resource_tracker._resource_tracker
    if getattr(tracker, "_fd", None) is not None:
        _close(tracker._fd)
        tracker._fd, tracker._pid = None, None  # a fresh tracker starts if ever needed


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _redirect_output(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, errors="backslashreplace")


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


def _memory_in_use() -> int:
    """Bytes of the child's data segment now (VmData), the base of the memory budget."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def _set_limit(kind: int, value: int) -> None:
    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


def _limit_resources(job: Job) -> None:
    _set_limit(resource.RLIMIT_CORE, 0)
    _set_limit(resource.RLIMIT_DATA, _memory_in_use() + job.memory_bytes)
    _set_limit(resource.RLIMIT_FSIZE, job.file_bytes)
    if job.max_processes:
        _set_limit(resource.RLIMIT_NPROC, job.process_base + job.max_processes)
    # Python ignores SIGXFSZ; restore the default so printing past the limit stops the child
    # (the parent reports it) instead of raising OSError inside the student's code.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _cover(folder: str, keep: tuple[str, ...]) -> None:
    """Cover ``folder`` with an empty tmpfs and bind back the folders of ``keep`` (below it)."""
    libc = _libc()
    handles = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep]
    _check(libc.mount(b"tmpfs", folder.encode(), b"tmpfs", 0, b"mode=0755,size=1m"), f"tmpfs on {folder}")
    for path, handle in handles:
        os.makedirs(path, exist_ok=True)
        _check(libc.mount(f"/proc/self/fd/{handle}".encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind {path}")
        os.close(handle)


def isolate_files(expose: tuple, hide: tuple) -> None:
    """This child's own view of the file system (a private mount namespace; needs root).

    ``expose``: let the unprivileged user reach Python's own files when a folder above them
    is closed to it (``/root`` is 0700 but Python lives in ``/root/.pyenv``): each closed
    folder is covered by an empty tmpfs and the sub-folders Python needs are bound back in.
    ``hide``: the grader's repository (its source, the answer key, the tests) is covered the
    same way, binding back only folders Python needs that live inside it (a virtualenv).
    Both are ``((folder, (kept, ...)), ...)``.
    """
    if not expose and not hide:
        return
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    for closed, needed in expose:
        _cover(closed, needed)
    for folder, keep in hide:
        if os.path.isdir(folder):  # not already hidden under a covered closed folder
            _cover(folder, keep)


def private_network() -> None:
    """A network namespace of this child's own (needs root): a loopback only, brought up
    because gloo's ranks talk over it; nothing outside the child can be reached."""
    _check(_libc().unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(handle, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(handle, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def _isolate(job: "Job") -> None:
    """Mounts and network, as root, before dropping privileges."""
    isolate_files(job.expose, job.hide)
    if job.private_network:
        private_network()


def probe(job: "Job") -> None:
    """A child that isolates itself like a criterion's and exits 0 when, as the
    unprivileged user, it can still read every folder on sys.path (the harness runs this
    once, to decide whether children can drop privileges on this machine)."""
    try:
        os.setsid()
        _close_forkserver_fds()
        _redirect_output(job.output_path)
        _isolate(job)
        _drop_privileges(job)
        for entry in sys.path:
            if entry and os.path.isdir(entry):
                os.listdir(entry)
        os.stat(sys.executable)
    except BaseException as error:  # noqa: BLE001 - any failure means: do not drop privileges
        os.write(2, f"{type(error).__name__}: {error}\n".encode())
        os._exit(1)
    os._exit(0)


def _drop_privileges(job: Job) -> None:
    if job.uid is not None and job.gid is not None:
        os.setgroups([])
        os.setgid(job.gid)
        os.setuid(job.uid)
        if os.getuid() != job.uid or os.geteuid() != job.uid:
            raise RuntimeError(f"grader could not drop privileges to uid {job.uid}")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid, which clears it


def _enter_workdir(job: Job) -> None:
    os.chdir(job.workdir)
    os.environ.update(job.environment)
    os.environ.update({"TMPDIR": job.workdir, "HOME": job.workdir, "PYTHONDONTWRITEBYTECODE": "1"})
    tempfile.tempdir = None


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
    NotPlain for anything else (it could not be loaded with weights_only)."""
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


def _write_result(job: Job, fd: int, envelope: dict) -> None:
    buffer = io.BytesIO()
    torch.save(envelope, buffer)
    data = memoryview(buffer.getvalue())
    while data:
        data = data[os.write(fd, data):]
    os.close(fd)


def main(job: Job) -> None:
    """The target of a criterion's child process; never returns."""
    os.setsid()
    _close_forkserver_fds()
    _redirect_output(job.output_path)
    result_fd = os.open(job.result_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        observe = getattr(importlib.import_module(job.module), "observe_" + job.name)
        _isolate_imports(job.tree)
        _limit_resources(job)
        _isolate(job)
        _drop_privileges(job)
        _enter_workdir(job)
        torch.manual_seed(job.seed)
        random.seed(job.seed)
        before = _snapshot()
    except BaseException as error:
        failure: dict[str, object] = {"kind": Kind.GRADER_ERROR.value, "message": "".join(traceback.format_exception(error))}
        _write_result(job, result_fd, failure)
        os._exit(0)
    envelope = _observe(observe, job)
    changed = _changed(before)
    if changed:
        envelope["tampered"] = changed[:20]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _write_result(job, result_fd, envelope)
    os._exit(0)


def _lookup(root, path: str):
    for name in path.split("."):
        root = getattr(root, name, None)
    return root


def _snapshot() -> dict[str, int]:
    """Identities of what the grader relies on in the child: the grader's modules and their
    attributes, torch's comparison functions, and the builtins."""
    seen = {}
    for name, module in list(sys.modules.items()):
        if name == "grader" or name.startswith("grader."):
            seen[f"sys.modules[{name!r}]"] = id(module)
            for attribute, value in list(vars(module).items()):
                seen[f"{name}.{attribute}"] = id(value)
    for path in WATCHED_TORCH:
        seen[f"torch.{path}"] = id(_lookup(torch, path))
    for attribute, value in list(vars(builtins).items()):
        seen[f"builtins.{attribute}"] = id(value)
    return seen


def _changed(before: dict[str, int]) -> list[str]:
    """What the student's code replaced since :func:`_snapshot` (ids of live objects)."""
    now = _snapshot()
    return sorted(name for name, identity in before.items() if now.get(name) != identity)


def _observe(observe, job: Job) -> dict[str, object]:
    """Run the check's observe function; what it saw, or what went wrong, as an envelope."""
    try:
        observation = observe(job.seed, dict(job.params))
    except Fail as failure:
        return {"kind": Kind.FAIL.value, "message": str(failure)}
    except BaseException as error:  # the student's code raised (SystemExit included)
        return _exception_envelope(error, job)
    try:
        return {"kind": Kind.OBSERVATION.value, "observation": plain_copy(observation)}
    except NotPlain as error:
        return {"kind": Kind.GARBAGE.value, "message": str(error)}


def _exception_envelope(error: BaseException, job: Job) -> dict:
    return {
        "kind": Kind.EXCEPTION.value,
        "type": type(error).__name__,
        "module_not_found": getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None,
        "not_implemented": isinstance(error, NotImplementedError),
        "message": str(error)[:2000],
        "traceback": _student_traceback(error, job.student_files)[-6000:],
    }
