"""The reaper: every process a criterion started is found and killed when it ends (parent side).

The grader is the subreaper of its children (an orphan is re-parented to it, not to init),
so what a child left behind is found among the grader's own children; as root the children
run as a leased uid (:mod:`grader.sandbox.uids`) and everything that uid runs is theirs.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time

from grader.processes import processes_of

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


def tasks_of(uid: int) -> int:
    """Processes plus threads that ``uid`` runs now: RLIMIT_NPROC counts them all."""
    return sum(int(fields.get("Threads", "1")) for fields in processes_of(uid))


def set_subreaper(on: bool) -> bool | None:
    """Make this process the subreaper of its descendants: an orphan (a grandchild that
    called setsid, a double fork) is re-parented here instead of to init, so the grader can
    find and kill it. Returns the previous setting, or None where Linux does not allow it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        previous = ctypes.c_int(0)
        if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
            return None
        if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            return None
        return bool(previous.value)
    except (OSError, AttributeError):
        return None


def parents() -> dict[int, int]:
    """``{pid: parent pid}`` of every process on this machine (from /proc)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat_file:
                found[int(entry.name)] = int(stat_file.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return found


def own_children() -> set[int]:
    """Pids whose parent is this process."""
    me = os.getpid()
    return {pid for pid, parent in parents().items() if parent == me}


def descends_from(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    seen = set()
    while pid > 1 and pid not in seen:
        if pid == ancestor:
            return True
        seen.add(pid)
        pid = parents.get(pid, 0)
    return False


def sweep_orphans(before: set[int], deadline_s: float = 5.0) -> set[int]:
    """SIGKILL and reap every child of this process that was not one before the criterion
    (orphans of the criterion's child, re-parented here); their own children are re-parented
    in turn, so repeat until none is left. Returns the pids of those that were still alive."""
    killed: set[int] = set()
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        orphans = own_children() - before - _multiprocessing_servers()
        if not orphans:
            break
        for pid in orphans:
            try:
                alive = not is_zombie(pid)  # an orphan that already exited is only reaped
                os.kill(pid, signal.SIGKILL)
                if alive:
                    killed.add(pid)
            except ProcessLookupError:
                pass
        for pid in orphans:
            reap(pid, deadline)
    return killed


def is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            return stat_file.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _multiprocessing_servers() -> set[int]:
    """The forkserver and resource tracker this process started (children, but not orphans)."""
    from multiprocessing import forkserver, resource_tracker

    pids = {getattr(forkserver._forkserver, "_forkserver_pid", None), getattr(resource_tracker._resource_tracker, "_pid", None)}
    return {pid for pid in pids if pid}


def reap(pid: int, deadline: float) -> None:
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.005)


def live_processes(uid: int) -> list[dict[str, str]]:
    return [p for p in processes_of(uid) if not p.get("State", "").startswith("Z")]


def group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # gone already
        return None


def oom_kills() -> int:
    """How many processes the kernel's out-of-memory killer has killed since boot."""
    try:
        with open("/proc/vmstat") as vmstat:
            for line in vmstat:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
