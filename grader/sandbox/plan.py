"""The jail plan: what a child may see of this machine, decided once per harness (parent side).

Every plan is data (tuples of paths) handed to the child in its Confinement; the child's
side (:mod:`grader.sandbox.mounts`) only carries it out.
"""
from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from grader.layout import REPOSITORY

# World-writable folders every process shares unless a child gets its own (see private_temp_plan).
SHARED_TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
# Folders of the system's programs, libraries and configuration a jailed child sees (read-only).
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def _world_traversable(folder: Path) -> bool:
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [folder, *folder.parents])


def _python_folders() -> list[Path]:
    """Folders the children's Python reads from: sys.path and the interpreter's own."""
    entries = [*sys.path, os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    return sorted({Path(os.path.realpath(e)) for e in entries if e and os.path.isdir(e)})


def jail_plan() -> tuple[str, ...]:
    """What a jailed child sees besides its tree, /dev, /sys and its own /proc: the system
    folders, Python's installation (its prefixes and site-packages, wherever they live) and
    the folders of the libraries this process has loaded (torch's, CUDA's). Never the
    grader's repository beyond a virtual environment inside it, never a folder on sys.path
    that is neither (the folder a TA started the grader in, a class folder)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)}
    candidates = {*SYSTEM_FOLDERS, *prefixes, os.path.dirname(sys.executable)}
    candidates |= {e for e in sys.path if os.path.basename(e.rstrip("/")) in ("site-packages", "dist-packages")}
    candidates |= _loaded_library_folders()
    repository = os.path.realpath(REPOSITORY)

    def allowed(path: str) -> bool:
        real = os.path.realpath(path)
        inside = real == repository or real.startswith(repository + os.sep)
        return os.path.exists(path) and (not inside or any(real == e or real.startswith(e + os.sep) for e in prefixes))

    return tuple(sorted(p for p in candidates if allowed(p)))


def _loaded_library_folders() -> set[str]:
    """Folders of the shared libraries mapped into this process."""
    folders = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[5].strip() if len(line.split(maxsplit=5)) == 6 else ""
            if path.startswith("/") and ".so" in os.path.basename(path) and not path.startswith(("/dev/", "/proc/")):
                folders.add(os.path.dirname(path))
    return folders


def exposure_plan() -> tuple | None:
    """How to let an unprivileged user reach Python's files (see child.isolate_files).

    ``()`` when every folder is already open to others; ``((closed, (needed, ...)), ...)``
    when a folder above them is closed (``/root``, 0700); None when that cannot be fixed by
    covering one closed folder per path (a closed folder deeper down, an unreadable entry).
    """
    plan: dict[str, set[str]] = {}
    for folder in _python_folders():
        chain = [*reversed(folder.parents), folder]
        closed = [p for p in chain[:-1] if not os.stat(p).st_mode & stat.S_IXOTH]
        if not os.stat(folder).st_mode & stat.S_IROTH or not os.stat(folder).st_mode & stat.S_IXOTH:
            return None
        if not closed:
            continue
        top = closed[0]
        if len(closed) > 1 or top == Path("/"):
            return None
        plan.setdefault(str(top), set()).add(str(chain[chain.index(top) + 1]))
    return tuple((closed, tuple(sorted(needed))) for closed, needed in sorted(plan.items()))


def scratch_root(unprivileged: bool) -> str | None:
    """A temp folder the unprivileged user can traverse into (None: the default)."""
    if not unprivileged:
        return None
    for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(candidate) and _world_traversable(Path(candidate)):
            return candidate
    raise RuntimeError("no temp folder that an unprivileged user can reach (/tmp is not world-traversable)")


def hiding_plan(scratch: Path | None = None) -> tuple:
    """``((repository, (kept, ...)),)``: the grader's repository (its source, the answer key,
    the tests) covered in the children's view, keeping only the folders of the Python
    environment that live inside it (``make test``'s ``.venv``); ``()`` when the scratch
    folder is inside it."""
    repo = os.path.realpath(REPOSITORY)
    if scratch is not None and os.path.realpath(scratch).startswith(repo + os.sep):
        return ()
    environments = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix)}

    def kept(folder: str) -> bool:
        inside = folder.startswith(repo + os.sep)
        return inside and any(folder == e or folder.startswith(e + os.sep) for e in environments)

    return ((repo, tuple(str(p) for p in _python_folders() if kept(str(p)))),)


def below(folder: str, *paths: Path) -> tuple[str, ...]:
    """The ``paths`` that lie below ``folder``."""
    return tuple(str(p) for p in paths if os.path.realpath(p).startswith(folder + os.sep))


def private_temp_plan(base) -> tuple:
    """``((temp folder, (kept, ...)), ...)`` for the shared temp folders: each child gets
    empty ones of its own, keeping the sandbox's folder ``base`` (the tree and the private
    folders) and Python's folders where they live below one (a clone in /tmp)."""
    needed = [os.path.realpath(base), *(str(p) for p in _python_folders())]
    plan = []
    for folder in SHARED_TEMP_FOLDERS:
        if os.path.isdir(folder) and not os.path.islink(folder):
            inside = sorted({p for p in needed if p.startswith(folder + os.sep)})
            plan.append((folder, tuple(p for p in inside if not any(p.startswith(q + os.sep) for q in inside))))
    return tuple(plan)
