"""One memory bound for a whole criterion, measured from outside (parent side).

A child's ``RLIMIT_DATA`` bounds each process: a criterion that forks (Problem 3's ranks do,
and so can a student's code) could otherwise hold the bound once per process. cgroup v2
would bound the whole criterion in the kernel, but only where the grader may create a
cgroup with the memory controller; on this project's machines the memory controller is on
a cgroup v1 hierarchy the grader does not own, and dividing the per-process bound by the
process allowance (512 tasks: threads count) would leave each process a few megabytes. So
the parent adds up what the criterion's processes hold while it runs and stops the whole
criterion once the sum passes the bound (:class:`Meter`).

The sum is of proportional set sizes (``Pss``: a page shared by n processes counts 1/n in
each), so the torch the children share with the forkserver counts once, not once per rank.
Resident sizes (``/proc/<pid>/statm``, cheap) are read first: they are never below ``Pss``,
so while their sum is under the bound nothing more is read.

Memory no process maps is in no ``Pss``: the pages of a file that no folder names but a
descriptor holds (``memfd_create``'s, a deleted file) stay as long as the descriptor does,
so those files are added, each inode once, by the blocks it holds (:func:`held_file_bytes`).
A file still named in a folder is not: the jail's writable folders are tmpfs bounded in
bytes on their own. A file both held and mapped counts twice (its mapped pages in ``Pss``):
the bound errs towards stopping, and nothing the course's criteria run does both.
"""
from __future__ import annotations

import os
import stat

PAGE = os.sysconf("SC_PAGE_SIZE")
POLL_SECONDS = 0.05


def resident_bytes(pid: int) -> int:
    """Resident bytes of ``pid`` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def proportional_bytes(pid: int) -> int:
    """``Pss`` of ``pid`` in bytes (0 when it is gone). Its resident bytes where ``Pss`` may
    not be read (a process that made itself not dumpable hides it from a grader not root)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return resident_bytes(pid)
    except (IndexError, ValueError):
        pass
    return 0


def held_file_bytes(pids: set[int]) -> int:
    """Bytes of the files ``pids`` hold open that no folder names (``memfd_create``'s, deleted
    ones), each inode once: what they hold in memory that no ``Pss`` counts while unmapped."""
    held = {}
    for pid in pids:
        try:
            entries = os.scandir(f"/proc/{pid}/fd")
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    found = entry.stat()  # follows the descriptor to the open file
                except OSError:
                    continue
                if found.st_nlink == 0 and stat.S_ISREG(found.st_mode):
                    held[(found.st_dev, found.st_ino)] = found.st_blocks * 512
    return sum(held.values())


def processes_of(uid: int, session: int | None = None) -> set[int]:
    """Pids of ``uid``'s processes (in ``session`` only, when given). Read from the owners of
    ``/proc/<pid>`` (one ``stat`` each: this runs every :data:`POLL_SECONDS`)."""
    found = set()
    for entry in os.scandir("/proc"):
        try:
            if not entry.name.isdigit() or entry.stat().st_uid != uid:
                continue
            if session is not None:
                with open(f"/proc/{entry.name}/stat", "rb") as stat_file:
                    if int(stat_file.read().rsplit(b")", 1)[1].split()[3]) != session:
                        continue
        except (OSError, IndexError, ValueError):
            continue
        found.add(int(entry.name))
    return found


class Meter:
    """The memory of one criterion's processes against ``bound`` bytes.

    ``base``: bytes the child holds before the student's code runs (its share of the
    forkserver's torch), added to the rubric's ``memory_mb``, which is what a child may
    allocate on top of what it uses when it starts.
    """

    def __init__(self, bound: int, base: int):
        self.limit = bound + base
        self.peak = 0

    def over(self, pids: set[int]) -> int | None:
        """The bytes ``pids`` hold together when past the bound, else None."""
        files = held_file_bytes(pids)
        if files + sum(resident_bytes(pid) for pid in pids) <= self.limit:
            return None
        held = files + sum(proportional_bytes(pid) for pid in pids)
        self.peak = max(self.peak, held)
        return held if held > self.limit else None
