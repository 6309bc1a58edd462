"""Processes on this machine, seen through /proc and signals (standard library only).

Shared by the sandbox (children and their orphans), the batch runner and the Gradescope
entry point (a grader run in its own process group), and the tests. The uid slots that
graders lease for their children are :mod:`grader.sandbox.uids`.
"""
from __future__ import annotations

import os
import signal
import stat


def processes_of(uid: int) -> list[dict[str, str]]:
    """The ``/proc/<pid>/status`` fields (plus ``Pid``) of every process ``uid`` runs now."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                fields = {key: value.strip() for key, value in (line.split(":", 1) for line in status if ":" in line)}
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            found.append({**fields, "Pid": entry.name})
    return found


def kill_group(pid: int | None, still_running: bool = True) -> None:
    """SIGKILL the process group led by ``pid``; ``pid`` itself too if it never became a
    group leader, but only while it is known to be running (a reaped pid may already belong
    to another process)."""
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if still_running:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def remove_tree(path: str | os.PathLike) -> None:
    """Remove the folder ``path`` and everything in it, however deep, never following a link.

    Iterative and relative to open folders (``unlink``/``rmdir`` with ``dir_fd``): a child
    that left a tree thousands of folders deep (past Python's recursion limit and the
    system's longest path) is removed like any other, holding one descriptor at a time. A
    folder the child made unreadable is opened up first. Errors on single entries are
    skipped; the rest is still removed."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = _open_folder(str(path), None, flags)
    except OSError:
        return
    names: list[str] = []  # the folders entered below path, outermost first
    while True:
        entered = False
        for entry in _entries(fd):
            if entry.is_dir(follow_symlinks=False):
                try:
                    inner = _open_folder(entry.name, fd, flags)
                except OSError:
                    continue
                os.close(fd)
                fd, entered = inner, True
                names.append(entry.name)
                break
            try:
                os.unlink(entry.name, dir_fd=fd)
            except OSError:
                pass
        if entered:
            continue
        if not names:
            os.close(fd)
            try:
                os.rmdir(path)
            except OSError:
                pass
            return
        parent = os.open("..", flags, dir_fd=fd)
        os.close(fd)
        fd = parent
        try:
            os.rmdir(names.pop(), dir_fd=fd)
        except OSError:
            pass


def _open_folder(name: str, dir_fd: int | None, flags: int) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, stat.S_IRWXU, dir_fd=dir_fd, follow_symlinks=False)
        return os.open(name, flags, dir_fd=dir_fd)


def _entries(fd: int) -> list[os.DirEntry]:
    try:
        with os.scandir(fd) as entries:
            return list(entries)
    except OSError:
        return []
