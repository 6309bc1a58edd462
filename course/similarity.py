"""Similar submissions: a local, MOSS-style similarity pass over the students' files.

It never changes a score. ``batch`` runs it after grading (unless ``--no-similarity``): it
writes ``similarity.json`` into the reports folder, adds ``similar_to=<student>`` and
``needs_review`` to the flags of both students of every pair, and the dashboard shows the
pairs with the overlapping code.

How (copydetect, the winnowing of Schleimer, Wilkerson and Aiken that MOSS uses): each file is
tokenised by Pygments with every name replaced by one letter, so renaming variables, editing
comments and re-spacing change nothing; the hashes of its k-grams are its fingerprints. Files
are compared file by file (a ``pipeline.py`` with the other ``pipeline.py`` files):

- the kit's stubs (``handout/minitorch/*.py``) are boilerplate: code the students were given
  never counts;
- fingerprints found in more than ``max(COMMON_STUDENTS, COMMON_SHARE * class)`` students are
  common code (MOSS's ``-m``): the one obvious way to write a loop is not evidence of copying;
- a pair is reported when one file's similarity (the share of its own fingerprinted code
  found in the other file) reaches ``--similarity-threshold`` and at least ``MIN_OVERLAP``
  characters of tokenised code overlap, so a two-line solution is not 100 % "copied";
- known public solutions (``--public-solutions DIR``, one subfolder or .zip each, like the
  class folder) are compared with every student, never with each other.
"""
from __future__ import annotations

import argparse
import bisect
import importlib.util
import io
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grader.layout import PACKAGE, REPOSITORY, STUDENT_FILES
from grader.submission import SubmissionNotFound, load_submission

STUBS = REPOSITORY / "handout" / PACKAGE  # the student files as the kit hands them out (make handout)
SCHEMA = "similarity-1"
DEFAULT_THRESHOLD = 0.5
NOISE = 25  # k: tokenised characters per fingerprint; shorter matches are noise (copydetect's default)
GUARANTEE = 30  # every match this long is found (winnowing window = GUARANTEE - NOISE + 1)
MIN_OVERLAP = 150  # tokenised characters two files must share to be reported (about five lines)
COMMON_STUDENTS, COMMON_SHARE = 10, 0.1
MAX_REGIONS, MAX_REGION_LINES = 12, 40  # what similarity.json keeps of the overlapping code
PUBLIC_PREFIX = "public:"
# Written into batch's reports folder; '@' never occurs in a report's name there (batch names
# them with letters, digits, - _ and . only), so no student's report can be overwritten.
SIMILARITY_FILE = "similarity@class.json"


Fingerprint = Any  # copydetect.CodeFingerprint, imported only when the pass runs (it imports matplotlib)


class SimilarityError(Exception):
    """Bad input to the similarity pass (a missing folder or stub, a bad similarity.json)."""


@dataclass
class Region:
    """Lines ``first``..``last`` (1-based) of one file of a pair, found in the other file."""

    first: int
    last: int
    text: str


@dataclass
class FileMatch:
    """One student file both members of a pair share code in."""

    file: str
    similarity: tuple[float, float]  # share of a's file found in b's, and of b's in a's
    overlap: int  # tokenised characters in common
    regions: tuple[list[Region], list[Region]] = field(default_factory=lambda: ([], []))


@dataclass
class Pair:
    a: str
    b: str  # a student, or "public:<name>" for a known public solution
    files: list[FileMatch]

    @property
    def score(self) -> float:
        return max(max(match.similarity) for match in self.files)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The similarity options of ``python -m course batch``."""
    parser.add_argument(
        "--similarity-threshold", type=float, default=DEFAULT_THRESHOLD, metavar="SHARE",
        help=f"report two students when this share (0-1) of one's file is found in the other's (default {DEFAULT_THRESHOLD})",
    )
    parser.add_argument("--public-solutions", type=Path, metavar="DIR",
                        help="known public solutions to compare every student with (one subfolder or .zip each)")
    parser.add_argument("--no-similarity", action="store_true", help="skip the similarity pass")


def argument_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the similarity options, if anything: ``batch`` says it and stops
    before it grades anyone."""
    if args.no_similarity:
        return None
    if not 0 < args.similarity_threshold <= 1:
        return f"--similarity-threshold must be in (0, 1], got {args.similarity_threshold:g}"
    if args.public_solutions is not None and not args.public_solutions.is_dir():
        return f"--public-solutions {args.public_solutions} is not a folder"
    if importlib.util.find_spec("copydetect") is None:
        return "copydetect is not installed (make venv installs it from requirements-dev.txt; or pass --no-similarity)"
    try:
        read_stubs()
    except SimilarityError as error:
        return f"{error} (or pass --no-similarity)"
    return None


def flag_batch(outcomes: list, reports: Path, threshold: float = DEFAULT_THRESHOLD, public_folder: Path | None = None,
               progress=print) -> None:
    """After grading: the pass over the batch's students (``StudentGrade``s of course.batch), its
    pairs into ``reports``/SIMILARITY_FILE, and ``similar_to=<name>`` and ``needs_review``
    on both students' flags. A failure of the pass is reported and costs only the flags."""
    try:
        result = run([(o.student, o.path) for o in outcomes], threshold, public_folder)
    except SimilarityError as error:
        progress(f"similarity pass skipped: {error}")
        return
    write(reports / SIMILARITY_FILE, result)
    partners = similar_to([(pair["a"], pair["b"]) for pair in result["pairs"]])
    for outcome in outcomes:
        if outcome.student in partners:
            outcome.flags += [f"similar_to={name}" for name in partners[outcome.student]] + ["needs_review"]
            outcome.flags = list(dict.fromkeys(outcome.flags))
    progress(f"similarity: {len(result['pairs'])} pairs at or above {threshold:g} among {len(outcomes)} students "
             f"({result['seconds']:g} s) -> {reports / SIMILARITY_FILE}")

def read_sources(entries: list[tuple[str, Path]]) -> dict[str, dict[str, str]]:
    """``{name: {student file: text}}``, read as the grader reads submissions (zips never
    extracted, links refused); unreadable submissions have no files."""
    sources = {}
    for name, path in entries:
        try:
            submission = load_submission(path)
        except SubmissionNotFound:
            submission = None
        files = submission.files if submission is not None and submission.problem is None else {}
        sources[name] = {file: data.decode("utf-8", errors="replace") for file, data in files.items()}
    return sources


def read_stubs(folder: Path = STUBS) -> dict[str, str]:
    """The kit's stubbed student files: the boilerplate."""
    stubs = {name: folder / name for name in STUDENT_FILES}
    missing = [str(path) for path in stubs.values() if not path.is_file()]
    if missing:
        raise SimilarityError(f"the kit's stubs are missing ({', '.join(missing)}): run `make handout`")
    return {name: path.read_text() for name, path in stubs.items()}


KGRAM_BASE = 0x9E3779B97F4A7C15  # odd: a polynomial hash of code points, wrapping at 2**64


def _stable_kgram_hashes(string: str, k: int):
    """copydetect's k-gram hashes, with a hash that is the same in every process: Python's
    ``hash`` of a str is salted per process, so batch and a Slurm merge (two processes) would
    winnow different fingerprints and report different overlaps for the same pair. A
    polynomial hash of the code points, vectorised (as fast as the builtin's loop or faster)."""
    import numpy as np

    codes = np.frombuffer(string.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    count = len(codes) - k + 1
    hashes = np.zeros(max(count, 0), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for offset in range(k if count > 0 else 0):
            hashes = hashes * np.uint64(KGRAM_BASE) + codes[offset:offset + count]
    return hashes.view(np.int64)


def _fingerprint(text: str, boilerplate=None, window: int = GUARANTEE - NOISE + 1):
    import copydetect.utils  # imports matplotlib: only when the pass runs
    from copydetect import CodeFingerprint

    copydetect.utils.hashed_kgrams = _stable_kgram_hashes
    return CodeFingerprint("student.py", NOISE, window, boilerplate=boilerplate, fp=io.StringIO(text))


def _without(fingerprint, hashes: set[int]):
    """``fingerprint`` less the fingerprints in ``hashes`` (common code)."""
    from copydetect.utils import get_token_coverage

    dropped = fingerprint.hashes & hashes
    if dropped:
        fingerprint.hashes = fingerprint.hashes - dropped
        fingerprint.hash_idx = {h: i for h, i in fingerprint.hash_idx.items() if h not in dropped}
        fingerprint.token_coverage = get_token_coverage(fingerprint.hash_idx, fingerprint.k, len(fingerprint.filtered_code))
    return fingerprint


def _regions(text: str, slices, given: set[str]) -> list[Region]:
    """The lines of ``text`` that ``slices`` (copydetect's character ranges) cover, merged
    across gaps of the kit's or blank lines, without such lines at either end (a match often
    starts in a given signature)."""
    starts = [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]
    lines = text.splitlines()
    ranges: list[list[int]] = []
    for start, end in sorted(zip(*(map(int, side) for side in slices))):  # copydetect's order varies by hash seed
        first, last = bisect.bisect_right(starts, int(start)), bisect.bisect_right(starts, max(int(end) - 1, 0))
        if ranges and all(_is_given(line, given) for line in lines[ranges[-1][1]:first - 1]):
            ranges[-1][1] = max(ranges[-1][1], last)
        else:
            ranges.append([first, last])
    regions = []
    for first, last in ranges:
        while first <= last and _is_given(lines[first - 1], given):
            first += 1
        while last >= first and _is_given(lines[last - 1], given):
            last -= 1
        if first <= last:
            regions.append(Region(first, last, _excerpt(lines, first, last, given)))
    return regions[:MAX_REGIONS]


def _is_given(line: str, given: set[str]) -> bool:
    return not line.strip() or line.strip() in given


def _excerpt(lines: list[str], first: int, last: int, given: set[str]) -> str:
    """Lines ``first``..``last`` numbered, with runs of the kit's lines folded into one."""
    out: list[str] = []
    run: list[str] = []

    def fold() -> None:
        out.extend(run if len(run) <= 2 else [f"{'':>5}  ... {len(run)} lines as in the kit"])
        run.clear()

    for number in range(first, last + 1):
        line = f"{number:>5}  {lines[number - 1]}"
        if _is_given(lines[number - 1], given):
            run.append(line)
            continue
        fold()
        out.append(line)
    fold()
    if len(out) > MAX_REGION_LINES:
        out = out[:MAX_REGION_LINES] + [f"{'':>5}  ... {len(out) - MAX_REGION_LINES} more lines"]
    return "\n".join(out)


def _compare(file: str, a: tuple[str, Fingerprint, str], b: tuple[str, Fingerprint, str], threshold: float, given: set[str]) -> FileMatch | None:
    from copydetect import compare_files

    (_, fingerprint_a, text_a), (_, fingerprint_b, text_b) = a, b
    if not fingerprint_a.hashes & fingerprint_b.hashes:
        return None
    overlap, similarity, slices = compare_files(fingerprint_a, fingerprint_b)
    similarity = (round(float(similarity[0]), 4), round(float(similarity[1]), 4))
    if overlap < MIN_OVERLAP or max(similarity) < threshold:
        return None
    regions = (_regions(text_a, slices[0], given), _regions(text_b, slices[1], given))
    return FileMatch(file, similarity, int(overlap), regions)


def _fingerprints(file: str, sources: dict[str, dict[str, str]], boilerplate) -> list[tuple[str, Fingerprint, str]]:
    """``(name, fingerprint, text)`` of every source that has ``file``; identical texts (an
    untouched stub, a shared copy) are fingerprinted once."""
    done: dict[str, Fingerprint] = {}
    found = []
    for name, files in sorted(sources.items()):
        if file in files:
            text = files[file]
            if text not in done:
                done[text] = _fingerprint(text, boilerplate)
            found.append((name, done[text], text))
    return found


def find_pairs(
    sources: dict[str, dict[str, str]],
    stubs: dict[str, str],
    public: dict[str, dict[str, str]] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> list[Pair]:
    """Every pair of students (or student and public solution) above ``threshold``, most
    similar first. ``sources`` and ``public`` map a name to its student files' text."""
    import numpy as np

    public = public or {}
    pairs: dict[tuple[str, str], Pair] = {}
    common_limit = max(COMMON_STUDENTS, COMMON_SHARE * len(sources))
    for file in STUDENT_FILES:
        boilerplate = np.unique(np.array(sorted(_fingerprint(stubs.get(file, ""), window=1).hashes), dtype=np.int64))
        students = _fingerprints(file, sources, boilerplate)
        counts = Counter(h for _, fingerprint, _ in students for h in fingerprint.hashes)
        common = {h for h, count in counts.items() if count > common_limit}
        students = [(n, _without(fingerprint, common), text) for n, fingerprint, text in students]
        given = {line.strip() for line in stubs.get(file, "").splitlines()}
        known = [(PUBLIC_PREFIX + n, _fingerprint(f[file], boilerplate), f[file]) for n, f in sorted(public.items()) if file in f]
        for index, a in enumerate(students):
            for b in students[index + 1:] + known:
                match = _compare(file, a, b, threshold, given)
                if match is not None:
                    pairs.setdefault((a[0], b[0]), Pair(a[0], b[0], [])).files.append(match)
    return sorted(pairs.values(), key=lambda pair: (-pair.score, pair.a, pair.b))


def similar_to(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    """``{student: [the names it is paired with]}`` from ``(a, b)`` name pairs."""
    partners: dict[str, list[str]] = {}
    for a, b in pairs:
        partners.setdefault(a, []).append(b)
        if not b.startswith(PUBLIC_PREFIX):
            partners.setdefault(b, []).append(a)
    return partners


def read_public(folder: Path) -> dict:
    """The known solutions of ``folder``, found the way ``batch`` finds students."""
    from course.discovery import discover

    with tempfile.TemporaryDirectory() as scratch:
        found, _ = discover(folder, Path(scratch))
        return read_sources([(student.name, student.path) for student in found])


def run(
    students: list[tuple[str, Path]], threshold: float = DEFAULT_THRESHOLD, public_folder: Path | None = None,
    stubs_folder: Path = STUBS,
) -> dict:
    """The similarity pass over ``(name, submission path)``: the content of similarity.json."""
    start = time.monotonic()
    public = read_public(public_folder) if public_folder else {}
    pairs = find_pairs(read_sources(students), read_stubs(stubs_folder), public, threshold)
    return {
        "schema": SCHEMA, "threshold": threshold, "students": len(students), "public_solutions": len(public),
        "noise": NOISE, "guarantee": GUARANTEE, "min_overlap": MIN_OVERLAP,
        "seconds": round(time.monotonic() - start, 2), "pairs": [_pair_json(pair) for pair in pairs],
    }


def _pair_json(pair: Pair) -> dict:
    return {"a": pair.a, "b": pair.b, "score": pair.score, "files": [asdict(match) for match in pair.files]}


def write(path: Path, result: dict) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(temporary, path)


def read(path: Path) -> list[Pair]:
    """The pairs of a similarity.json, checked field by field.

    Raises:
        SimilarityError: the file is not JSON or not this schema; the message says where.
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SimilarityError(f"{path}: cannot read it: {error}") from error
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("pairs"), list):
        raise SimilarityError(f"{path}: not a {SCHEMA} file (schema and pairs expected)")
    return [_pair(entry, f"{path}: pair {index + 1}") for index, entry in enumerate(data["pairs"])]


def _pair(entry: Any, where: str) -> Pair:
    try:
        files = [_file_match(match) for match in entry["files"]]
        pair = Pair(str(entry["a"]), str(entry["b"]), files)
    except (TypeError, KeyError, ValueError, IndexError) as error:
        raise SimilarityError(f"{where}: malformed ({type(error).__name__}: {error})") from error
    if not files:
        raise SimilarityError(f"{where}: malformed (a pair needs at least one file)")
    return pair


def _file_match(match: Any) -> FileMatch:
    """One file of a pair from JSON; TypeError, KeyError, ValueError or IndexError if malformed."""
    sides = [[Region(int(r["first"]), int(r["last"]), str(r["text"])) for r in side] for side in match["regions"]]
    if len(sides) != 2:
        raise ValueError(f"{len(sides)} lists of regions, not 2")
    similarity = (float(match["similarity"][0]), float(match["similarity"][1]))
    return FileMatch(str(match["file"]), similarity, int(match["overlap"]), (sides[0], sides[1]))
