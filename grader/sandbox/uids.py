"""uid slots: every grader process on a machine runs its children as a uid of its own.

The lease is a lock file per uid in a root-owned folder; see :func:`lease_uid`.
"""
from __future__ import annotations

import fcntl
import os
import pwd
import stat
from pathlib import Path

from grader.processes import processes_of

SLOT_COUNT = 64  # graders that may run at once on one machine
SLOT_FOLDER_NAME = "grader-uid-slots"
SLOT_PARENTS = ("/run", "/var/run", "/tmp")  # fixed, not TMPDIR: every grader must find the same folder


class SlotError(RuntimeError):
    """No uid slot could be leased (the grader cannot run children unprivileged)."""


_held: dict[int, int] = {}  # uid -> descriptor of its locked slot file, held by this process
_in_use: set[int] = set()  # uids of _held that a harness of this process uses now
_holder = os.getpid()


def lease_uid(below: int, count: int = SLOT_COUNT) -> int:
    """A uid for one grader's children that no other grader on this machine uses.

    The candidates are the ``count`` uids just below ``below`` (the configured user's uid,
    e.g. nobody's) that belong to no account. A uid is leased with ``flock`` on its file in a
    root-owned folder (``/run/grader-uid-slots``): the lock dies with the process, however it
    ends, so a crashed grader never holds a slot. A uid that runs any process when it is
    leased is skipped (something else uses it). Once leased, the uid stays this process's
    until it exits and is handed to its next harness when :func:`return_uid` gave it back:
    everything that uid runs was started by this process's children, so limits can count
    it and "kill everything this uid runs" is safe.

    Raises:
        SlotError: every candidate is an account, busy or held by another grader; or the
            slot folder is unsafe.
    """
    global _holder
    if _holder != os.getpid():  # a forked copy of a grader holds nothing of its parent's
        _held.clear()
        _in_use.clear()
        _holder = os.getpid()
    candidates = range(below - 1, max(0, below - 1 - count), -1)
    for uid in candidates:
        if uid in _held and uid not in _in_use:
            _in_use.add(uid)
            return uid
    folder = slot_folder()
    skipped = []
    for uid in candidates:
        if uid in _held or has_account(uid):
            continue
        fd = _try_lock(folder / f"{uid}.lock")
        if fd is None:
            skipped.append(f"{uid} (another grader)")
            continue
        if processes_of(uid):
            os.close(fd)
            skipped.append(f"{uid} (runs processes)")
            continue
        _held[uid] = fd
        _in_use.add(uid)
        return uid
    raise SlotError(
        f"no free uid for the children among the {count} uids below {below} that belong to no account"
        f" (skipped: {', '.join(skipped[:8]) or 'none free'}); wait for another grader to finish"
    )


def return_uid(uid: int) -> None:
    """This process's harness is done with ``uid``; the next one may use it (it stays leased)."""
    _in_use.discard(uid)


def slot_folder() -> Path:
    """The root-owned folder of the slot lock files (created on first use)."""
    for parent in SLOT_PARENTS:
        if os.path.isdir(parent) and os.access(parent, os.W_OK):
            folder = Path(parent) / SLOT_FOLDER_NAME
            try:
                folder.mkdir(mode=0o700)
            except FileExistsError:
                pass
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
                raise SlotError(f"{folder} must be a folder owned by root and writable by root only; remove it")
            return folder
    raise SlotError(f"none of {', '.join(SLOT_PARENTS)} is a writable folder for the uid slot locks")


def _try_lock(path: Path) -> int | None:
    """A descriptor holding an exclusive lock on ``path``, or None when another process has it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
