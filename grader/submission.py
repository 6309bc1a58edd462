"""Read a submission: the student files from a folder or an archive, and nothing else.

Only ``pipeline.py`` and ``tensor_parallel.py`` are ever taken from a submission; every other
file in it (conftest.py, sitecustomize.py, a module shadowing torch) is ignored. An archive
(.zip, .tar.gz, .tgz, .tar; recognised by its content, whatever its name) is never extracted: the two files are read from it into memory,
each at most ``MAX_FILE_BYTES``. What students' tools write is accepted: Windows paths
(``hw\\pipeline.py``), macOS metadata (``__MACOSX/``, ``._pipeline.py``: skipped), a folder or
two around the files. What could do harm is refused with the reason: paths that leave the
folder (``../../etc``, ``/abs``), a student file that is a link or a device, an archive that
unpacks to more than ``MAX_UNPACKED_BYTES`` or holds more than ``MAX_ARCHIVE_ENTRIES`` entries.
"""
from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import os
import re
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, cast

from grader.layout import FILE_OF_PROBLEM, STUDENT_FILES, provided_names
from grader.protocol import one_line

MAX_FILE_BYTES = 1_000_000
# Archives a submission may be: what students upload, made on Windows, macOS or Linux.
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
# How each kind of archive begins (a plain tar says "ustar" at byte 257 instead).
ARCHIVE_MAGIC = ((b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"), (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"),
                 (b"\xfd7zXZ\x00", "xz"))
MAX_ARCHIVE_BYTES = 50_000_000
MAX_ARCHIVE_ENTRIES = 2_000
MAX_UNPACKED_BYTES = 200_000_000  # a .tar.gz is read as a stream: no more than this unpacked
# Folders above a student file in an archive: hw5/minitorch/pipeline.py is 2, a download of a
# repository inside a folder named after the student ("Alice - HW5/hw5-main/minitorch/") is 3.
MAX_DEPTH = 4


# What browsers and file managers make of a student file downloaded or copied again:
# "pipeline (1).py", "pipeline-2.py", "Copy of pipeline.py".
BROWSER_RENAME = re.compile(r"^(?:(?i:copy of) )?(?P<stem>.+?)(?: \(\d+\)|-\d+)?(?P<suffix>\.py)$")


def renamed_student_file(name: str) -> str | None:
    """The student file that ``name`` is a browser's rename of (``pipeline (1).py`` ->
    ``pipeline.py``), or None (the exact name itself is not a rename)."""
    match = BROWSER_RENAME.match(name)
    original = match["stem"] + match["suffix"] if match else None
    return original if original in STUDENT_FILES and original != name else None


def _renames(names: list[str], student_file: str, where: str) -> tuple[str | None, str | None]:
    """``(the one renamed copy of student_file among names, a note)``; with several copies,
    none is taken (which one did the student mean?) and the note says so."""
    renamed = sorted(n for n in names if renamed_student_file(PurePosixPath(n.replace("\\", "/")).name) == student_file)
    if len(renamed) == 1:
        return renamed[0], f"{student_file} from {renamed[0]}{where} (a browser's rename of {student_file})"
    if renamed:
        return None, (f"{student_file} not graded: {where.strip() or 'the submission'} holds several renamed copies "
                      f"({', '.join(renamed)}) and no {student_file}; keep one, named {student_file}")
    return None, None


class SubmissionNotFound(Exception):
    """PATH does not exist or is neither a folder, a .zip nor a student file (exit status 2)."""


@dataclass
class Submission:
    """The student files of one submission.

    ``files`` maps a student file name to its bytes. ``problem`` is set when the submission
    could not be read at all (a corrupt or unsafe zip): every criterion then scores 0 with
    that reason, on one line (it quotes names from the archive: :func:`grader.protocol.one_line`).
    ``notes`` says what was taken from where.
    """

    path: str
    files: dict[str, bytes] = field(default_factory=dict)
    problem: str | None = None
    notes: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

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


def _renamed_in_folder(folder: Path, name: str, submission: Submission) -> list[Path]:
    """The one browser-renamed ``name`` in the folder (or its minitorch/), when there is no ``name``."""
    for place in (folder, folder / "minitorch"):
        found, note = _renames(sorted(p.name for p in place.glob("*.py")) if place.is_dir() else [], name, "")
        if note is not None:
            submission.notes.append(note if found is None else note.replace(f" from {found}", f" from {(place / found).relative_to(folder)}"))
        if found is not None or note is not None:
            return [place / found] if found is not None else []
    return []


def _from_folder(folder: Path) -> Submission:
    submission = Submission(str(folder))
    for name in STUDENT_FILES:
        exact = [c for c in (folder / name, folder / "minitorch" / name) if os.path.lexists(c)]
        for candidate in exact or _renamed_in_folder(folder, name, submission):
            if os.path.lexists(candidate):
                try:
                    submission.files[name] = _read_regular_file(candidate)
                except (OSError, ValueError) as error:
                    submission.problem = one_line(f"cannot read {candidate}: {error}")
                    return submission
                if candidate.name == name:
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
            if name in STUDENT_FILES or renamed_student_file(name) or name in PROVIDED_NAMES or not name.endswith(CODE_SUFFIXES):
                continue
            if len(found) < limit:
                found.append(str((Path(root) / name).relative_to(folder)))
    return found


@dataclass
class _Member:
    """One entry of an archive: its stored name, its path parts (``\\`` read as a folder
    separator, as Windows tools write it), what it is, and its bytes once read."""

    name: str
    parts: tuple[str, ...]
    kind: str  # "file", "folder", "link" or "special" (device, fifo)
    size: int
    data: bytes | None = None


def is_macos_metadata(name: str) -> bool:
    """``__MACOSX/...``, ``._name`` and ``.DS_Store``: what macOS adds to the archives it makes."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    return bool(parts) and (parts[0] == "__MACOSX" or parts[-1].startswith("._") or parts[-1] == ".DS_Store")


def _parts(name: str) -> tuple[str, ...]:
    """The path parts of an archive entry; ValueError for a path that could leave a folder."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or ":" in name:
        raise ValueError(f"the archive holds an unsafe path {name!r}")
    return tuple(part for part in path.parts if part != ".")


def _choose(members: list[_Member], name: str) -> _Member | None:
    """The shallowest ``name`` among ``members``; ValueError when that is ambiguous or unsafe."""
    candidates = [m for m in members if m.parts and m.parts[-1] == name and m.kind != "folder"
                  and not is_macos_metadata(m.name) and len(m.parts) - 1 <= MAX_DEPTH]
    if not candidates:
        return None
    shallowest = min(len(m.parts) for m in candidates)
    found = [m for m in candidates if len(m.parts) == shallowest]
    if len(found) > 1:
        raise ValueError(f"the archive holds several {name} ({', '.join(m.name for m in found)}); keep only one")
    if found[0].kind != "file":
        kind = "device or pipe" if found[0].kind == "special" else found[0].kind
        raise ValueError(f"{found[0].name} in the archive is a {kind}, not a file")
    if found[0].size > MAX_FILE_BYTES:
        raise ValueError(f"{found[0].name} is {found[0].size} bytes; the limit is {MAX_FILE_BYTES}")
    return found[0]


def _choose_all(members: list[_Member], notes: list[str] | None = None) -> dict[str, _Member]:
    """Student file name -> the entry graded as that file (see :func:`_choose`); without the
    file itself, its one browser-renamed copy (a note in ``notes`` either way)."""
    chosen = {}
    for name in STUDENT_FILES:
        member = _choose(members, name)
        if member is None:
            named = [m.name for m in members if m.kind == "file" and not is_macos_metadata(m.name)]
            found, note = _renames(named, name, " in the archive")
            member = next((m for m in members if m.name == found), None)
            if note is not None and notes is not None:
                notes.append(note)
        if member is not None:
            chosen[name] = member
    return chosen


def _skipped(members: list[_Member]) -> list[str]:
    """What the archive holds that is never looked at, in words (the report's notes)."""
    said = []
    metadata = [m for m in members if is_macos_metadata(m.name)]
    if metadata:
        said.append(f"{len(metadata)} macOS metadata entries (__MACOSX/, ._ files)")
    unusual = [m.name for m in members if m.kind in ("link", "special") and not is_macos_metadata(m.name)]
    if unusual:
        said.append(f"{len(unusual)} links or special files ({', '.join(unusual[:5])})")
    return said


def _zip_members(archive: zipfile.ZipFile) -> list[_Member]:
    members = []
    for info in archive.infolist():
        mode = info.external_attr >> 16
        kind = "folder" if info.is_dir() else "link" if stat.S_ISLNK(mode) else "file"
        members.append(_Member(info.filename, _parts(info.filename), kind, info.file_size))
    return members


def _read_zip(path: Path, notes: list[str]) -> tuple[list[_Member], dict[str, _Member]]:
    with zipfile.ZipFile(path) as archive:
        if len(archive.infolist()) > MAX_ARCHIVE_ENTRIES:
            raise ValueError(f"the archive has {len(archive.infolist())} entries; the limit is {MAX_ARCHIVE_ENTRIES}")
        members = _zip_members(archive)
        chosen = _choose_all(members, notes)
        for member in chosen.values():
            with archive.open(member.name) as handle:
                member.data = handle.read(MAX_FILE_BYTES + 1)
    return members, chosen


class _Bounded:
    """A file object that refuses to give more than ``limit`` bytes: a .tar.gz that unpacks to
    gigabytes (a decompression bomb) is stopped, not read."""

    def __init__(self, stream, limit: int):
        self.stream, self.left, self.limit = stream, limit, limit

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(self.left + 1 if size is None or size < 0 else min(size, self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise ValueError(f"the archive unpacks to more than {self.limit} bytes")
        return data


def archive_kind(path: Path) -> str | None:
    """What kind of archive ``path`` holds, by its content, never its name (a browser or a
    student renames files: a gzip-compressed tar named ``.tar``, a zip named ``.tgz``):
    ``"zip"``, ``"gzip"``, ``"bzip2"``, ``"xz"`` (each a compressed tar) or ``"tar"``; None
    when it is none of them."""
    with open(path, "rb") as handle:
        head = handle.read(512)
    for magic, kind in ARCHIVE_MAGIC:
        if head.startswith(magic):
            return kind
    if len(head) == 512 and head[257:262] == b"ustar":
        return "tar"
    return None


def _tar_stream(path: Path, kind: str) -> io.BufferedIOBase:
    """The archive's tar bytes, decompressed as its content says."""
    opener = {"gzip": gzip.GzipFile, "bzip2": bz2.BZ2File, "xz": lzma.LZMAFile}.get(kind)
    return opener(path, "rb") if opener is not None else open(path, "rb")


def _tar_kind(info: tarfile.TarInfo) -> str:
    if info.isreg():
        return "file"
    if info.isdir():
        return "folder"
    return "link" if info.issym() or info.islnk() else "special"


def _read_tar(path: Path, kind: str, notes: list[str]) -> tuple[list[_Member], dict[str, _Member]]:
    """One pass over the archive as a stream, never extracted: the student files are read into
    memory as they pass (an archive can only be read in order)."""
    members: list[_Member] = []
    bounded = cast(IO[bytes], _Bounded(raw := _tar_stream(path, kind), MAX_UNPACKED_BYTES))  # read() is all tarfile's stream mode uses
    with raw, tarfile.open(fileobj=bounded, mode="r|") as archive:
        for info in archive:
            if len(members) >= MAX_ARCHIVE_ENTRIES:
                raise ValueError(f"the archive has more than {MAX_ARCHIVE_ENTRIES} entries")
            member = _Member(info.name, _parts(info.name), _tar_kind(info), info.size)
            student_file = member.parts and (member.parts[-1] in STUDENT_FILES or renamed_student_file(member.parts[-1]))
            if member.kind == "file" and student_file and member.size <= MAX_FILE_BYTES:
                handle = archive.extractfile(info)
                member.data = handle.read() if handle is not None else None
            members.append(member)
    return members, _choose_all(members, notes)


def _from_archive(path: Path) -> Submission:
    submission = Submission(str(path))
    try:
        if path.stat().st_size > MAX_ARCHIVE_BYTES:
            raise ValueError(f"the archive is {path.stat().st_size} bytes; the limit is {MAX_ARCHIVE_BYTES}")
        kind = archive_kind(path)
        if kind is None:
            raise ValueError("it is not a zip or tar archive (whatever its name says)")
        renames: list[str] = []
        members, chosen = _read_zip(path, renames) if kind == "zip" else _read_tar(path, kind, renames)
        for name, member in chosen.items():
            if member.data is None or len(member.data) > MAX_FILE_BYTES:
                raise ValueError(f"{member.name} unpacks to more than {MAX_FILE_BYTES} bytes")
            submission.files[name] = member.data
            if member.parts[-1] == name:
                submission.notes.append(f"{name} from {member.name} in {path.name}")
        submission.notes += [note.replace(" in the archive", f" in {path.name}") for note in renames]
        submission.ignored = [
            m.name for m in members
            if m.kind == "file" and m.name.endswith(CODE_SUFFIXES) and not is_macos_metadata(m.name)
            and m.parts[-1] not in PROVIDED_NAMES.union(STUDENT_FILES)
        ][:200]
        submission.skipped = _skipped(members)
    except (OSError, ValueError, RuntimeError, EOFError, NotImplementedError, zipfile.BadZipFile, tarfile.TarError, zlib.error) as error:
        submission.files.clear()
        submission.problem = one_line(f"cannot read the archive {path.name}: {error}")
    return submission


def load_submission(path: str | os.PathLike) -> Submission:
    """Collect the student files of a folder, a .zip, or a single student file.

    Raises:
        SubmissionNotFound: ``path`` does not exist, or is some other kind of file.
    """
    path = Path(path)
    if path.is_dir():
        return _from_folder(path)
    if path.is_file() and (path.name in STUDENT_FILES or renamed_student_file(path.name)):
        return _single_file(path)
    if path.is_file() and (path.name.lower().endswith(ARCHIVE_SUFFIXES) or _is_archive(path)):
        return _from_archive(path)
    if not path.exists():
        raise SubmissionNotFound(f"{path}: no such file or folder")
    raise SubmissionNotFound(
        f"{path}: expected a folder holding {' and/or '.join(STUDENT_FILES)}, an archive of one "
        f"({', '.join(ARCHIVE_SUFFIXES)}), or one of those files"
    )


def _is_archive(path: Path) -> bool:
    try:
        return archive_kind(path) is not None
    except OSError:
        return False


def _single_file(path: Path) -> Submission:
    submission = Submission(str(path))
    name = renamed_student_file(path.name) or path.name
    if name != path.name:
        submission.notes.append(f"{name} from {path.name} (a browser's rename of {name})")
    try:
        submission.files[name] = _read_regular_file(path)
    except (OSError, ValueError) as error:
        submission.problem = one_line(f"cannot read {path}: {error}")
    return submission
