"""The grader's vocabulary and its one report format (standard library only).

- :class:`Status`: what a criterion ended as.
- :class:`Kind`: what a child's run produced; the child itself may only report the
  ``REPORTED_BY_CHILD`` kinds, in an envelope ``{"kind": ..., ...}`` (see grader.child).
- :func:`check_envelope`: a child's report, checked field by field before anyone uses it
  (it is data from a process the student controls).
- :class:`Result` / :class:`Report`: one grading run, and the JSON report they become
  (:func:`as_json`, :func:`write_json_report`) and are read back from
  (:func:`read_json_report`, used by the batch runner): writer and reader side by side.
- :func:`capped`, :func:`storable`, :func:`printable` and :func:`one_line`: text from a child
  is capped and made writable as UTF-8 when it enters a report, and its control characters
  are escaped on the way out (terminal, CSV, Gradescope, the dashboard); a name from a
  submission (a file, a folder, a student) is shown on one line, its line breaks escaped too.
  Every cap counts the bytes a text takes once escaped (:func:`escaped_bytes`), never its
  characters: a control character is six bytes in JSON, a character beyond the BMP twelve.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

SCHEMA_VERSION = 1
MAX_REPORT_BYTES = 10_000_000  # what a reader accepts
WRITTEN_REPORT_BYTES = MAX_REPORT_BYTES // 2  # what a writer writes: two reports merged still read back
# Caps, in bytes once escaped (see escaped_bytes):
MESSAGE_BYTES = 16_000  # a criterion's message (a traceback fits)
OUTPUT_BYTES = 96_000  # what a child printed (the harness keeps its last 64 KB)
NOTE_BYTES = 2_000  # one note or review reason of a report
DETAILS_BYTES = 16_000  # a criterion's details, all together
NAME_BYTES = 400  # one name the child reports (a replaced object's)


class _Text(str, Enum):
    """An enum whose members are their strings (in JSON, f-strings and comparisons)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Status(_Text):
    PASSED = "passed"  # full points
    FAILED = "failed"  # the submission's fault; the message says why in the student's terms
    TIMEOUT = "timeout"  # the criterion's time ran out; its processes were killed
    BLOCKED = "blocked"  # this machine lacks the hardware: never counted as a failure
    ERROR = "error"  # the grader itself broke: loud, never a silent zero


class Kind(_Text):
    OBSERVATION = "observation"  # what observe_<name> saw, for the parent to judge
    FAIL = "fail"  # observe_<name> raised Fail: a fact only the child could judge
    EXCEPTION = "exception"  # the student's code raised
    GARBAGE = "garbage"  # the child handed back something that is not plain data
    GRADER_ERROR = "grader-error"  # the child's own set-up broke
    TIMEOUT = "timeout"  # (parent) the child ran out of time
    FLOOD = "flood"  # (parent) the child's output, or a file it wrote, reached the size limit on its files
    EXITED = "exited"  # (parent) the child ended without reporting
    MEMORY = "memory"  # (parent) the criterion's processes together passed the memory bound and were stopped


REPORTED_BY_CHILD = frozenset({Kind.OBSERVATION, Kind.FAIL, Kind.EXCEPTION, Kind.GARBAGE, Kind.GRADER_ERROR})

# The fields of a child's envelope, per kind: name -> (types allowed, required). Every kind
# may also carry ``tampered``: the names the child saw replaced while the student's code ran.
_TEXT, _OPTIONAL_TEXT, _FLAG = ((str,), True), ((str, type(None)), False), ((bool,), True)
ENVELOPE_FIELDS: dict[Kind, dict[str, tuple[tuple[type, ...], bool]]] = {
    Kind.OBSERVATION: {},  # plus ``observation``: the judge reads it through grader.checks.observed
    Kind.FAIL: {"message": _TEXT},
    Kind.EXCEPTION: {"type": _TEXT, "module_not_found": _OPTIONAL_TEXT, "not_implemented": _FLAG,
                     "message": _TEXT, "traceback": _TEXT},
    Kind.GARBAGE: {"message": _TEXT},
    Kind.GRADER_ERROR: {"message": _TEXT},
}
TAMPERED_NAMES = 20  # most names of replaced objects an envelope keeps


def check_envelope(value: object) -> dict:
    """A child's envelope with exactly the fields of its kind, of the right types, its text
    capped and storable (see :func:`storable`).

    Raises:
        ValueError: saying what is wrong with it (the child's report is then garbage: a
            forged or broken report is the student's failure, never a grader error).
    """
    if type(value) is not dict:
        raise ValueError(f"it is a {type(value).__name__}, not a mapping")
    kind = value.get("kind")
    if type(kind) is not str or kind not in REPORTED_BY_CHILD:
        raise ValueError(f"its kind is {storable(repr(kind), 80)}")
    checked: dict = {"kind": kind}
    for name, (types, required) in ENVELOPE_FIELDS[Kind(kind)].items():
        field_value = value.get(name)
        if type(field_value) not in types or (required and field_value is None):
            raise ValueError(f"its {name!r} is a {type(field_value).__name__}")
        checked[name] = storable(field_value, MESSAGE_BYTES) if type(field_value) is str else field_value
    if kind == Kind.OBSERVATION:
        if "observation" not in value:
            raise ValueError("it has no observation")
        checked["observation"] = value["observation"]
    tampered = value.get("tampered", [])
    if type(tampered) is not list or not all(type(name) is str for name in tampered):
        raise ValueError("its 'tampered' is not a list of names")
    if tampered:
        checked["tampered"] = [storable(name, NAME_BYTES) for name in tampered[:TAMPERED_NAMES]]
    return checked


# Control characters (C0 but tab and newline, DEL, C1), the bidirectional controls that
# reorder text on screen and Unicode's line and paragraph separators: shown as escapes, never
# sent to a terminal, a spreadsheet or a page.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
# ... and on one line (a name), tab and newline as well.
_NOT_ON_ONE_LINE = re.compile("[\t\n]")


def _escape(match: re.Match) -> str:
    return ascii(match.group())[1:-1]


def _widest(character: str) -> int:
    """Bytes ``character`` takes in the widest of its views: as JSON writes it (ASCII only) and as
    JSON writes what :func:`printable` and :func:`one_line` make of it."""
    shown = _NOT_ON_ONE_LINE.sub(_escape, _UNPRINTABLE.sub(_escape, character))
    return max(len(json.dumps(character)), len(json.dumps(shown))) - 2


# The characters the views escape, with their widths (any other: 1 byte if ASCII, 6 within the
# BMP, 12 beyond), and those some view shows wider than JSON does (DEL: 1 byte in JSON, \\x7f shown).
_ESCAPED_BYTES = {character: _widest(character) for character in map(chr, [
    *range(128), *range(0x80, 0xA0), 0x61C, 0x200E, 0x200F, *range(0x2028, 0x202F), *range(0x2066, 0x206A)])}
_WIDER_THAN_JSON = {character: extra for character, size in _ESCAPED_BYTES.items()
                    if (extra := size - (len(json.dumps(character)) - 2)) > 0}
_CHUNK = 1024  # characters measured at once while looking for where to cut


def _character_bytes(character: str) -> int:
    known = _ESCAPED_BYTES.get(character)
    if known is not None:
        return known
    return 12 if ord(character) > 0xFFFF else 6  # beyond the BMP: a surrogate pair of \\uXXXX escapes


def escaped_bytes(text: str) -> int:
    """The bytes ``text`` can take once escaped: in a JSON report (``\\u0001`` for a control
    character, ``\\ud83d\\ude00`` for an emoji) or in the Gradescope results, the terminal or the
    CSV (:func:`printable`, :func:`one_line`, then JSON), whichever is widest."""
    extra = sum(wider * text.count(character) for character, wider in _WIDER_THAN_JSON.items())
    return len(json.dumps(text)) - 2 + extra


def capped(text: str, limit: int, beyond: int = 0) -> str:
    """``text`` cut to at most ``limit`` bytes once escaped (:func:`escaped_bytes`), saying how
    many characters were left out (``beyond``: that many more were cut off before). A limit
    below the length of that saying leaves only the saying."""
    if not beyond and (len(text) * 12 <= limit or (len(text) <= limit and escaped_bytes(text) <= limit)):
        return text  # (no character takes more than 12 bytes, or less than 1)
    room = limit - len(f"... [{len(text) + beyond} more characters]")
    kept = used = 0
    while kept < len(text) and used + (size := escaped_bytes(text[kept : kept + _CHUNK])) <= room:
        kept, used = kept + _CHUNK, used + size
    for character in text[kept : kept + _CHUNK]:  # the chunk that crosses the limit, one by one
        used += _character_bytes(character)
        if used > room:
            break
        kept += 1
    kept = min(kept, len(text))
    if not beyond and kept == len(text):
        return text
    return f"{text[:kept]}... [{len(text) - kept + beyond} more characters]"


def storable(text: str, limit: int) -> str:
    """``text`` capped at ``limit`` bytes (see :func:`capped`), with lone surrogates
    (``"\\ud800"``: valid in a Python string, not in UTF-8) written as backslash escapes, so every
    report can be written whatever a child produced."""
    head = text[: limit + 1]  # no more can fit: every character takes a byte at least
    safe = head.encode("utf-8", "backslashreplace").decode("utf-8")
    return capped(safe, limit, len(text) - len(head))


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b``): what a student's code printed or
    raised cannot move the cursor, ring the bell or restyle a TA's terminal. Its lines stay lines."""
    return _UNPRINTABLE.sub(_escape, text.encode("utf-8", "backslashreplace").decode("utf-8"))


def one_line(text: str) -> str:
    """``text`` as :func:`printable` shows it, and on one line (``\\n``, ``\\t``): a name from a
    submission (a file in an archive, a folder, a student) cannot start a line of its own in a
    TA's summary, a CSV or a page, where it could pass for the grader's own."""
    return _NOT_ON_ONE_LINE.sub(_escape, printable(text))


def format_points(value: float) -> str:
    return f"{value:g}"


def points_phrase(value: float) -> str:
    """``1 point``, ``2.5 points``."""
    return f"{format_points(value)} point{'' if value == 1 else 's'}"


@dataclass
class Result:
    """The outcome of one criterion, as the reports show it."""

    id: str
    problem: str
    title: str
    points: float
    earned: float
    status: Status
    message: str
    seconds: float
    output: str = ""
    details: dict = field(default_factory=dict)
    fingerprint: str = ""  # of what decided the result (grader.grading.check_fingerprint)

    def __post_init__(self) -> None:
        self.message = storable(self.message, MESSAGE_BYTES)
        self.output = storable(self.output, OUTPUT_BYTES)
        self.details = bounded_details(self.details)


def bounded_details(details: dict) -> dict:
    """``details`` with each text capped, or in place of all of it a line saying how large it
    was when that is still more than :data:`DETAILS_BYTES`."""

    def bounded(value):
        if isinstance(value, str):
            return storable(value, DETAILS_BYTES // 4)
        if isinstance(value, dict):
            return {key: bounded(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [bounded(item) for item in value]
        return value

    details = bounded(details)
    size = len(json.dumps(details, default=str))
    return details if size <= DETAILS_BYTES else {"left_out": f"details of {size} bytes (the report keeps {DETAILS_BYTES})"}


@dataclass
class Report:
    submission: str
    files: dict
    environment: dict
    seed: int
    results: list[Result] = field(default_factory=list)
    planned: int = 0
    complete: bool = False
    child_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    policy_findings: list[dict] = field(default_factory=list)
    review: list[str] = field(default_factory=list)
    rubric: dict = field(default_factory=dict)  # the rubric it was graded with (grader.grading.rubric_fingerprint)

    @property
    def needs_review(self) -> bool:
        """A person should look at this submission (the score stands until they do)."""
        return bool(self.review)

    @property
    def score(self) -> float:
        return sum(r.earned for r in self.results)

    @property
    def max_score(self) -> float:
        """Points of every graded criterion, blocked ones included."""
        return sum(r.points for r in self.results)

    @property
    def blocked_points(self) -> float:
        return sum(r.points for r in self.results if r.status == Status.BLOCKED)

    def count(self, status: Status) -> int:
        return sum(r.status == status for r in self.results)

    def flag(self, reason: str) -> None:
        """Ask the course staff to look at this submission, for ``reason`` (once)."""
        reason = storable(reason, NOTE_BYTES)
        if reason not in self.review:
            self.review.append(reason)

    def note(self, text: str) -> None:
        """Add a note (capped: notes may quote what a child did)."""
        self.notes.append(storable(text, NOTE_BYTES))


def as_json(report: Report) -> dict:
    """The ``--json`` report."""
    return {
        "schema_version": SCHEMA_VERSION,
        "submission": report.submission,
        "files": report.files,
        "environment": report.environment,
        "score": report.score,
        "max_score": report.max_score,
        "blocked_points": report.blocked_points,
        "complete": report.complete,
        "seed": report.seed,
        "notes": report.notes,
        "needs_review": report.needs_review,
        "review_reasons": report.review,
        "policy_findings": [{key: storable(value, NOTE_BYTES) if isinstance(value, str) else value
                             for key, value in finding.items()} for finding in report.policy_findings],
        "rubric": report.rubric,
        "criteria": [asdict(result) for result in report.results],
    }


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and os.replace: never half a file."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def write_json_report(report: Report, path: str | os.PathLike) -> None:
    write_atomic(path, report_text(as_json(report)))


def report_text(data: dict) -> str:
    """A JSON report (:func:`as_json`'s, or two merged: a regrade, a GPU run) as the file to
    write, within :data:`WRITTEN_REPORT_BYTES`: each text has its cap, but a rubric may have
    many criteria and a merge adds notes, so when the whole is still too large, what the
    criteria printed, then their messages, are cut further, evenly, and a note says so.

    Raises:
        ValueError: when even that leaves it too large (thousands of criteria).
    """
    text = json.dumps(data, indent=2) + "\n"
    if len(text) <= WRITTEN_REPORT_BYTES:
        return text
    criteria = [c for c in data.get("criteria", []) if isinstance(c, dict)]
    notes = data["notes"] = [*data.get("notes", []), "this report was too large: what the criteria printed, their "
                             "messages and details were cut to fit (the limits are per criterion and per report)"]
    for key in ("output", "message"):
        limit = max((escaped_bytes(c[key]) for c in criteria if isinstance(c.get(key), str)), default=0)
        while len(text) > WRITTEN_REPORT_BYTES and limit > 0:
            limit //= 2
            for criterion in criteria:
                if isinstance(criterion.get(key), str):
                    criterion[key] = capped(criterion[key], limit)
            text = json.dumps(data, indent=2) + "\n"
    if len(text) > WRITTEN_REPORT_BYTES:
        for criterion in criteria:
            criterion["details"] = {"left_out": "the report was too large"}
        text = json.dumps(data, indent=2) + "\n"
    if len(text) > WRITTEN_REPORT_BYTES:
        raise ValueError(f"a report of {len(text)} bytes with its criteria's texts cut "
                         f"({len(criteria)} criteria, {len(notes)} notes; a report may have {WRITTEN_REPORT_BYTES})")
    return text


def read_json_report(path: Path) -> dict | None:
    """A JSON report as :func:`write_json_report` wrote it, or None when it is missing, too
    big or not of this schema (a report is data from a run that graded student code)."""
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            return None
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or report.get("schema_version") != SCHEMA_VERSION:
        return None
    criteria = report.get("criteria")
    if not isinstance(criteria, list) or not all(
        isinstance(c, dict) and isinstance(c.get("problem"), str) and isinstance(c.get("earned"), (int, float))
        for c in criteria
    ):
        return None
    return report
