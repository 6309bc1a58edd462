"""Canvas both ways: read its "Download Submissions" files, write its gradebook import.

**Download Submissions** gives one flat zip of every student's files, each renamed
``<name>_<user id>_<attachment id>_<original name>``, where ``<name>`` is the student's
sortable name squeezed into lower-case letters (``lovelaceada``), late work has ``_LATE``
after it (``lovelaceada_LATE_101_9001_pipeline.py``) and a file uploaded again under a name
the student used before gets ``-1``, ``-2``, ... before its extension (``pipeline-2.py``).
The third number belongs to the FILE (two files of one submission have two numbers; they
grow with time). :func:`group_download` groups the files by user id (the Canvas id, which
identifies the student, not the squeezed name), keeps the latest upload of each original
name, says which uploads it superseded, and carries the late mark.

**Gradebook import** (Grades > Import): ``Student, ID, SIS User ID, SIS Login ID, Section,
<assignment>``; Canvas matches a row by its ID, SIS User ID or SIS Login ID, and leaves a
student whose score cell is empty unchanged. The assignment header must be copied from a
gradebook export (``HW5 Model Parallelism (123456)``: the number is the assignment id).
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
# What a student folder's name may be, and the roster column it is matched against.
NAME_IS = {"login": "SIS Login ID", "sis": "SIS User ID", "canvas": "ID"}

DOWNLOAD_NAME = re.compile(
    r"^(?P<name>[^_/\\]+?)(?P<late>_(?i:late))?_(?P<canvas_id>\d+)_(?P<attachment_id>\d+)_(?P<original>[^/\\]+)$"
)
RESUBMISSION = re.compile(r"^(?P<stem>.+)-(?P<attempt>\d+)(?P<extension>(?:\.tar)?\.[A-Za-z0-9]+)?$")
ASSIGNMENT_ID = re.compile(r"\(\d+\)\s*$")


class RosterError(ValueError):
    """The roster file is not a Canvas gradebook export; the message says what is wrong."""


class OptionsError(ValueError):
    """The Canvas options do not fit together; the message says what to give."""


@dataclass(frozen=True)
class DownloadFile:
    """One file of a Canvas download, its name taken apart."""

    entry: str            # the file's name in the download
    name: str             # Canvas's squeezed sortable name of the student
    canvas_id: str        # the student's Canvas user id
    attachment_id: int    # the file's own id: two files of one submission have two, growing with time
    original: str         # the name the student uploaded, resubmission suffix removed
    attempt: int          # 0 for the first upload of that name, then 1, 2, ...
    late: bool


@dataclass
class CanvasSubmission:
    """One student's files in a Canvas download: the latest upload of each original name."""

    name: str
    canvas_id: str
    late: bool = False
    files: dict[str, DownloadFile] = field(default_factory=dict)  # original name -> file
    superseded: list[str] = field(default_factory=list)           # older uploads, not graded

    @property
    def student(self) -> str:
        """The name the batch gives this student: unique, and readable in a CSV."""
        return f"{self.name}_{self.canvas_id}"

    def note(self) -> str | None:
        """What was graded instead of what, when the student uploaded a name more than once."""
        if not self.superseded:
            return None
        graded = ", ".join(f.entry for f in self.files.values() if f.original in self._replaced())
        older = "older upload" if len(self.superseded) == 1 else "older uploads"
        return f"{self.student}: graded {graded}; {older} not graded: {', '.join(self.superseded)}"

    def _replaced(self) -> set[str]:
        return {parsed.original for entry in self.superseded if (parsed := parse_download_name(entry)) is not None}


def parse_download_name(entry: str) -> DownloadFile | None:
    """The parts of a Canvas download file name, or None when ``entry`` is not one."""
    match = DOWNLOAD_NAME.match(entry)
    if match is None:
        return None
    original, attempt = match["original"], 0
    resubmitted = RESUBMISSION.match(original)
    if resubmitted is not None:
        original = resubmitted["stem"] + (resubmitted["extension"] or "")
        attempt = int(resubmitted["attempt"])
    return DownloadFile(
        entry=entry, name=match["name"], canvas_id=match["canvas_id"], attachment_id=int(match["attachment_id"]),
        original=original, attempt=attempt, late=match["late"] is not None,
    )


def group_download(entries: list[str]) -> tuple[list[CanvasSubmission], list[str]]:
    """``(submissions sorted by student, entries that are not Canvas download names)``.

    Files of one user id make one submission, every original name graded. Of several uploads
    of one original name, the latest is graded: the highest resubmission number (``-N``), then
    the highest attachment id; the others are listed as ``superseded``.
    """
    by_student: dict[str, list[DownloadFile]] = {}
    others = []
    for entry in entries:
        parsed = parse_download_name(entry)
        if parsed is None:
            others.append(entry)
        else:
            by_student.setdefault(parsed.canvas_id, []).append(parsed)
    submissions = []
    for canvas_id, files in by_student.items():
        submission = CanvasSubmission(name=files[0].name, canvas_id=canvas_id)
        for file in sorted(files, key=lambda f: (f.attempt, f.attachment_id, f.entry)):
            previous = submission.files.get(file.original)
            if previous is not None:
                submission.superseded.append(previous.entry)
            submission.files[file.original] = file
        submission.late = any(f.late for f in submission.files.values())
        submissions.append(submission)
    return sorted(submissions, key=lambda s: s.student), others


@dataclass
class Roster:
    """A Canvas gradebook export: one dict per student, keyed by the export's headers."""

    path: Path
    people: list[dict[str, str]]
    possible: dict[str, str] = field(default_factory=dict)  # the export's "Points Possible" row

    def points_possible(self, assignment: str) -> float | None:
        """The assignment's points in Canvas, when the export says them."""
        try:
            return float(self.possible.get(assignment, "").strip())
        except ValueError:
            return None

    def match(self, key: str, columns: tuple[str, ...]) -> list[dict[str, str]]:
        """Every distinct person whose value in one of ``columns`` is ``key``."""
        found = [p for p in self.people if any((p.get(c) or "").strip() == key for c in columns)]
        return [dict(t) for t in dict.fromkeys(tuple(p.items()) for p in found)]


def read_roster(path: Path) -> Roster:
    """Read a gradebook export (Grades > Export). Rows without a numeric ID (the "Points
    Possible" line) are not students.

    Raises:
        RosterError: a missing column, or no student at all.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in IDENTITY[:4] if c not in (reader.fieldnames or [])]
            if missing:
                raise RosterError(
                    f"roster {path}: no column {', '.join(repr(c) for c in missing)}; expected a Canvas gradebook "
                    f"export (Grades > Export) whose header starts with {', '.join(IDENTITY)}"
                )
            rows = list(reader)
            people = [row for row in rows if (row.get("ID") or "").strip().isdigit()]
            possible = next((row for row in rows if (row.get("Student") or "").strip() == "Points Possible"), {})
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RosterError(f"roster {path}: cannot read it: {error}") from None
    if not people:
        raise RosterError(f"roster {path}: no student rows (a row needs a numeric Canvas ID)")
    return Roster(path, people, possible)


def identify(student: str, canvas_id: str, roster: Roster | None, name_is: str | None) -> tuple[list[str], str | None]:
    """``(Canvas identity columns, problem)`` for one student of the batch.

    A student from a Canvas download is matched by its Canvas id; a folder by its name,
    against the column ``name_is`` says, or against SIS Login ID, SIS User ID and ID when
    it says nothing. ``problem`` is None, ``"not_in_roster"`` or ``"ambiguous_identity"``
    (the name matches several people); a row with a problem must not get a score.
    Without a roster the identity is the Canvas id, or the folder name in ``name_is``'s column.
    """
    columns: tuple[str, ...]
    if canvas_id:
        key, columns = canvas_id, ("ID",)
    else:
        key, columns = student, (NAME_IS[name_is],) if name_is else tuple(NAME_IS.values())
    if roster is None:
        row = dict.fromkeys(IDENTITY, "")
        row["Student"] = student
        row[columns[0]] = key
        return [row[c] for c in IDENTITY], None
    people = roster.match(key, columns)
    if len(people) == 1:
        return [people[0].get(c, "") for c in IDENTITY], None
    return [student, "", "", "", ""], "not_in_roster" if not people else "ambiguous_identity"


def import_rows(assignment: str, students: list[tuple[list[str], float | None]]) -> list[list]:
    """Canvas's import layout from ``(identity columns, score or None)`` pairs."""
    return [[*IDENTITY, assignment], *([*identity, score] for identity, score in students)]


def assignment_warning(assignment: str) -> str | None:
    """Why ``assignment`` may not match an existing Canvas column, or None."""
    if ASSIGNMENT_ID.search(assignment):
        return None
    return (f"--assignment {assignment!r} has no assignment id in parentheses: Canvas matches the column by "
            "name alone, or creates a new assignment; copy the header from a gradebook export, e.g. 'HW5 (123456)'")


def points_warning(assignment: str, out_of: set[tuple[float, float]], without_gpu: bool, possible: float | None,
                   roster: Path | None) -> str | None:
    """Advice when the Canvas file's scores do not fit the assignment's points in Canvas, or
    None when they do.

    ``out_of``: each student's ``(max_score, blocked points)``. With ``without_gpu``
    (``--canvas-without-gpu``) a score with blocked criteria is the CPU score, out of
    ``max_score - blocked``; without it, the cell waits for the GPU merge and the score will
    be out of ``max_score``. ``possible``: the assignment's Points Possible from the roster
    ``roster`` (None: not known, so the advice says what to check).
    """
    totals = {total - (blocked if without_gpu else 0) for total, blocked in out_of}
    if not totals:
        return None
    listed = ", ".join(f"{total:g}" for total in sorted(totals))
    if possible is None:
        where = f"{roster} has no Points Possible row" if roster is not None else "no --roster"
        return (f"the Canvas file's scores are out of {listed}; the assignment's points cannot be checked ({where}): "
                f"make sure {assignment!r} is worth {listed} points in Canvas")
    if totals == {possible}:
        return None
    flipped = {total - (0 if without_gpu else blocked) for total, blocked in out_of}
    hint = ""
    if flipped == {possible}:
        hint = (" (or grade without --canvas-without-gpu: the GPU merge completes the scores)" if without_gpu else
                " (or, for a class graded without GPUs, pass --canvas-without-gpu: the CPU score out of the CPU points)")
    return (f"WARNING: the scores are out of {listed} but the Canvas assignment {assignment!r} is worth {possible:g} points "
            f"(its Points Possible in {roster}): change one of them before importing{hint}")
