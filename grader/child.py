"""What runs inside one criterion's child process (forked from the grader's forkserver).

The child isolates itself before any student code runs, in this order:

1. its own session and process group (``os.setsid``), so a timeout kills everything it started;
2. stdout and stderr go to one capture file; the result file and the "started" marker are
   opened now, while the child may still create files in the grader's private folder;
3. the check module is imported (normally preloaded), then ``sys.path`` is rebuilt with the
   disposable tree first and without any folder that holds another ``minitorch`` (the
   repository root, where the answer key lives), and every ``minitorch*`` module is purged,
   so ``import minitorch.pipeline`` finds the submitted file and nothing else;
4. resource limits (memory, processes, file size) on top of what the child already uses;
5. when the grader runs as root: a jail (see :func:`enter_jail`: its own mount and IPC
   namespaces, a root holding only the system's and Python's folders and its tree, read-only,
   size-bounded scratch folders of its own, a ``/proc`` showing only its own processes; where
   the machine does not allow it, the grader's files hidden and private temp folders), its
   own network, and then the unprivileged uid the grader leased for its children;
6. a private TMPDIR/HOME/working directory and an environment of only what the harness
   passed (none of the TA's variables);
7. the grader's modules are taken out of ``sys.modules`` (the student's code cannot look up
   the hidden checks there), the provided modules the checks rely on are imported and handed
   to the checks' toolkit, writes to the watched modules start being recorded, what
   reporting needs is made ready (the encoder warmed up, descriptors reserved), and the
   objects the checks trust are noted (see :func:`grader.checks.identities`); then the
   marker says "started": any grader error reported after this point is forged.

Then ``observe_<name>(seed, params)`` runs and its observation (or what went wrong) is
written as JSON plus safetensors (:mod:`grader.result_file`: no pickle, nothing that runs
code or unfolds when read); the parent reads it back and is the only one that judges and
writes results. Reporting uses the child's own streams and
descriptors, never the student's ``sys.stdout``.
"""
from __future__ import annotations

import ctypes
import fcntl
import importlib
import importlib.util
import io
import os
import random
import re
import resource
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from grader import checks as toolkit
from grader.checks import Fail
from grader.processes import processes_of
from grader.protocol import Kind
from grader.result_file import encode

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
# Per-mount flags of /proc/self/mountinfo kept when a mount is made read-only (dropping a
# flag the mount already has would be refused, and would loosen it).
MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024, "nodiratime": 2048,
               "relatime": 1 << 21}
# The child's writable temp folders inside its jail, besides its private working folder.
JAIL_TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# Provided modules the student files import and the checks rely on (their attributes, their
# classes' attributes and what their containers hold): imported from the tree before the
# student's code runs, so a replacement shows (see grader.checks.identities), and so code that
# exhausts the descriptors at import cannot stop the student file's own imports.
WATCHED_PROVIDED = ("minitorch", "minitorch.runtime", "minitorch.schedules", "minitorch.distributed",
                    "minitorch.cost_model", "minitorch.executor")
RESERVED_DESCRIPTORS = 16  # kept open while the student's code runs, closed for reporting
_write = os.write  # the child's own, whatever the student's code does to os.write


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
    private_temp: tuple = ()
    environment: dict = field(default_factory=dict)
    started_path: str = ""
    jail: tuple = ()
    jail_root: str = ""
    scratch_bytes: int = 0


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


def _redirect_output(path: str) -> tuple:
    """stdout and stderr into the capture file; returns the child's own two streams (the
    student's code may replace sys.stdout; reporting flushes these)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    for stream in (sys.stdout, sys.stderr):
        _flush(stream)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, errors="backslashreplace")
    return sys.stdout, sys.stderr


def _flush(stream) -> None:
    try:
        stream.flush()
    except BaseException:  # noqa: BLE001 - a stream the student's code broke or replaced
        pass


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


def _cover(folder: str, keep: tuple[str, ...], options: bytes = b"mode=0755,size=1m") -> None:
    """Cover ``folder`` with an empty tmpfs and bind back the folders of ``keep`` (below it)."""
    libc = _libc()
    handles = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep]
    _check(libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), f"tmpfs on {folder}")
    for path, handle in handles:
        os.makedirs(path, exist_ok=True)
        _check(libc.mount(f"/proc/self/fd/{handle}".encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind {path}")
        os.close(handle)


def isolate_files(expose: tuple, hide: tuple, private_temp: tuple = (), temp_bytes: int = 0) -> None:
    """This child's own view of the file system (a private mount namespace; needs root).

    ``expose``: let the unprivileged user reach Python's own files when a folder above them
    is closed to it (``/root`` is 0700 but Python lives in ``/root/.pyenv``): each closed
    folder is covered by an empty tmpfs and the sub-folders Python needs are bound back in.
    ``private_temp``: the shared temp folders (``/tmp``, ``/var/tmp``, ``/dev/shm``) are
    covered by empty tmpfs of ``temp_bytes`` each, writable by all (mode 1777) and seen by
    this child's processes only, keeping the child's own tree and private folder and
    Python's folders that live there: what the child writes there is gone when it is.
    ``hide``: the grader's repository (its source, the answer key, the tests) is covered the
    same way, binding back only folders Python needs that live inside it (a virtualenv).
    All three are ``((folder, (kept, ...)), ...)``.
    """
    if not expose and not hide and not private_temp:
        return
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    for closed, needed in expose:
        _cover(closed, needed)
    for folder, keep in private_temp:
        _cover(folder, keep, f"mode=1777,size={max(temp_bytes, 1 << 20)}".encode())
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


def _mount_points() -> list[tuple[str, int]]:
    """``(mount point, per-mount flags)`` of every mount this process sees, parents first."""
    found = []
    with open("/proc/self/mountinfo", "rb") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4]).decode("utf-8", "surrogateescape")
            found.append((point, sum(MOUNT_FLAGS.get(option, 0) for option in fields[5].decode().split(","))))
    return found


def _make_path(root: str, path: str, make_last: bool = True) -> str:
    """Create ``path`` inside ``root`` as the machine has it (folders as empty folders,
    symbolic links as the same links) and return the real path it resolves to. Only what
    is missing inside ``root`` is created, so nothing is ever written through a bound folder."""
    parts, resolved, links = [p for p in path.split("/") if p], "/", 0
    while parts:
        part = parts.pop(0)
        real = os.path.join(resolved, part)
        inside = root + real
        if os.path.islink(real):
            links += 1
            if links > 40:
                raise OSError(f"too many symbolic links in {path}")
            target = os.readlink(real)
            if not os.path.lexists(inside):
                os.symlink(target, inside)
            parts = [p for p in os.path.normpath(os.path.join(resolved, target)).split("/") if p] + parts
            resolved = "/"
            continue
        if not os.path.lexists(inside) and (parts or make_last):
            os.mkdir(inside, 0o755)
        resolved = real
    return resolved


def _bind_all(root: str, paths: list[str], bound: list[str]) -> list[str]:
    """Bind each of ``paths`` (parents first, by the real paths they resolve to) at the same place inside ``root``,
    skipping those already visible through an earlier bind; returns the bound real paths."""
    libc = _libc()
    for path in sorted((p for p in paths if os.path.exists(p)), key=os.path.realpath):  # /usr before /bin -> usr/bin
        real = _make_path(root, path)
        if any(real == b or real.startswith(b + os.sep) for b in bound):
            continue
        _check(libc.mount(real.encode(), (root + real).encode(), None, MS_BIND | MS_REC, None), f"bind {real}")
        bound = [*bound, real]
    return bound


def enter_jail(job: "Job") -> None:
    """This child's own root (needs root, in its private mount namespace): an empty tmpfs
    with, read-only, the folders of ``job.jail`` (the system's programs and libraries,
    Python and torch) and the disposable tree; ``/dev``, ``/sys`` and a ``/proc`` that shows
    only this user's processes; and, writable, size-bounded tmpfs of its own for the
    working folder and the temp folders. Then every mount of the jail but those is made
    read-only (the rule: nothing writable outside the child's scratch), and the child
    changes root into it. What it wrote is gone with it; no other submission, no class
    folder and no other process's command line or environment is visible."""
    libc, root = _libc(), job.jail_root
    _check(libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m"), "tmpfs jail")
    scratch = b"size=%d" % max(job.scratch_bytes, 1 << 20)
    visible = sorted({*job.jail, job.tree, "/dev", "/sys"})
    in_temp = [p for p in visible if any(p == t or p.startswith(t + os.sep) for t in JAIL_TEMP_FOLDERS)]
    bound = _bind_all(root, [p for p in visible if p not in in_temp], [])
    writable = []
    for folder in JAIL_TEMP_FOLDERS:  # over whatever the binds brought there (the machine's /dev/shm)
        _make_path(root, folder)
        _check(libc.mount(b"tmpfs", (root + folder).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777," + scratch), folder)
        writable.append(root + folder)
    _bind_all(root, in_temp, bound)  # the tree (and Python, if it lives in /tmp) inside the private /tmp
    os.makedirs(root + "/proc", exist_ok=True)
    _check(libc.mount(b"proc", (root + "/proc").encode(), b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"hidepid=2"), "proc")
    _make_path(root, job.workdir)
    owner = b"mode=0700,uid=%d,gid=%d," % (job.uid if job.uid is not None else os.getuid(), job.gid if job.gid is not None else os.getgid())
    _check(libc.mount(b"tmpfs", (root + job.workdir).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, owner + scratch), "scratch")
    writable.append(root + job.workdir)
    if libc.mount(b"mqueue", (root + "/dev/mqueue").encode(), b"mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0:
        writable.append(root + "/dev/mqueue")  # this IPC namespace's own message queues
    for point, flags in _mount_points():
        if (point == root or point.startswith(root + os.sep)) and point not in writable:
            _check(libc.mount(None, point.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags, None), f"read-only {point}")
    os.chroot(root)
    os.chdir("/")


def _isolate(job: "Job") -> None:
    """Namespaces, mounts and network, as root, before dropping privileges."""
    if job.jail:
        _check(_libc().unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare(CLONE_NEWNS | CLONE_NEWIPC)")
        _check(_libc().mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
        enter_jail(job)
    else:
        isolate_files(job.expose, job.hide, job.private_temp, job.file_bytes * 4)
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
        os.listdir(os.path.dirname(torch.__file__))
        importlib.import_module("email.mime.text")  # a standard module nobody imported yet
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


def kill_uid(uid: int, gid: int, deadline_s: float = 5.0) -> None:
    """A helper child: become ``uid`` and SIGKILL every process it runs. ``kill(-1)`` as that
    uid reaches exactly its processes (wherever they hid: other sessions, other parents) in
    one system call, so even a fork bomb cannot outrun it; repeated until only zombies are
    left. The harness runs this only for the uid it leased for its children."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    me, deadline = str(os.getpid()), time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            os._exit(0)  # nothing of this uid is left
        alive = [p for p in processes_of(uid) if p["Pid"] != me and not p.get("State", "").startswith("Z")]
        if not alive:
            os._exit(0)
        time.sleep(0.002)
    os._exit(1)


def _enter_workdir(job: Job) -> None:
    """The private folder as working directory, TMPDIR and HOME; the environment is only what
    the harness passed (the forkserver's, inherited, is dropped)."""
    os.chdir(job.workdir)
    os.environ.clear()
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
            _flush(stream)
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
    os.setsid()
    _close_forkserver_fds()
    streams = _redirect_output(job.output_path)
    result_fd = os.open(job.result_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    started_fd = os.open(job.started_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    reporter = None
    try:
        observe = getattr(importlib.import_module(job.module), "observe_" + job.name)
        _isolate_imports(job.tree)
        _limit_resources(job)
        _isolate(job)
        _drop_privileges(job)
        _enter_workdir(job)
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
        if envelope.get("tampered"):  # a rank's own check (see grader.checks.in_every_rank)
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
    :func:`grader.checks.provided`). From now on every write to a module of
    :data:`grader.checks.RECORDED_MODULES` or a provided one is recorded. A check module
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
    except Fail as failure:
        reporter.release()
        tampered = failure.details.get("tampered") if type(failure.details) is dict else None
        envelope: dict[str, object] = {"kind": Kind.FAIL.value, "message": str(failure)}
        return {**envelope, "tampered": [str(name) for name in tampered]} if tampered else envelope
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
