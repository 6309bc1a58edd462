"""The class dashboard: one self-contained HTML file from a batch's reports folder.

    python -m course dashboard REPORTS --html class.html [--title TEXT]
    python -m course batch FOLDER --csv grades.csv --html class.html   (the same, after grading)

REPORTS is the ``<csv stem>-reports/`` folder that ``batch`` and ``slurm merge`` write: one
``<student>.json`` report and ``<student>.log`` per student, the similarity pass's pairs
(:data:`similarity.SIMILARITY_FILE`) when it ran, and the gradebook's rows
(:data:`course.outcomes.ROWS_FILE`: each student's name, every flag of the CSV and the course's
score). The page shows the distribution of the course's scores (after the late policy and the
adjustments, as the CSV's final column and Canvas have them), per-problem averages,
per-criterion pass rates with the most common failure messages, the students to look at
(whatever flagged them: the report, the gradebook, 0 points), every student by final score,
lowest first, with the raw score, the adjustment and the late-work flags, the similar pairs
with their overlapping code, and every student's criteria and messages as the student sees them.

The page is one file that needs nothing else: no network, no script at all (expandable
sections are ``<details>``), inline CSS and SVG, and a Content-Security-Policy that forbids
scripts and remote content. Everything from a submission (names, messages, printed output,
code) is escaped by Jinja2's autoescape, and every value the page shows has its control
characters and bidirectional controls escaped first (:func:`_shown`): a name cannot reorder
or hide the text around it.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import markupsafe

from course import anonymous as anonymous_names
from course import late, similarity
from course.discovery import archive_stem
from course.outcomes import ROWS_FILE, load_rows, problem_key
from grader.layout import DEFAULT_RUBRIC, STUDENT_FILES
from grader.protocol import printable, read_json_report

TEMPLATES = Path(__file__).resolve().parent / "templates"
MAX_MESSAGE_CHARS = 4000  # per criterion in a student's section; the JSON report has all of it
MAX_EXAMPLE_CHARS = 600
GROUPS_SHOWN = 5
HISTOGRAM_BINS = 10
OUTPUT_LINES_SHOWN = 15  # as the terminal report shows a student


class DashboardError(Exception):
    """Bad input: REPORTS is not a reports folder, or its similarity file is malformed."""


@dataclass
class Student:
    """One student as the page shows them; ``report`` is None when no valid report exists."""

    name: str
    anchor: str
    report: dict | None
    report_file: str
    criteria: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    reasons: list[tuple[str, str]] = field(default_factory=list)  # (kind, text): why to look at them
    partners: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # the gradebook CSV's flags, when the rows were saved
    recorded: tuple[float | None, float] | None = None  # (score, out of) of a row without a report: Gradescope's
    adjusted: tuple[float | None, str, str] = (None, "", "")  # the gradebook's (final, adjustment, reason)

    @property
    def score(self) -> float | None:
        """The grader's raw total."""
        if self.report:
            return sum(c["earned"] for c in self.criteria)
        return self.recorded[0] if self.recorded else None

    @property
    def final(self) -> float | None:
        """The score the course records: the adjusted one where the gradebook adjusted it (late
        penalty, override), else the raw total; what the CSV's final column and Canvas say."""
        return self.adjusted[0] if self.adjusted[1] else self.score

    @property
    def late(self) -> list[tuple[str, str]]:
        return late.badges(self.flags)

    @property
    def achievable(self) -> float:
        """Points this machine could grade: every criterion's points but the blocked ones."""
        if self.recorded and not self.report:
            return self.recorded[1]
        return sum(c["points"] for c in self.criteria if c["status"] != "blocked")


def _criterion(raw: dict) -> dict:
    """A report's criterion with every field the page uses, whatever the report held."""
    return {
        "id": _text(raw.get("id"), 100), "problem": raw["problem"], "title": _text(raw.get("title"), 300),
        "points": _number(raw.get("points")), "earned": raw["earned"], "status": _text(raw.get("status"), 20),
        "message": _text(raw.get("message")), "output": _text(raw.get("output"), 20_000), "seconds": _number(raw.get("seconds")),
    }


def _finding(raw: object) -> dict:
    raw = raw if isinstance(raw, dict) else {"name": raw}
    return {key: _text(raw.get(key), 300) for key in ("file", "line", "name", "code")}


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _text(value: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters in the JSON report)"


def student_name(submission: object, fallback: str) -> str:
    """The name ``batch`` gave a student: its folder's name, or its archive's without
    ``.zip``, ``.tar.gz`` or ``.tgz`` (used when the gradebook's rows were not saved)."""
    if not isinstance(submission, str) or not submission.strip():
        return fallback
    path = Path(submission)
    return archive_stem(path.name) or path.name


def load_students(reports: Path) -> list[Student]:
    """Every student of a reports folder: one per ``.json`` or ``.log`` (a log without a valid
    report is a student the grader failed on) or row of the gradebook (a Slurm task that died
    left neither), named as the gradebook names them."""
    rows = load_rows(reports)
    special = {similarity.SIMILARITY_FILE, ROWS_FILE}
    stems = sorted({p.stem for p in reports.glob("*.json") if p.name not in special} | {p.stem for p in reports.glob("*.log")}
                   | {Path(name).stem for name in rows})
    students, seen = [], set()
    for index, stem in enumerate(stems):
        report = read_json_report(reports / f"{stem}.json")
        row = rows.get(f"{stem}.json")
        name = row["student"] if row else student_name(report.get("submission"), stem) if report else stem
        if name in seen:  # alice/ and alice.zip, as batch names them
            name = Path(report["submission"]).name if report else stem
        seen.add(name)
        student = Student(name, f"s{index}", report, f"{stem}.json", flags=[str(f) for f in row["flags"]] if row else [],
                          recorded=_recorded(row) if report is None else None, adjusted=_adjusted(row))
        if report:
            student.criteria = [_criterion(c) for c in report["criteria"]]
            student.notes = [_text(note, 600) for note in _list(report.get("notes"))]
            student.findings = [_finding(f) for f in _list(report.get("policy_findings"))]
        students.append(student)
    return students


def _adjusted(row: dict | None) -> tuple[float | None, str, str]:
    """A gradebook row's ``(final, adjustment, reason)``: what the course made of the raw score."""
    final = (row or {}).get("final")
    final = float(final) if isinstance(final, (int, float)) and not isinstance(final, bool) else None
    return final, _text((row or {}).get("adjustment"), 100), _text((row or {}).get("reason"), 600)


def _recorded(row: dict | None) -> tuple[float | None, float] | None:
    """A gradebook row's (score or None, max_score) when it says what it is out of without a
    report: scores recorded elsewhere (course.gradescope_scores), not a grader that failed."""
    score, top = (row or {}).get("score"), (row or {}).get("max_score")
    if not isinstance(top, (int, float)) or isinstance(top, bool):
        return None
    return (float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None), float(top)


# Gradebook flags the page says in its own words (similar pairs, missing files, blocked criteria,
# the report's own review reasons and errors, late work) or that ask for no one (adjustments).
SAID_ELSEWHERE = ("needs_review", "similar_to=", "missing:", "blocked_points=", "policy_findings=", "criterion_errors=", "late",
                  "extension", "submitted_unknown", "override=")


def review_reasons(student: Student) -> list[tuple[str, str]]:
    """Why a TA should look at this student, as ``(kind, text)``: what the report says, what the
    gradebook flagged, 0 points (the blocked points of the whole class are said once, elsewhere)."""
    report = student.report
    flagged = [flag for flag in student.flags if not flag.startswith(SAID_ELSEWHERE)]
    from_gradebook = [("review", f"gradebook: {', '.join(flagged)}")] if flagged and "needs_review" in student.flags else []
    if report is None and student.recorded is None:
        return [("error", "no valid report: the grader failed on this submission (see its .log)"), *from_gradebook]
    if report is None:  # a score recorded elsewhere (Gradescope): the gradebook's flags and 0 points are what is known
        return [*from_gradebook, *([("zero", "0 points")] if student.score == 0 and student.achievable > 0 else [])]
    reasons = []
    if report.get("complete") is not True:
        reasons.append(("timeout", "grading did not finish (the batch's time limit?); the score counts the criteria graded"))
    for kind in ("timeout", "error"):
        ids = [c["id"] for c in student.criteria if c["status"] == kind]
        if ids:
            reasons.append((kind, f"{kind} in {', '.join(ids)}"))
    files = report["files"] if isinstance(report.get("files"), dict) else {}
    reasons += [("missing", f"missing {name}") for name in STUDENT_FILES if name not in files]
    review = _list(report.get("review_reasons"))
    reasons += [("review", f"needs review: {_text(reason, 300)}") for reason in review]
    unexplained = "needs_review" in student.flags and student.flags == ["needs_review"]
    if (report.get("needs_review") is True or unexplained) and not review and not from_gradebook:
        reasons.append(("review", "needs review"))
    reasons += from_gradebook
    if late.UNKNOWN_LATE in student.flags:
        reasons.append(("late", "late, time unknown: give it under [submitted] in the late policy"))
    if student.score == 0 and student.achievable > 0:
        reasons.append(("zero", "0 points"))
    return reasons


def by_score(students: list[Student]) -> list[Student]:
    """Every student, lowest course score first (no score at all first of all), then by name."""
    return sorted(students, key=lambda s: (s.final is not None, s.final or 0, s.name))


def normalise(message: object) -> str:
    """A failure message with what differs between students masked (numbers, quoted names,
    paths, addresses), so the same mistake groups together. A traceback (the grader's, of the
    student's frames only, or Python's) becomes its first line and its exception line."""
    text = _text(message, 20_000)
    frame = re.search(r'^(Traceback \(most recent call last\)|\s*File ")', text, re.M)
    if frame:
        last = [line for line in text.splitlines() if line.strip()][-1].strip()
        text = f"{text[:frame.start()].strip()} {last}".strip()
    text = re.sub(r"0x[0-9a-fA-F]+", "0x…", text)
    text = re.sub(r"(?<!\S)/[^\s'\"]+", "<path>", text)
    text = re.sub(r"'[^'\n]*'|\"[^\"\n]*\"", "'…'", text)
    text = re.sub(r"(?<![A-Za-z_])[-+]?\d+(\.\d+)?([eE][-+]?\d+)?(?!x…)", "#", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text[:300] or "(no message)"


def histogram(scores: list[float], top: float) -> list[dict]:
    """Bins of a whole number of points over 0..top (at most ``HISTOGRAM_BINS``); the last
    bin includes ``top``."""
    width = max(1, math.ceil(top / HISTOGRAM_BINS))
    bins = max(1, math.ceil(top / width))
    counts = Counter(min(int(score // width), bins - 1) for score in scores)
    tallest = max(counts.values(), default=0) or 1
    return [
        {"low": i * width, "high": min((i + 1) * width, top) if i == bins - 1 else (i + 1) * width,
         "count": counts.get(i, 0), "height": counts.get(i, 0) / tallest}
        for i in range(bins)
    ]


def criterion_rows(students: list[Student]) -> list[dict]:
    """Per criterion: counts per status, pass rate over the students it was graded for, and
    the failure messages grouped by their normalised text; hardest first."""
    rows: dict[str, dict] = {}
    for student in students:
        for criterion in student.criteria:
            row = rows.setdefault(criterion["id"], {
                key: criterion[key] for key in ("id", "problem", "title", "points")
            } | {"counts": Counter(), "groups": {}})
            status = criterion["status"]
            row["counts"][status] += 1
            if status in ("failed", "timeout", "error"):
                group = row["groups"].setdefault(normalise(criterion["message"]), {
                    "example": _text(criterion["message"], MAX_EXAMPLE_CHARS), "students": []})
                group["students"].append(student)
    for row in rows.values():
        graded = sum(n for status, n in row["counts"].items() if status != "blocked")
        row["graded"], row["passed"] = graded, row["counts"]["passed"]
        row["rate"] = row["passed"] / graded if graded else None
        groups = sorted(row["groups"].items(), key=lambda item: (-len(item[1]["students"]), item[0]))
        row["groups"] = [{"text": text, **group} for text, group in groups[:GROUPS_SHOWN]]
        row["more_groups"] = max(0, len(groups) - GROUPS_SHOWN)
    return sorted(rows.values(), key=lambda r: (r["rate"] if r["rate"] is not None else 2, r["id"]))


def problem_rows(students: list[Student], criteria: list[dict], titles: dict[str, str]) -> list[dict]:
    """Per problem: average points over the students graded on it; blocked criteria apart."""
    earned: dict[str, list[float]] = {}
    for student in students:
        per_problem: dict[str, float] = {}
        for criterion in student.criteria:
            if criterion["status"] != "blocked":
                per_problem[criterion["problem"]] = per_problem.get(criterion["problem"], 0) + criterion["earned"]
        for problem, value in per_problem.items():
            earned.setdefault(problem, []).append(value)
    rows = []
    for problem in sorted({row["problem"] for row in criteria}, key=problem_key):
        own = [row for row in criteria if row["problem"] == problem]
        points = sum(row["points"] for row in own if row["graded"])
        mean = statistics.fmean(earned[problem]) if problem in earned else None
        rows.append({
            "problem": problem, "title": titles.get(problem, ""), "mean": mean, "points": points,
            "share": mean / points if mean is not None and points else None,
            "blocked": sum(row["points"] for row in own if not row["graded"]),
        })
    return rows


def class_blocked(students: list[Student]) -> list[str]:
    """Criteria blocked for every graded student: said once for the class, not per student."""
    graded = [s for s in students if s.report]
    ids = [{c["id"] for c in s.criteria if c["status"] == "blocked"} for s in graded]
    return sorted(set.intersection(*ids)) if ids else []


def problem_titles() -> dict[str, str]:
    """The problems' titles from the default rubric; none if it cannot be read."""
    from grader.rubric import RubricError, load_rubric

    try:
        return dict(load_rubric(DEFAULT_RUBRIC).problem_titles)
    except (RubricError, OSError, ImportError):
        return {}


def summarise(reports: Path, anonymous: bool = False) -> dict:
    """Everything the page shows, from a reports folder; with ``anonymous``, every student (in the
    similarity pairs too) by pseudonym and no report file names (course.anonymous).

    Raises:
        DashboardError: not a folder, no student in it, or a malformed similarity file.
    """
    if not reports.is_dir():
        raise DashboardError(f"{reports} is not a folder (give the <csv stem>-reports/ folder that batch wrote)")
    students = load_students(reports)
    if not students:
        raise DashboardError(f"{reports} holds no reports (*.json) or logs (*.log) of a batch")
    pairs = _pairs(reports / similarity.SIMILARITY_FILE)
    if anonymous:
        pairs = _pseudonymise(students, pairs, anonymous_names.assign(reports, [s.name for s in students]))
    by_name = {s.name: s for s in students}
    for name, partners in similarity.similar_to([(p.a, p.b) for p in pairs]).items():
        if name in by_name:
            by_name[name].partners = partners
    blocked = class_blocked(students)
    for student in students:
        student.reasons = review_reasons(student)
        student.reasons += [("similar", f"similar to {p}") for p in student.partners]
        extra = sorted({c["id"] for c in student.criteria if c["status"] == "blocked"} - set(blocked))
        if extra:
            student.reasons.append(("blocked", f"blocked: {', '.join(extra)}"))
    graded = [s for s in students if s.report or s.recorded]
    scores = [s.final for s in graded if s.final is not None]  # the course's scores, as the CSV and Canvas have them
    criteria = criterion_rows(students)
    top = Counter(s.achievable for s in graded).most_common(1)[0][0] if graded else 0
    return {
        "students": students, "by_name": by_name, "graded": graded, "scores": scores, "top": top,
        "mean": statistics.fmean(scores) if scores else None,
        "median": statistics.median(scores) if scores else None,
        "full": sum(1 for s in graded if s.final is not None and s.final >= s.achievable > 0),
        "late": sum(1 for s in students if any(kind == "late" for kind, _ in s.late)),
        "adjusted": any(s.adjusted[1] or s.late for s in students),
        "zero": scores.count(0),
        "histogram": histogram(scores, top),
        "problems": problem_rows(students, criteria, problem_titles()),
        "criteria": criteria,
        "blocked": blocked, "look_at": by_score([s for s in students if s.reasons]), "pairs": pairs,
        "by_score": by_score(students),
        "similarity_ran": (reports / similarity.SIMILARITY_FILE).exists(),
    }


def _pseudonymise(students: list[Student], pairs: list[similarity.Pair], pseudonyms: dict[str, str]) -> list[similarity.Pair]:
    """Students renamed by their pseudonyms, without report file names; the pairs renamed alike
    (a known public solution keeps its name)."""
    for student in students:
        student.name, student.report_file = pseudonyms[student.name], ""
        student.flags = anonymous_names.flags(student.flags, pseudonyms)
    return [dataclasses.replace(p, a=pseudonyms.get(p.a, p.a), b=pseudonyms.get(p.b, p.b)) for p in pairs]


def _pairs(path: Path) -> list[similarity.Pair]:
    if not path.exists():
        return []
    try:
        return similarity.read(path)
    except similarity.SimilarityError as error:
        raise DashboardError(str(error)) from error


def _shown(value: object) -> object:
    """A value as the page shows it: text with its control characters escaped (its lines kept,
    for messages and code; in a name a line break is only a space in HTML). Markup (a macro's
    output, a joined list) stays markup: escaping control characters adds no ``<`` or ``&``."""
    if isinstance(value, markupsafe.Markup):
        return markupsafe.Markup(printable(str(value)))
    return printable(value) if isinstance(value, str) else value


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, finalize=_shown,
    )
    environment.filters["points"] = lambda value: "–" if value is None else f"{value:.4g}"
    environment.filters["average"] = lambda value: "–" if value is None else f"{value:.1f}".removesuffix(".0")
    environment.filters["percent"] = lambda value: "–" if value is None else f"{100 * value:.0f}%"
    environment.filters["tail"] = lambda text: "\n".join(_text(text).rstrip("\n").splitlines()[-OUTPUT_LINES_SHOWN:])
    return environment


def render(context: dict, title: str, source: str) -> str:
    generated = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    page = _environment().get_template("dashboard.html.j2")
    return page.render(**context, title=title, source=source, generated=generated, student_files=STUDENT_FILES)


def write(reports: Path, html: Path, title: str = "Class dashboard", anonymous: bool = False) -> dict:
    """Build the page from ``reports`` into ``html``; return what it shows."""
    context = summarise(reports, anonymous)
    html.parent.mkdir(parents=True, exist_ok=True)
    html.write_text(render(context, title, reports.name), encoding="utf-8")
    return context


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``dashboard`` command's arguments."""
    parser.add_argument("reports", type=Path, help="the <csv stem>-reports/ folder that `python -m course batch` wrote")
    parser.add_argument("--html", type=Path, required=True, help="the HTML file to write")
    parser.add_argument("--title", default="Class dashboard", help="the page's title")
    parser.add_argument("--anonymous", action="store_true",
                        help="students by their stable pseudonyms (kept in REPORTS), no report file names")


def run(args: argparse.Namespace) -> int:
    """``python -m course dashboard``."""
    try:
        context = write(args.reports, args.html, args.title, args.anonymous)
    except DashboardError as error:
        print(f"python -m course dashboard: error: {error}", file=sys.stderr)
        return 2
    print(f"{len(context['students'])} students, {len(context['look_at'])} to look at, "
          f"{len(context['pairs'])} similar pairs -> {args.html}")
    return 0
