"""Read a submission: the student files from a folder or a .zip, and nothing else.

Only ``pipeline.py`` and ``tensor_parallel.py`` are ever taken from a submission; every other
file in it (conftest.py, sitecustomize.py, a module shadowing torch) is ignored. A zip is
never extracted: the two files are read from it into memory, each at most
``MAX_FILE_BYTES``, so paths inside it (``../../etc``) and zip bombs cannot do harm.
"""
from __future__ import annotations

import hashlib
import os
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from grader.layout import FILE_OF_PROBLEM, STUDENT_FILES, provided_names

MAX_FILE_BYTES = 1_000_000
MAX_ZIP_BYTES = 50_000_000
MAX_ZIP_ENTRIES = 2_000
# Where a student file may sit: at the top, in minitorch/, or one folder deeper than that
# (a zip of the folder itself: hw5/minitorch/pipeline.py).
MAX_DEPTH = 2


class SubmissionNotFound(Exception):
    """PATH does not exist or is neither a folder, a .zip nor a student file (exit status 2)."""


@dataclass
class Submission:
    """The student files of one submission.

    ``files`` maps a student file name to its bytes. ``problem`` is set when the submission
    could not be read at all (a corrupt or unsafe zip): every criterion then scores 0 with
    that reason. ``notes`` says what was taken from where.
    """

    path: str
    files: dict[str, bytes] = field(default_factory=dict)
    problem: str | None = None
    notes: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def missing(self) -> list[str]:
        return [name for name in STUDENT_FILES if name not in self.files]

    def missing_file_for(self, problem: str) -> str | None:
        """The student file that ``problem`` (e.g. ``"3.2"``) is written in, if it was not submitted."""
        name = FILE_OF_PROBLEM.get(problem.split(".")[0])
        return name if name is not None and name not in self.files else None

    def sha256(self) -> dict[str, str]:
        return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(self.files.items())}


def _read_regular_file(path: Path) -> bytes:
    """The bytes of ``path``; refuses links and special files (no reading /etc/shadow as root)."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path.name} is not a regular file (a link or a device?)")
    if info.st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path.name} is {info.st_size} bytes; the limit is {MAX_FILE_BYTES}")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES]


def _from_folder(folder: Path) -> Submission:
    submission = Submission(str(folder))
    for name in STUDENT_FILES:
        for candidate in (folder / name, folder / "minitorch" / name):
            if os.path.lexists(candidate):
                try:
                    submission.files[name] = _read_regular_file(candidate)
                except (OSError, ValueError) as error:
                    submission.problem = f"cannot read {candidate}: {error}"
                    return submission
                submission.notes.append(f"{name} from {candidate.relative_to(folder)}")
                break
    submission.ignored = _other_files(folder)
    return submission


# Kinds of file that could change how Python or pytest runs if they were ever used (they never
# are: only the student files are copied); the report names them so a TA sees the attempt.
CODE_SUFFIXES = (".py", ".pth", ".ini", ".cfg", ".toml", ".so")
PROVIDED_NAMES = provided_names()


def _other_files(folder: Path, limit: int = 200) -> list[str]:
    """Code and configuration files of the submission folder other than the student files
    and copies of the provided modules (never used; reported)."""
    found: list[str] = []
    for root, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if f not in ("__pycache__", ".git"))
        for name in sorted(files):
            if name in STUDENT_FILES or name in PROVIDED_NAMES or not name.endswith(CODE_SUFFIXES):
                continue
            if len(found) < limit:
                found.append(str((Path(root) / name).relative_to(folder)))
    return found


def _zip_member(archive: zipfile.ZipFile, name: str) -> zipfile.ZipInfo | None:
    """The shallowest entry called ``name``; ValueError when that is ambiguous."""
    candidates = []
    for info in archive.infolist():
        parts = PurePosixPath(info.filename).parts
        if info.is_dir() or not parts or parts[-1] != name or parts[0] == "__MACOSX":
            continue
        if len(parts) - 1 <= MAX_DEPTH:
            candidates.append((len(parts), info))
    if not candidates:
        return None
    shallowest = min(depth for depth, _ in candidates)
    found = [info for depth, info in candidates if depth == shallowest]
    if len(found) > 1:
        names = ", ".join(info.filename for info in found)
        raise ValueError(f"the zip holds several {name} ({names}); keep only one")
    return found[0]


def _check_entries(archive: zipfile.ZipFile) -> None:
    entries = archive.infolist()
    if len(entries) > MAX_ZIP_ENTRIES:
        raise ValueError(f"the zip has {len(entries)} entries; the limit is {MAX_ZIP_ENTRIES}")
    for info in entries:
        path = PurePosixPath(info.filename.replace("\\", "/"))
        if path.is_absolute() or ".." in path.parts or ":" in info.filename:
            raise ValueError(f"the zip holds an unsafe path {info.filename!r}")


def _from_zip(path: Path) -> Submission:
    submission = Submission(str(path))
    try:
        if path.stat().st_size > MAX_ZIP_BYTES:
            raise ValueError(f"the zip is {path.stat().st_size} bytes; the limit is {MAX_ZIP_BYTES}")
        with zipfile.ZipFile(path) as archive:
            _check_entries(archive)
            submission.ignored = [
                i.filename for i in archive.infolist()
                if not i.is_dir() and i.filename.endswith(CODE_SUFFIXES)
                and PurePosixPath(i.filename).name not in PROVIDED_NAMES.union(STUDENT_FILES)
            ][:200]
            for name in STUDENT_FILES:
                info = _zip_member(archive, name)
                if info is None:
                    continue
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise ValueError(f"{info.filename} in the zip is a symbolic link")
                if info.file_size > MAX_FILE_BYTES:
                    raise ValueError(f"{info.filename} is {info.file_size} bytes; the limit is {MAX_FILE_BYTES}")
                with archive.open(info) as member:
                    data = member.read(MAX_FILE_BYTES + 1)
                if len(data) > MAX_FILE_BYTES:
                    raise ValueError(f"{info.filename} unpacks to more than {MAX_FILE_BYTES} bytes")
                submission.files[name] = data
                submission.notes.append(f"{name} from {info.filename} in the zip")
    except (OSError, ValueError, RuntimeError, EOFError, NotImplementedError, zipfile.BadZipFile) as error:
        submission.files.clear()
        submission.problem = f"cannot read the zip {path.name}: {error}"
    return submission


def load_submission(path: str | os.PathLike) -> Submission:
    """Collect the student files of a folder, a .zip, or a single student file.

    Raises:
        SubmissionNotFound: ``path`` does not exist, or is some other kind of file.
    """
    path = Path(path)
    if path.is_dir():
        return _from_folder(path)
    if path.is_file() and path.suffix.lower() == ".zip":
        return _from_zip(path)
    if path.is_file() and path.name in STUDENT_FILES:
        return _single_file(path)
    if not path.exists():
        raise SubmissionNotFound(f"{path}: no such file or folder")
    raise SubmissionNotFound(
        f"{path}: expected a folder holding {' and/or '.join(STUDENT_FILES)}, a .zip of one, or one of those files"
    )


def _single_file(path: Path) -> Submission:
    submission = Submission(str(path))
    try:
        submission.files[path.name] = _read_regular_file(path)
    except (OSError, ValueError) as error:
        submission.problem = f"cannot read {path}: {error}"
    return submission
