"""Render the kit's write-up from ``writeup/`` and the rubric: a short README, one page per
problem, the hints (``python -m minitorch.hint`` prints them one at a time) and ``writeup.html``,
all of it on one page with the figures inlined and the hints folded.

Sources in ``writeup/``:

``README.md.in``            the kit's README
``problemN.md``             one page per problem, placed in the kit by a ``{{page ...}}`` of the README
``hints/N.M/1.md, 2.md ...``  the graduated hints of sub-problem N.M, in the order they are shown

Hints are never in the text a student reads front to back: a page says where they are with
``{{hints N.M}}``, which becomes a line saying how to ask for them in the Markdown pages, and the
hints themselves, each folded in its own block, in ``writeup.html``.

Directives, each in ``{{ }}``:

``{{page problem2.md problems/2-pipeline.md}}``  renders ``writeup/problem2.md`` into the kit
                              at ``problems/2-pipeline.md``; becomes that page's link
``{{hints 2.2}}``             where the hints of 2.2 go (alone on its line)
``{{points_summary}}``        a table of points per problem, from ``grader/rubric.toml``
``{{points_table 2}}``        the criteria of Problem 2 (2.1, 2.2, ...) with their points and the
                              public tests that catch the same mistakes (their ``criterion`` markers)
``{{points 2.2}}``            the points of one problem or sub-problem, inline
``{{policy_forbidden}}``      the names the grader's policy scan flags for review, inline
                              (``[policy] forbidden`` of the rubric)
``{{promises 2.1}}``          the promises of one sub-problem's student docstrings, the criteria that grade each
                              and the public test that fails for its mistake (``grader/promises/``)
``{{figure NAME ARGS}}``      a text figure computed at build time by ``kit.figures.FIGURES[NAME](*ARGS)``
``{{figure plans MODEL GPUS BATCH TS PS}}``  Problem 5's estimates (answer key) of t in TS x p in PS
``{{svg SCHEDULE K M [k=v]}}``  a picture of a simulated schedule: the build writes it to the kit's
                              ``figures/<name>.svg``, and this becomes its link from the page

The figures are described in :mod:`kit.figures`. Links between pages are written as the kit
holds them (``../README.md#criteria-that-need-gpus`` from a problem page); ``writeup.html``
turns them into links inside the one page, and the build fails on a link to nothing.

Notes ``{# ... #}`` (starting a line, possibly spanning several) are for whoever edits the
sources and are dropped. The points come from the same rubric the grader uses, so the
write-up never retypes a number.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader import promises
from grader.protocol import format_points as _points
from grader.rubric import HARDWARE, Criterion, Rubric, RubricError, load_rubric
from kit import writeup_html
from kit.figures import FIGURES, FigureError, svg_picture
from kit.public_tests import MarkerError, criterion_tests

_DIRECTIVE = re.compile(r"\{\{(.*?)\}\}")
_NOTE = re.compile(r"^\{#.*?#\}[ \t]*\n", re.MULTILINE | re.DOTALL)


class WriteupError(Exception):
    """A problem with the write-up sources or the rubric; the message names the file."""


def read_rubric(rubric_path: Path) -> Rubric:
    """The rubric, read by the grader's own parser, with at least one criterion to grade."""
    try:
        rubric = load_rubric(rubric_path)
    except RubricError as error:
        raise WriteupError(f"{error} (the write-up's points tables are generated from the rubric)") from None
    if not rubric.active():
        raise WriteupError(f"{rubric_path}: no criterion to grade (all disabled)")
    return rubric


def read_criteria(rubric_path: Path) -> list[Criterion]:
    """The criteria the grader grades, read by the grader's own rubric parser."""
    return read_rubric(rubric_path).active()


def policy_forbidden(rubric: Rubric) -> str:
    """The policy scan's names as inline code: ```inspect`, `gc`, `.__wrapped__```."""
    if not rubric.forbidden:
        return "no names (this course's rubric flags none)"
    return ", ".join(f"`{name}`" for name in rubric.forbidden)


def runs_on(criterion: Criterion) -> str:
    gpus = HARDWARE[criterion.needs]
    return "CPU" if gpus == 0 else f"{gpus} CUDA GPU{'s' if gpus > 1 else ''}"


def _in_problem(criterion: Criterion, problem: str) -> bool:
    return criterion.problem == problem or criterion.problem.startswith(problem + ".")


def points(criteria: list[Criterion], problem: str) -> str:
    chosen = [c for c in criteria if _in_problem(c, problem)]
    if not chosen:
        raise WriteupError(f"no enabled criterion for problem {problem} in the rubric")
    return _points(sum(c.points for c in chosen))


def points_table(criteria: list[Criterion], problem: str, public: dict[str, list[str]] | None = None) -> str:
    """Markdown table of the criteria of ``problem`` (e.g. ``2`` or ``2.2``); with ``public``
    (criterion id -> public tests, :func:`kit.public_tests.criterion_tests`) a column names
    the public tests that catch the same kind of mistake."""
    rows = [c for c in criteria if _in_problem(c, problem)]
    if not rows:
        raise WriteupError(f"no enabled criterion for problem {problem} in the rubric")
    if public is None:
        lines = ["| Criterion | What is checked | Points | Runs on |", "|---|---|---:|---|"]
        lines += [f"| `{c.id}` | {c.title} | {_points(c.points)} | {runs_on(c)} |" for c in rows]
        lines.append(f"| | **Problem {problem} total** | **{points(criteria, problem)}** | |")
        return "\n".join(lines)
    lines = ["| Criterion | What is checked | Points | Runs on | Public tests |", "|---|---|---:|---|---|"]
    lines += [f"| `{c.id}` | {c.title} | {_points(c.points)} | {runs_on(c)} | {_test_names(public.get(c.id, []))} |"
              for c in rows]
    lines.append(f"| | **Problem {problem} total** | **{points(criteria, problem)}** | | |")
    return "\n".join(lines)


def _test_names(tests: list[str]) -> str:
    """``test_file.py::test_name`` entries as the names a student passes to ``pytest -k``."""
    return ", ".join(f"`{test.split('::')[-1]}`" for test in tests) or "(none)"


def points_summary(criteria: list[Criterion]) -> str:
    """Markdown table: points per sub-problem, how many need CUDA GPUs, and the total."""
    problems = sorted({c.problem for c in criteria}, key=lambda p: tuple(int(n) for n in p.split(".")))
    lines = ["| Problem | Criteria | Points | of which need CUDA GPUs |", "|---|---:|---:|---:|"]
    for problem in problems:
        rows = [c for c in criteria if c.problem == problem]
        gpu = sum(c.points for c in rows if HARDWARE[c.needs])
        lines.append(f"| {problem} | {len(rows)} | {_points(sum(c.points for c in rows))} | {_points(gpu)} |")
    total = sum(c.points for c in criteria)
    gpu = sum(c.points for c in criteria if HARDWARE[c.needs])
    lines.append(f"| **Total** | {len(criteria)} | **{_points(total)}** | {_points(gpu)} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- hints

HINTS_FOLDER = "hints"  # in writeup/ and in the kit: hints/N.M/1.md, 2.md, ...
HINT_COMMAND = "python -m minitorch.hint"
_PROBLEM = re.compile(r"^\d+\.\d+$")
_HINT_MARKER = re.compile(r"^<!-- hints (\d+\.\d+) -->$", re.MULTILINE)


def read_hints(folder: Path) -> dict[str, list[Path]]:
    """The hint files of every sub-problem in ``folder`` (``N.M/1.md``, ``N.M/2.md`` ...), in order.

    Raises WriteupError, naming the path, for anything else in ``folder``, numbering with a gap
    or not starting at 1, and an empty hint."""
    hints: dict[str, list[Path]] = {}
    if not folder.is_dir():
        return hints
    for entry in sorted(folder.iterdir()):
        if not (entry.is_dir() and _PROBLEM.match(entry.name)):
            raise WriteupError(f"{entry}: the hints folder holds one folder per sub-problem, named N.M")
        names = sorted(p.name for p in entry.iterdir())
        expected = [f"{k}.md" for k in range(1, len(names) + 1)]
        if sorted(names) != sorted(expected) or not names:
            raise WriteupError(f"{entry}: hint files must be 1.md, 2.md, ... in the order they are shown, "
                               f"without gaps; found {', '.join(names) or 'none'}")
        files = [entry / name for name in expected]
        empty = [p for p in files if not p.read_text().strip()]
        if empty:
            raise WriteupError(f"{empty[0]}: empty hint")
        hints[entry.name] = files
    return hints


def hint_pointer(problem: str, count: int) -> str:
    """What a Markdown page says where the hints of ``problem`` are (never the hints themselves)."""
    plural = "s" if count > 1 else ""
    return (f"**Stuck?** {count} hint{plural} for {problem}, one at a time: `make hint P={problem}` (or "
            f"`{HINT_COMMAND} {problem}`) prints the next one; `writeup.html` has them folded.")


# ---------------------------------------------------------------- expanding the sources

@dataclass
class _Build:
    """What one rendering of the write-up collects: pages and pictures by kit path, hints by problem."""

    rubric: Rubric
    public: dict[str, list[str]] | None
    hints: dict[str, list[Path]]
    pages: dict[str, str] = field(default_factory=dict)
    pictures: dict[str, str] = field(default_factory=dict)
    placed: dict[str, str] = field(default_factory=dict)  # problem -> where its {{hints}} is
    sources: dict[str, Path] = field(default_factory=dict)  # page's kit path -> its source


def _expand(text: str, source: Path, kit_path: str, build: _Build, depth: int = 0) -> str:
    """``text`` (from ``source``, going to ``kit_path`` in the kit) with every directive expanded."""
    if depth > 4:
        raise WriteupError(f"{source}: pages nested too deeply")
    text = _NOTE.sub("", text)
    criteria = build.rubric.active()
    folder = posixpath.dirname(kit_path) or "."

    def directive(match: re.Match) -> str:
        words = match[1].split()
        where = f"{source}:{text.count(chr(10), 0, match.start()) + 1}"
        if not words:
            raise WriteupError(f"{where}: empty directive {{{{}}}}")
        name, args = words[0], words[1:]
        if name == "page" and len(args) == 2:
            return posixpath.relpath(_page(source.parent / args[0], args[1], where, build, depth), folder)
        if name == "hints" and len(args) == 1:
            return _hints_marker(args[0], match, text, where, build)
        if name == "points_summary" and not args:
            return points_summary(criteria)
        if name == "points_table" and len(args) == 1:
            return points_table(criteria, args[0], build.public)
        if name == "points" and len(args) == 1:
            return points(criteria, args[0])
        if name == "policy_forbidden" and not args:
            return policy_forbidden(build.rubric)
        if name == "promises" and len(args) == 1:
            return promises.table(promises.load(), args[0])
        try:
            if name == "figure" and args and args[0] in FIGURES:
                return FIGURES[args[0]](*args[1:])
            if name == "svg":
                return svg_picture(tuple(args), build.pictures, folder)
        except FigureError as error:
            raise WriteupError(f"{where}: {error}") from None
        raise WriteupError(f"{where}: unknown directive {match[0]!r}")

    try:
        return _DIRECTIVE.sub(directive, text)
    except WriteupError:
        raise
    except Exception as error:  # a figure's code failed: say where it was asked for
        raise WriteupError(f"{source}: rendering failed: {type(error).__name__}: {error}") from error


def _page(source: Path, kit_path: str, where: str, build: _Build, depth: int) -> str:
    """Render ``source`` into the kit at ``kit_path``; return ``kit_path``."""
    normal = posixpath.normpath(kit_path)
    if normal != kit_path or normal.startswith("../") or not normal.endswith(".md") or normal == "README.md":
        raise WriteupError(f"{where}: a page goes to a relative .md path in the kit other than README.md; "
                           f"got {kit_path!r}")
    if kit_path in build.pages:
        raise WriteupError(f"{where}: two pages go to {kit_path}")
    if not source.exists():
        raise WriteupError(f"{where}: page source {source} not found")
    build.pages[kit_path], build.sources[kit_path] = "", source  # taken, before its own directives run
    build.pages[kit_path] = _expand(source.read_text(), source, kit_path, build, depth + 1)
    return kit_path


def _hints_marker(problem: str, match: re.Match, text: str, where: str, build: _Build) -> str:
    """Check a ``{{hints N.M}}``; the line that stands for it until a view replaces it."""
    line_start = text.rfind("\n", 0, match.start()) + 1
    line_end = text.find("\n", match.end())
    if text[line_start:line_end if line_end >= 0 else None].strip() != match[0]:
        raise WriteupError(f"{where}: {match[0]} must stand alone on its line")
    if problem not in build.hints:
        raise WriteupError(f"{where}: no hints for {problem} (expected writeup/{HINTS_FOLDER}/{problem}/1.md, ...)")
    if problem in build.placed:
        raise WriteupError(f"{where}: the hints of {problem} are placed twice (first at {build.placed[problem]})")
    build.placed[problem] = where
    return f"<!-- hints {problem} -->"


def _markdown_view(text: str, hints: dict[str, list[str]]) -> str:
    return _HINT_MARKER.sub(lambda m: hint_pointer(m[1], len(hints[m[1]])), text)


def _html_view(text: str, hints: dict[str, list[str]]) -> str:
    return _HINT_MARKER.sub(lambda m: writeup_html.folded_hints(m[1], hints[m[1]]), text)


# ---------------------------------------------------------------- the kit's write-up files

def render(template: Path, rubric_path: Path, public_tests: Path | None = None) -> str:
    """The rendered README: ``template`` with every directive expanded."""
    return render_files(template, rubric_path, public_tests)["README.md"]


def render_files(template: Path, rubric_path: Path, public_tests: Path | None = None,
                 kit_files: frozenset[str] = frozenset()) -> dict[str, str]:
    """The write-up's files, by path in the kit: ``README.md``, its pages (``problems/...``),
    the hints (``hints/N.M/k.md``), the pictures the pages link (``figures/<name>.svg``) and
    ``writeup.html``. ``public_tests`` is the folder of the public tests whose criterion markers
    the points tables list; ``kit_files``, the kit's other files, which pages may link."""
    try:
        public = criterion_tests(public_tests) if public_tests is not None else None
    except MarkerError as error:
        raise WriteupError(str(error)) from None
    hints_folder = template.parent / HINTS_FOLDER
    build = _Build(read_rubric(rubric_path), public, read_hints(hints_folder))
    readme = _expand(template.read_text(), template, "README.md", build)
    unplaced = sorted(set(build.hints) - set(build.placed))
    if unplaced:
        raise WriteupError(f"{hints_folder / unplaced[0]}: no {{{{hints {unplaced[0]}}}}} in the write-up places "
                           "these hints")
    hint_texts = {problem: [_expand(path.read_text(), path, f"{HINTS_FOLDER}/{problem}/{path.name}", build).strip()
                            for path in paths] for problem, paths in build.hints.items()}
    pages = {"README.md": readme, **build.pages}
    files = {path: _markdown_view(text, hint_texts) for path, text in pages.items()}
    for problem, texts in sorted(hint_texts.items()):
        files.update({f"{HINTS_FOLDER}/{problem}/{k}.md": text + "\n" for k, text in enumerate(texts, 1)})
    files.update(sorted(build.pictures.items()))
    linkable = set(kit_files) | set(files)
    try:
        files[writeup_html.HTML_PAGE] = writeup_html.render(
            {path: _html_view(text, hint_texts) for path, text in pages.items()}, build.pictures, linkable)
    except writeup_html.LinkError as error:
        source = template if error.page == "README.md" else build.sources[error.page]
        raise WriteupError(f"{source} ({error.page} in the kit): {error.detail}") from None
    return files
