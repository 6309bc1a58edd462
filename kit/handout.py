"""The student kit: solution stripping, kit generation and the drift check.

Solutions are written once, in the answer key ``minitorch/``, between markers::

    def clock_cycles(num_microbatches, num_stages):
        \"\"\"docstring the student reads\"\"\"
        # BEGIN SOLUTION 2.1
        ...
        # END SOLUTION

:func:`strip_solutions` replaces every such region with a stub that raises
``NotImplementedError("Problem 2.1: clock_cycles")``. ``python -m kit build``
writes the kit ``handout/`` (provided files verbatim, student files stripped, the public
tests, a Makefile with ``submit.py`` behind ``make submit`` and ``minitorch.measure`` behind
``make report``, the ``REPORT.md`` template, a pyproject, and the write-up of
:mod:`kit.writeup`: the README, ``problems/*.md``, ``hints/``, ``figures/*.svg``, ``writeup.html``);
``python -m kit check`` fails when the committed ``handout/`` differs from a fresh
generation.
"""
from __future__ import annotations

import ast
import filecmp
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.layout import DEFAULT_RUBRIC, REPOSITORY, STUDENT_FILES
from grader.tomlcompat import tomllib
from kit import writeup
from minitorch.cli import stub_message

REPO = REPOSITORY  # a module attribute, so that tests can build from a copy of the repository
KIT_TEMPLATES = Path(__file__).resolve().parent / "templates"
# What a student's `make test` / `make submit` / `make hint` leaves in the kit; never part of the comparison.
IGNORED_NAMES = {".venv", "__pycache__", ".pytest_cache", ".hypothesis", "submission.zip", ".hints.json"}

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION (?P<problem>\d+\.\d+)[ \t]*$")
_END = re.compile(r"^[ \t]*# END SOLUTION[ \t]*$")
_ANY_MARKER = re.compile(r"(BEGIN|END)\s+SOLUTION", re.IGNORECASE)


class HandoutError(Exception):
    """A problem with the solution markers or the kit sources; the message names file:line."""


@dataclass(frozen=True)
class Region:
    """One solution region: 1-based line numbers of its BEGIN and END markers."""

    problem: str
    begin: int
    end: int
    indent: str


def find_regions(source: str, filename: str = "<source>") -> list[Region]:
    """The solution regions of ``source``, in order.

    Raises:
        HandoutError: a malformed marker (``# BEGIN SOLUTION`` without an ``N.M`` problem,
            extra text, a marker that is not alone on its line), a BEGIN inside another
            region, or an END without a BEGIN / a BEGIN without an END.
    """
    regions, open_region = [], None
    for number, line in enumerate(source.splitlines(), start=1):
        begin, end = _BEGIN.match(line), _END.match(line)
        if begin:
            if open_region is not None:
                raise HandoutError(
                    f"{filename}:{number}: BEGIN SOLUTION inside the region opened at line "
                    f"{open_region.begin} (markers must not nest)"
                )
            open_region = Region(begin["problem"], number, 0, begin["indent"])
        elif end:
            if open_region is None:
                raise HandoutError(f"{filename}:{number}: END SOLUTION without a BEGIN SOLUTION")
            regions.append(Region(open_region.problem, open_region.begin, number, open_region.indent))
            open_region = None
        elif _ANY_MARKER.search(line):
            raise HandoutError(
                f"{filename}:{number}: malformed solution marker {line.strip()!r}; "
                "expected '# BEGIN SOLUTION N.M' or '# END SOLUTION' alone on a line"
            )
    if open_region is not None:
        raise HandoutError(f"{filename}:{open_region.begin}: BEGIN SOLUTION {open_region.problem} is never closed")
    return regions


def _functions(tree: ast.AST) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function in ``tree`` with its qualified name (``Pipe.forward``)."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _enclosing_function(tree: ast.AST, region: Region, filename: str) -> str:
    """The qualified name of the function whose whole body (after the docstring) is ``region``.

    (A function's last line is its last statement: the END comment may lie beyond it.)
    """
    candidates = [
        (name, node) for name, node in _functions(tree) if node.lineno < region.begin <= (node.end_lineno or node.lineno)
    ]
    if not candidates:
        raise HandoutError(f"{filename}:{region.begin}: solution region {region.problem} is not inside a function")
    name, function = max(candidates, key=lambda item: item[1].lineno)  # the innermost
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring stays
    outside = [s.lineno for s in body if not region.begin < s.lineno < region.end]
    if outside:
        raise HandoutError(
            f"{filename}:{outside[0]}: code of {name} outside solution region {region.problem} "
            f"(lines {region.begin}-{region.end}); a region must be the whole body after the docstring"
        )
    return name


def strip_solutions(source: str, filename: str = "<source>") -> str:
    """Replace every solution region of ``source`` by a stub for the student.

    Each region (markers included) becomes, at the BEGIN marker's indentation::

        # TODO: Implement for Problem N.M.
        raise NotImplementedError("Problem N.M: <Class.method or function>")

    Raises:
        HandoutError: bad markers (see :func:`find_regions`), a region that is not the
            whole body of a function, or a result that does not compile. Messages start
            with ``filename:line``.
    """
    regions = find_regions(source, filename)
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as error:
        raise HandoutError(f"{filename}:{error.lineno}: does not compile: {error.msg}") from None
    lines = source.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    for region in reversed(regions):
        name = _enclosing_function(tree, region, filename)
        stub = [
            f"{region.indent}# TODO: Implement for Problem {region.problem}.{newline}",
            f'{region.indent}raise NotImplementedError("{stub_message(region.problem, name)}"){newline}',
        ]
        lines[region.begin - 1 : region.end] = stub
    stripped = "".join(lines)
    try:
        compile(stripped, filename, "exec")
    except SyntaxError as error:
        raise HandoutError(f"{filename}:{error.lineno}: stripped file does not compile: {error.msg}") from None
    return stripped


def _kit_pyproject() -> str:
    """The kit's pyproject.toml: the repo's pytest settings and marker list, nothing to install."""
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    markers = "".join(f'    "{marker}",\n' for marker in options["markers"])
    return (
        "# Generated from the course repository's pyproject.toml by `make handout`; do not edit.\n"
        "[tool.pytest.ini_options]\n"
        'testpaths = ["tests"]\n'
        '# The kit is never installed: tests import minitorch from this folder.\n'
        'pythonpath = ["."]\n'
        "# Short tracebacks; a test that stops at a stub is one NOT IMPLEMENTED letter (tests/conftest.py).\n"
        f'addopts = "{options["addopts"]} --tb=short"\n'
        f'timeout = {options["timeout"]}\n'
        f"markers = [\n{markers}]\n"
    )


def _kit_files(student_files: list[str]) -> dict[str, str | bytes | Path]:
    """Every file of the kit: relative path -> text, bytes, or a source path copied verbatim."""
    files: dict[str, str | bytes | Path] = {}
    for path in sorted((REPO / "minitorch").glob("*.py")):
        source = path.read_text()
        relative = f"minitorch/{path.name}"
        if path.name in STUDENT_FILES:
            files[relative] = strip_solutions(source, relative)
        else:
            markers = [n for n, line in enumerate(source.splitlines(), 1) if _ANY_MARKER.search(line)]
            if markers:
                raise HandoutError(
                    f"{relative}:{markers[0]}: solution marker in a provided file; markers belong only in "
                    f"the student files {', '.join('minitorch/' + name for name in STUDENT_FILES)}"
                )
            files[relative] = path
    public = REPO / "tests" / "public"
    for path in sorted(public.rglob("*")):
        if path.is_file() and not IGNORED_NAMES.intersection(path.relative_to(public).parts):
            files[f"tests/{path.relative_to(public).as_posix()}"] = path
    for name in ("requirements.txt", "requirements-report.txt", "constraints.txt"):
        files[name] = REPO / name
    files["pyproject.toml"] = _kit_pyproject()
    makefile = (KIT_TEMPLATES / "Makefile.in").read_text()
    # The virtual-environment rules are this repository's own (kit/templates/venv.mk), inlined.
    makefile = makefile.replace("@VENV_MK@", (KIT_TEMPLATES / "venv.mk").read_text().rstrip("\n"))
    files["Makefile"] = makefile.replace("@STUDENT_FILES@", " ".join(f"minitorch/{n}" for n in student_files))
    files[".gitignore"] = KIT_TEMPLATES / "gitignore"
    files["submit.py"] = KIT_TEMPLATES / "submit.py"  # what `make submit` runs
    files["REPORT.md"] = KIT_TEMPLATES / "REPORT.md"  # the written questions beside `make report`'s figures
    # The write-up (README, problem pages, hints, figures/*.svg, writeup.html), computed at build time.
    rubric = REPO / DEFAULT_RUBRIC.relative_to(REPOSITORY)
    files.update(writeup.render_files(REPO / "writeup" / "README.md.in", rubric, public, frozenset(files)))
    return files


def generate(out: Path) -> list[str]:
    """Write the kit into the empty or missing folder ``out``; return the relative paths written."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # the write-up's figures run the answer key
    student_files = [name for name in STUDENT_FILES if (REPO / "minitorch" / name).exists()]
    files = _kit_files(student_files)
    for relative, content in files.items():
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return sorted(files)


def _checked_out_folder(out: Path) -> Path:
    out = out.resolve()
    if out == REPO or out in REPO.parents or (out / ".git").exists() or (out / "grader").exists():
        raise HandoutError(f"refusing to overwrite {out}: it is not a kit folder")
    return out


def build(out: Path) -> list[str]:
    """Regenerate the kit in ``out`` (its old content is replaced); return the files written."""
    out = _checked_out_folder(out)
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch) / "kit"
        written = generate(fresh)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(fresh, out)
    return written


def _tree(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not IGNORED_NAMES.intersection(p.relative_to(root).parts)
    }


def differences(out: Path) -> list[str]:
    """How the kit in ``out`` differs from a fresh generation: ``changed|missing|extra: path``."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch) / "kit"
        generate(fresh)
        expected, actual = _tree(fresh), _tree(out) if out.exists() else set()
        found = [f"missing: {p}" for p in sorted(expected - actual)]
        found += [f"extra: {p}" for p in sorted(actual - expected)]
        found += [
            f"changed: {p}"
            for p in sorted(expected & actual)
            if not filecmp.cmp(fresh / p, out / p, shallow=False)
        ]
    return found
