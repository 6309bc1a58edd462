"""What a child does to confine itself (child side): :func:`open_channel`, then :func:`enter`.

The parent decides everything in a :class:`Confinement` (see :class:`grader.sandbox.Sandbox`);
the child only carries it out, before any student code runs:

1. :func:`open_channel`: its own session and process group (a timeout kills everything it
   started, and no terminal is its controlling one); standard input from ``/dev/null``;
   stdout and stderr into one capture file; the result file and the "started" marker opened
   (while the grader's private folder is still reachable); every other descriptor it
   inherited closed (the forkserver's pipes, a TA's terminal);
2. the child imports what it needs (its business, not the sandbox's);
3. :func:`enter`: resource limits on top of what it already uses; as root, the in-house jail
   (:mod:`grader.sandbox.mounts`), its own network and its own PID namespace
   (:mod:`grader.sandbox.pidns`: from there on the rest runs in the namespace's second
   process, below an init of the grader's); then the uid the grader leased, no new
   privileges, no kernel keyrings (a seccomp filter: a keyring of the uid would outlive the
   child); a private working folder and an environment of only what the parent passed.

Under the bubblewrap backend (:mod:`grader.sandbox.bwrap`), bubblewrap has made the
namespaces and mounts before the child's Python started; :func:`enter` does the rest.
"""
from __future__ import annotations

import ctypes
import importlib
import io
import os
import resource
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from grader.processes import processes_of
from grader.sandbox import mounts, pidns, seccomp

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
IN_HOUSE, BWRAP = "in-house", "bubblewrap"


@dataclass(frozen=True)
class Confinement:
    """Everything a child needs to confine itself; pickled to the child with its job."""

    workdir: str
    output_path: str
    result_path: str
    started_path: str
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
    jail: tuple = ()
    jail_root: str = ""
    scratch_bytes: int = 0
    backend: str = IN_HOUSE
    inherited: tuple = ()  # (output, result, started) descriptors the child was started with (bubblewrap)
    pid_namespace: bool = False  # the jailed child's own PID namespace, with an init of the grader's (pidns)
    status_path: str = ""  # where that init writes its pid and what the criterion left running


@dataclass
class Channel:
    """The descriptors a confined child reports through, and its own output streams."""

    result_fd: int
    started_fd: int
    streams: tuple


def open_channel(confinement: Confinement) -> Channel:
    """Step 1: a session of its own, stdin from /dev/null, output captured, the result file
    and the "started" marker open, and no other descriptor (see the module's docstring)."""
    if confinement.inherited:  # bubblewrap made the session; the parent opened the files
        output_fd, result_fd, started_fd = confinement.inherited
    else:
        os.setsid()
        _forget_forkserver()
        output_fd = os.open(confinement.output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        result_fd = os.open(confinement.result_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        started_fd = os.open(confinement.started_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    streams = _redirect_output(output_fd)
    _close_all_but(0, 1, 2, result_fd, started_fd)
    return Channel(result_fd, started_fd, streams)


def enter(confinement: Confinement) -> None:
    """Step 3: limits, the jail, the leased uid, no keyrings, the private folder (see above)."""
    _limit_resources(confinement)
    if confinement.backend == IN_HOUSE:
        _isolate(confinement)
    _drop_privileges(confinement)
    _enter_workdir(confinement)


def _forget_forkserver() -> None:
    """Tell multiprocessing that this child holds none of the forkserver's descriptors (they
    are closed with the rest): a fresh resource tracker starts if one is ever needed."""
    from multiprocessing import forkserver, resource_tracker

    server: Any = forkserver._forkserver  # private attributes: multiprocessing has no API for this
    server._forkserver_alive_fd = None
    server._inherited_fds = None
    tracker: Any = resource_tracker._resource_tracker
    tracker._fd, tracker._pid = None, None


def _close_all_but(*kept: int) -> None:
    for fd in sorted({int(name) for name in os.listdir("/proc/self/fd")} - set(kept)):
        try:
            os.close(fd)
        except OSError:  # the descriptor listdir itself used
            pass


def _redirect_output(fd: int) -> tuple:
    """stdout and stderr into the capture file ``fd``; returns the child's own two streams
    (the student's code may replace sys.stdout; reporting flushes these)."""
    for stream in (sys.stdout, sys.stderr):
        flush(stream)
    for target in (1, 2):
        if fd != target:
            os.dup2(fd, target)
    if fd not in (1, 2):
        os.close(fd)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, errors="backslashreplace")
    return sys.stdout, sys.stderr


def flush(stream) -> None:
    try:
        stream.flush()
    except BaseException:  # noqa: BLE001 - a stream the student's code broke or replaced
        pass


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


def _limit_resources(confinement: Confinement) -> None:
    """Per process: the data segment, file size, no core files; per uid: tasks. (The whole
    criterion's memory is bounded from outside: :mod:`grader.sandbox.memory`.)"""
    _set_limit(resource.RLIMIT_CORE, 0)
    _set_limit(resource.RLIMIT_DATA, _memory_in_use() + confinement.memory_bytes)
    _set_limit(resource.RLIMIT_FSIZE, confinement.file_bytes)
    if confinement.max_processes:
        _set_limit(resource.RLIMIT_NPROC, confinement.process_base + confinement.max_processes)
    # Python ignores SIGXFSZ; restore the default so printing past the limit stops the child
    # (the parent reports it) instead of raising OSError inside the student's code.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _isolate(confinement: Confinement) -> None:
    """Namespaces, mounts and network, as root, before dropping privileges; last, the PID
    namespace's init and worker (only the worker returns: see :mod:`grader.sandbox.pidns`)."""
    status = pidns.open_status(confinement.status_path) if confinement.jail and confinement.pid_namespace else None
    if confinement.jail:
        mounts.enter_jail(confinement)
    else:
        mounts.isolate_files(confinement.expose, confinement.hide, confinement.private_temp, confinement.file_bytes * 4)
    if confinement.private_network:
        mounts.private_network()
    if status is not None:
        pidns.enter(status)


def _drop_privileges(confinement: Confinement) -> None:
    if confinement.uid is not None and confinement.gid is not None:
        os.setgroups([])
        os.setgid(confinement.gid)
        os.setuid(confinement.uid)
        if os.getuid() != confinement.uid or os.geteuid() != confinement.uid:
            raise RuntimeError(f"grader could not drop privileges to uid {confinement.uid}")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid, which clears it
    seccomp.deny_keyrings()


def _enter_workdir(confinement: Confinement) -> None:
    """The private folder as working directory, TMPDIR and HOME; the environment is only what
    the harness passed (the forkserver's, inherited, is dropped)."""
    os.chdir(confinement.workdir)
    os.environ.clear()
    os.environ.update(confinement.environment)
    os.environ.update({"TMPDIR": confinement.workdir, "HOME": confinement.workdir, "PYTHONDONTWRITEBYTECODE": "1"})
    tempfile.tempdir = None


def probe(confinement: Confinement) -> None:
    """A child that confines itself like a criterion's and exits 0 when it can still read
    every folder on sys.path and Python's own files (the sandbox runs this once per
    isolation it considers, to keep only what works on this machine)."""
    import torch

    try:
        open_channel(confinement)
        enter(confinement)
        for entry in sys.path:
            if entry and os.path.isdir(entry):
                os.listdir(entry)
        os.stat(sys.executable)
        os.listdir(os.path.dirname(torch.__file__))
        importlib.import_module("email.mime.text")  # a standard module nobody imported yet
    except BaseException as error:  # noqa: BLE001 - any failure means: do not isolate this way
        os.write(2, f"{type(error).__name__}: {error}\n".encode())
        os._exit(1)
    os._exit(0)


def kill_uid(uid: int, gid: int, deadline_s: float = 5.0) -> None:
    """A helper child: become ``uid`` and SIGKILL every process it runs. ``kill(-1)`` as that
    uid reaches exactly its processes (wherever they hid: other sessions, other parents) in
    one system call, so even a fork bomb cannot outrun it; repeated until only zombies are
    left. The sandbox runs this only for the uid it leased for its children."""
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
