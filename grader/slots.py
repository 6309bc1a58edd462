"""A node-wide lease on uid slots, so graders that share a machine never share a uid.

As root, the children of uid slot k run as ``nobody``'s uid - k (see grader.harness), and a
grader kills whatever its children's uid left running. A ``batch`` gives each of its workers
a slot, but two batches, or several Slurm array tasks, can share a node: they must not pick
the same slots. Each slot is a lock file in a root-only folder of the node; holding
``flock`` on it is holding the slot. The kernel drops the lock when the holder exits, however
it exits (a task killed by Slurm's time limit included), so a slot is never leaked. Leases
start at slot 1: slot 0 (``nobody`` itself) is left to single ``grade`` runs, which take none.
"""
from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from pathlib import Path

LOCKS_VARIABLE = "GRADER_SLOT_LOCKS"  # a folder to hold the lock files instead of the default
MAX_SLOTS = 256


class SlotError(RuntimeError):
    """No lease could be taken: every slot is held, or the lock folder is unsafe."""


def lock_folder() -> Path:
    """Node-local and shared by every process of the node: /run/lock (a tmpfs) where it
    exists, not /tmp, which Slurm's job_container/tmpfs makes private to each job."""
    if os.environ.get(LOCKS_VARIABLE):
        return Path(os.environ[LOCKS_VARIABLE])
    for base in ("/run/lock", "/var/lock"):
        if os.path.isdir(base) and os.access(base, os.W_OK):
            return Path(base) / f"grader-uid-slots-{os.geteuid()}"
    return Path(tempfile.gettempdir()) / f"grader-uid-slots-{os.geteuid()}"


def _private_folder(folder: Path) -> None:
    """Create ``folder`` as ours alone; refuse one someone else made (a link planted in a
    world-writable /run/lock could otherwise make root create files elsewhere)."""
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SlotError(f"{folder} is not a folder that only this user can write: remove it or set {LOCKS_VARIABLE}")


class SlotLease:
    """Hold ``count`` uid slots of this node (from 1 .. ``limit`` - 1) until :meth:`release`
    or the process ends. ``slots`` lists them, lowest first.

    Raises:
        SlotError: fewer than ``count`` are free, or the lock folder is not safe.
    """

    def __init__(self, count: int, folder: Path | None = None, limit: int = MAX_SLOTS):
        self.folder = folder or lock_folder()
        self.slots: list[int] = []
        self._files: list[int] = []
        _private_folder(self.folder)
        for slot in range(1, limit):
            if len(self.slots) == count:
                break
            descriptor = os.open(self.folder / f"slot-{slot}", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                continue
            self.slots.append(slot)
            self._files.append(descriptor)
        if len(self.slots) < count:
            free = len(self.slots)
            self.release()
            raise SlotError(f"only {free} of the {count} uid slots asked for are free on this node (slots 1..{limit - 1})")

    def release(self) -> None:
        for descriptor in self._files:
            os.close(descriptor)
        self._files, self.slots = [], []

    def __enter__(self) -> SlotLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
