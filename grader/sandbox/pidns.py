"""A PID namespace for an in-house jailed child, with a small init of the grader's own (child side, root).

A process cannot enter the PID namespace it creates: ``unshare(CLONE_NEWPID)`` puts only
its *next* child there, as PID 1, and PID 1 ignores every signal sent from inside its
namespace that it has no handler for (the student's ``os.kill(os.getpid(), SIGKILL)``,
the kernel's ``SIGXFSZ`` past the file-size limit). So the student's code never runs as
PID 1. After the jail is made, the criterion's child (the *outer* process, the one the
grader started and waits for) forks:

* **init** (PID 1 in the new namespace, root, runs no student code): mounts the
  namespace's ``/proc``, forks the *worker*, reaps every process re-parented to it, and
  once the worker has ended counts the processes still alive outside the worker's process
  group (a ``setsid`` or a double fork: the report's "left running"), writes that count
  to the status file, hands the worker's wait status to the outer process and exits,
  which makes the kernel kill everything left in the namespace;
* the **worker** (PID 2) returns from :func:`enter` and goes on confining itself (the
  leased uid, seccomp) and runs the criterion, the student's code with it.

The outer process stays outside the namespace, where nothing the student's code runs can
see or signal it, and ends as the worker did: with its exit status, or killed by the same
signal, so the parent reads the worker's end from it unchanged. The status file (opened
before the jail, in the grader's closed folder) holds ``init <pid>`` (init's pid as the
grader sees it) and ``left <n>``; the worker never holds it.
"""
from __future__ import annotations

import ctypes
import os
import signal
import struct
import time

CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
PR_SET_PDEATHSIG = 1
STATUS = struct.Struct("<i")  # a wait status, from init to the outer process


def unshare() -> None:
    """Make this process's next child the init of a new PID namespace (needs root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"unshare(CLONE_NEWPID): {os.strerror(error)}")


def open_status(path: str) -> int:
    """The status file, opened while the grader's folder can still be reached (before the jail)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)


def enter(status: int) -> None:
    """Fork init and the worker (see the module's docstring); returns in the worker only.
    Call after :func:`unshare` and after the jail's root is entered, before privileges drop;
    ``status``: :func:`open_status`'s descriptor (the worker never holds it)."""
    reading, writing = os.pipe()
    init = os.fork()
    if init:
        try:
            os.close(writing)
            os.write(status, f"init {init}\n".encode())
            os.close(status)
            _relay(init, reading)
        finally:
            os._exit(70)  # never back into the child's own code: it would report for the worker
    try:
        os.close(reading)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the outer process killed (a timeout): so is the namespace
        _mount_proc()
        worker = os.fork()
    except BaseException:
        os._exit(70)
    if worker:
        try:
            _reap(worker, status, writing)
        finally:
            os._exit(70)
    os.close(status)
    os.close(writing)
    os.setpgid(0, 0)  # the criterion's own process group, as a child without a namespace has


def _mount_proc() -> None:
    """The namespace's own ``/proc`` (only its processes; other users' hidden), read-only."""
    libc = ctypes.CDLL(None, use_errno=True)
    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    if libc.mount(b"proc", b"/proc", b"proc", flags, b"hidepid=2") != 0:
        error = ctypes.get_errno()
        os.write(2, f"grader: cannot mount the PID namespace's /proc: {os.strerror(error)}\n".encode())
        raise OSError(error, "mount /proc")


def _reap(worker: int, status: int, writing: int) -> None:
    """Init's life: reap everything until the worker has ended; count what it left; exit."""
    while True:
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:  # cannot happen before the worker is reaped; be safe
            wait_status = 0
            break
        if pid == worker:
            break
    os.write(status, f"left {len(left_running(worker))}\n".encode())
    os.write(writing, STATUS.pack(wait_status))
    os._exit(0)  # the kernel kills whatever is left in the namespace


def left_running(worker: int) -> list[int]:
    """Pids of the namespace's live processes, init apart, outside the worker's process
    group (it leads one of its own: a process that called ``setsid`` or ``setpgid`` left it)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat_file:
                fields = stat_file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z" and int(fields[2]) != worker:
            found.append(int(name))
    return found


def _relay(init: int, reading: int) -> None:
    """The outer process's life: wait for init, then end as the worker ended."""
    data = b""
    while len(data) < STATUS.size:
        chunk = os.read(reading, STATUS.size - len(data))
        if not chunk:
            break
        data += chunk
    _, init_status = os.waitpid(init, 0)
    wait_status = STATUS.unpack(data)[0] if len(data) == STATUS.size else init_status
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # (those two have no handler to reset)
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
        os.kill(os.getpid(), number)
        time.sleep(1)  # a signal whose default is not to end the process: say so in the status
        os._exit(128 + number)
    os._exit(os.waitstatus_to_exitcode(wait_status) if os.WIFEXITED(wait_status) else 1)


def read_status(path: str) -> tuple[int | None, int]:
    """``(init's pid, processes left running)`` from a child's status file (parent side);
    ``(None, 0)`` when the child made no namespace."""
    init, left = None, 0
    try:
        with open(path, "rb") as handle:
            lines = handle.read(4096).decode("ascii", "replace").splitlines()
    except OSError:
        return None, 0
    for line in lines:
        key, _, value = line.partition(" ")
        if value.isdigit():
            init, left = (int(value), left) if key == "init" else (init, int(value) if key == "left" else left)
    return init, left


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass
