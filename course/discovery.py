"""Which entries of a submissions folder are students (for ``batch`` and ``slurm``).

A student is a subfolder, a ``.zip``, ``.tar.gz`` or ``.tgz`` (named after the folder or the
archive's stem), or the files of one Canvas id in a Canvas "Download Submissions" layout
(the zip itself, or the folder it was unpacked into; see course.canvas). Canvas students are
unpacked into ``unpack_to/<name>/``: their loose files under their original names, so the
grader reads them like any folder, or the archive they uploaded. ``__MACOSX`` and hidden
entries are skipped, and so is any other file; :func:`discover` says what it skipped.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import zipfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from course import canvas
from grader.submission import MAX_ARCHIVE_BYTES, STUDENT_FILES, SubmissionNotFound, load_submission, renamed_student_file

ARCHIVES = (".zip", ".tar.gz", ".tgz")
GRADESCOPE_METADATA = "submission_metadata.json"
MAX_DOWNLOAD_ENTRIES = 100_000


class Student(NamedTuple):
    """One student to grade: ``name`` (the CSV's student column), ``path`` (a folder or an
    archive), ``flags`` found before grading, the Canvas id when Canvas named the files, and
    when it was submitted where the source says (ISO 8601; see course.late)."""

    name: str
    path: Path
    flags: list[str]
    canvas_id: str = ""
    submitted_at: str = ""


class DiscoveryError(ValueError):
    """The submissions source cannot be read at all (not a folder, not a Canvas download)."""


def safe_file_name(name: str) -> str:
    """``name`` with only letters, digits, ``-``, ``_`` and ``.``; never hidden, never empty."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".") or "student"


def archive_stem(name: str) -> str | None:
    """``alice`` for ``alice.zip``, ``alice.tar.gz`` or ``alice.tgz``; None for other names."""
    for suffix in ARCHIVES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def discover(source: Path, unpack_to: Path) -> tuple[list[Student], list[str]]:
    """``(students sorted by name, notes)``: notes say what was skipped and what Canvas gave.

    Raises:
        DiscoveryError: ``source`` is neither a folder nor a readable Canvas download zip.
    """
    if source.is_file() and source.suffix.lower() == ".zip":
        return _from_download_zip(source, unpack_to)
    if not source.is_dir():
        raise DiscoveryError(f"{source}: expected a folder of submissions or a Canvas download .zip")
    plain, downloaded, notes = [], [], []
    for path in sorted(source.iterdir()):
        if path.name == "__MACOSX":
            notes.append("skipped __MACOSX/ (macOS metadata, not a student)")
        elif path.name.startswith("."):
            notes.append(f"skipped {path.name} (hidden)")
        elif path.is_file() and canvas.parse_download_name(path.name) is not None:
            downloaded.append(path.name)
        elif path.is_dir():
            plain.append((path.name, path))
        elif path.is_file() and (stem := archive_stem(path.name)):
            plain.append((stem, path))
        else:
            notes.append(f"skipped {path.name} (not a folder, .zip, .tar.gz or .tgz)")
    students = [Student(name, path, _archive_flags(path), submitted_at=_submitted_at(path)) for name, path in plain]
    if downloaded:
        submissions, _ = canvas.group_download(downloaded)
        students += _unpack_all(submissions, lambda entry: _read_file(source / entry), unpack_to, notes)
    return _unique_names(students), notes


def _from_download_zip(source: Path, unpack_to: Path) -> tuple[list[Student], list[str]]:
    try:
        with zipfile.ZipFile(source) as archive:
            infos = [i for i in archive.infolist() if not i.is_dir()]
            if len(infos) > MAX_DOWNLOAD_ENTRIES:
                raise DiscoveryError(f"{source}: {len(infos)} entries; the limit is {MAX_DOWNLOAD_ENTRIES}")
            flat = {i.filename: i for i in infos if "/" not in i.filename and "\\" not in i.filename}
            submissions, others = canvas.group_download(sorted(flat))
            notes = [f"skipped {name} in {source.name} (not a Canvas download name)" for name in others]
            notes += _nested_notes(source, [i.filename for i in infos if i.filename not in flat])
            if not submissions:
                raise DiscoveryError(
                    f"{source}: no file named like a Canvas download (<name>_<user id>_<attachment id>_<file>); "
                    "for a zip of student folders, unzip it and give the folder"
                )
            students = _unpack_all(submissions, lambda entry: _read_member(archive, flat[entry]), unpack_to, notes)
    except (OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError) as error:
        raise DiscoveryError(f"{source}: cannot read the zip: {error}") from None
    return _unique_names(students), notes


def _nested_notes(source: Path, names: list[str]) -> list[str]:
    tops = sorted({PurePosixPath(n.replace("\\", "/")).parts[0] for n in names})
    return [f"skipped {top}/ in {source.name} (a Canvas download is flat)" for top in tops]


def _unpack_all(
    submissions: list[canvas.CanvasSubmission], read: Callable[[str], bytes], unpack_to: Path, notes: list[str]
) -> list[Student]:
    unpack_to.mkdir(parents=True, exist_ok=True)
    students = [_unpack(submission, read, unpack_to) for submission in submissions]
    late = sum(s.late for s in submissions)
    older = sum(len(s.superseded) for s in submissions)
    notes.append(
        f"Canvas download: {len(submissions)} students ({late} late), unpacked into {unpack_to}; "
        f"{older} older upload(s) not graded"
    )
    notes += [note for s in submissions if (note := s.note()) is not None]
    return students


def _unpack(submission: canvas.CanvasSubmission, read: Callable[[str], bytes], unpack_to: Path) -> Student:
    """Write one Canvas student's latest files under their original names."""
    folder = unpack_to / safe_file_name(submission.student)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    flags = ["late"] if submission.late else []
    for original, file in sorted(submission.files.items()):
        # a browser's rename ("pipeline (1).py") keeps its name, for the grader to recognise
        name = original if renamed_student_file(original) else safe_file_name(original)
        try:
            (folder / name).write_bytes(read(file.entry))
        except (OSError, ValueError) as error:
            flags += [f"unreadable_file:{safe_file_name(original)}", "needs_review"]
            (folder / f"{safe_file_name(original)}.unreadable.txt").write_text(f"{file.entry}: {error}\n")
    path = folder
    archives = sorted((f.attempt, name) for name, f in submission.files.items() if archive_stem(name))
    if archives and not any(name in submission.files for name in STUDENT_FILES):
        path = folder / safe_file_name(archives[-1][1])  # the student uploaded an archive: grade it
        if len(archives) > 1:
            flags += ["several_archives", "needs_review"]
        flags += _archive_flags(path)
    return Student(submission.student, path, flags, submission.canvas_id)


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    if stat.S_ISLNK(info.external_attr >> 16):
        raise ValueError("a symbolic link")
    with archive.open(info) as member:
        data = member.read(MAX_ARCHIVE_BYTES + 1)
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ValueError(f"larger than {MAX_ARCHIVE_BYTES} bytes")
    return data


def _read_file(path: Path) -> bytes:
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file (a link?)")
    if info.st_size > MAX_ARCHIVE_BYTES:
        raise ValueError(f"larger than {MAX_ARCHIVE_BYTES} bytes")
    return path.read_bytes()


def _submitted_at(path: Path) -> str:
    """When a student folder's submission was made, from Gradescope's ``submission_metadata.json``
    in it (its ``created_at``, with its UTC offset), as ISO 8601; "" without one."""
    try:
        created = json.loads((path / GRADESCOPE_METADATA).read_text(encoding="utf-8"))["created_at"]
        when = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    return when.isoformat() if when.tzinfo is not None else ""


def _archive_flags(path: Path) -> list[str]:
    """A tar archive this grader cannot read is flagged now, not discovered by a failed run."""
    if not path.name.lower().endswith((".tar.gz", ".tgz")):
        return []
    try:
        load_submission(path)
    except SubmissionNotFound:
        return ["tar_not_supported", "needs_review"]
    return []


def _unique_names(students: list[Student]) -> list[Student]:
    """Sorted by name; a second student of the same name (alice/ and alice.zip) keeps its
    full entry name and is flagged."""
    seen, unique = set(), []
    for student in sorted(students, key=lambda s: (s.name, str(s.path))):
        if student.name in seen:
            student = student._replace(name=student.path.name, flags=[*student.flags, "duplicate_name", "needs_review"])
        seen.add(student.name)
        unique.append(student)
    return sorted(unique, key=lambda s: s.name)
