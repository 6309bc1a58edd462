"""The student kit: solution stripping, the write-up's generated parts (its layout, hints and
HTML page are tests/kit/test_writeup*.py's), drift, and validation both ways (answer key passes
every public test; the stubbed kit fails every one of them with the NotImplementedError of the
test's own problem)."""
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from student_copy import borrow_environment

from grader.layout import REPOSITORY as REPO
from grader.rubric import load_rubric
from grader.tomlcompat import tomllib
from kit import figures, handout, writeup
from kit.handout import HandoutError, strip_solutions

KIT = REPO / "handout"


def test_strip_replaces_function_and_method_bodies_keeping_indentation():
    source = textwrap.dedent('''\
        def schedule(n):
            """Docstring stays."""
            # BEGIN SOLUTION 2.1
            return list(range(n))
            # END SOLUTION


        class Pipe:
            def forward(self, x):
                # BEGIN SOLUTION 2.2
                y = x + 1
                return y
                # END SOLUTION
        ''')
    stripped = strip_solutions(source)
    assert stripped == textwrap.dedent('''\
        def schedule(n):
            """Docstring stays."""
            # TODO: Implement for Problem 2.1.
            raise NotImplementedError("Problem 2.1: schedule")


        class Pipe:
            def forward(self, x):
                # TODO: Implement for Problem 2.2.
                raise NotImplementedError("Problem 2.2: Pipe.forward")
        ''')
    namespace = {}
    exec(compile(stripped, "<stripped>", "exec"), namespace)
    with pytest.raises(NotImplementedError, match=r"^Problem 2\.2: Pipe\.forward$"):
        namespace["Pipe"]().forward(1)


def test_strip_keeps_crlf_line_endings():
    source = "def f():\r\n    # BEGIN SOLUTION 3.1\r\n    return 1\r\n    # END SOLUTION\r\n"
    assert strip_solutions(source) == (
        'def f():\r\n    # TODO: Implement for Problem 3.1.\r\n    raise NotImplementedError("Problem 3.1: f")\r\n'
    )


BAD_SOURCES = {
    "nested": ("def f():\n    # BEGIN SOLUTION 2.1\n    # BEGIN SOLUTION 2.2\n    pass\n    # END SOLUTION\n", 3, "nest"),
    "never closed": ("def f():\n    # BEGIN SOLUTION 2.1\n    pass\n", 2, "never closed"),
    "end without begin": ("def f():\n    pass\n    # END SOLUTION\n", 3, "without a BEGIN"),
    "no problem number": ("def f():\n    # BEGIN SOLUTION\n    pass\n    # END SOLUTION\n", 2, "malformed"),
    "problem not N.M": ("def f():\n    # BEGIN SOLUTION 2\n    pass\n    # END SOLUTION\n", 2, "malformed"),
    "trailing text": ("def f():\n    pass  # END SOLUTION here\n", 2, "malformed"),
    "outside a function": ("# BEGIN SOLUTION 2.1\nX = 1\n# END SOLUTION\n", 1, "not inside a function"),
    "part of a body": (
        "def f():\n    x = 1\n    # BEGIN SOLUTION 2.1\n    return x\n    # END SOLUTION\n", 2, "outside solution region"
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_bad_markers_fail_loudly_with_file_and_line(case):
    source, line, words = BAD_SOURCES[case]
    with pytest.raises(HandoutError, match=rf"^minitorch/pipeline\.py:{line}: .*{words}"):
        strip_solutions(source, "minitorch/pipeline.py")


def _repo_copy(tmp_path: Path) -> Path:
    """The sources the kit is generated from, in a scratch folder."""
    copy = tmp_path / "repo"
    for name in ("minitorch", "writeup", "tests/public"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "requirements.txt", "requirements-report.txt", "constraints.txt", "grader/rubric.toml"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, copy / name)
    return copy


def test_marker_in_a_provided_file_fails_the_build(tmp_path, monkeypatch):
    copy = _repo_copy(tmp_path)
    runtime = copy / "minitorch" / "runtime.py"
    lines = runtime.read_text().splitlines(keepends=True)
    lines.insert(3, "# BEGIN SOLUTION 2.2\n")
    runtime.write_text("".join(lines))
    monkeypatch.setattr(handout, "REPO", copy)
    with pytest.raises(HandoutError, match=r"^minitorch/runtime\.py:4: solution marker in a provided file"):
        handout.generate(tmp_path / "kit")


def test_missing_rubric_fails_the_build_clearly(tmp_path, monkeypatch):
    copy = _repo_copy(tmp_path)
    (copy / "grader" / "rubric.toml").unlink()
    monkeypatch.setattr(handout, "REPO", copy)
    with pytest.raises(writeup.WriteupError, match=r"rubric\.toml: cannot read the rubric.*the write-up's points tables"):
        handout.generate(tmp_path / "kit")


def test_points_tables_come_from_the_grader_s_own_rubric_parser(tmp_path):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(textwrap.dedent("""\
        [[criterion]]
        id = "9.1-a"
        problem = "9.1"
        title = "first"
        points = 3
        needs = "cpu"
        check = "problem2.clock_cycles:schedule"
        [[criterion]]
        id = "9.1-b"
        problem = "9.1"
        title = "second"
        points = 2
        needs = "cpu"
        check = "problem2.clock_cycles:errors"
        enabled = false
        [[criterion]]
        id = "9.2-fast"
        problem = "9.2"
        title = "timed"
        points = 5
        needs = "cuda2"
        check = "problem2.speedup:speedup"
        [[criterion]]
        id = "9.3-smoke"
        problem = "9.3"
        title = "one GPU"
        points = 1
        needs = "cuda1"
        check = "problem2.speedup:speedup"
        """))
    criteria = writeup.read_criteria(rubric)
    assert [c.id for c in criteria] == ["9.1-a", "9.2-fast", "9.3-smoke"]  # disabled criteria are not listed
    assert writeup.points(criteria, "9") == "9"
    summary = writeup.points_summary(criteria).splitlines()
    assert summary[2:] == ["| 9.1 | 1 | 3 | 0 |", "| 9.2 | 1 | 5 | 5 |", "| 9.3 | 1 | 1 | 1 |", "| **Total** | 3 | **9** | 6 |"]
    assert "| `9.2-fast` | timed | 5 | 2 CUDA GPUs |" in writeup.points_table(criteria, "9.2")
    assert "| `9.3-smoke` | one GPU | 1 | 1 CUDA GPU |" in writeup.points_table(criteria, "9.3")  # every `needs` the grader accepts
    with pytest.raises(writeup.WriteupError, match="no enabled criterion for problem 7"):
        writeup.points_table(criteria, "7")


def test_the_review_list_comes_from_the_rubrics_policy(tmp_path):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text('[policy]\nforbidden = ["inspect", ".__wrapped__"]\n'
                      '[[criterion]]\nid = "9.1-a"\nproblem = "9.1"\ntitle = "t"\npoints = 3\nneeds = "cpu"\n'
                      'check = "problem2.clock_cycles:schedule"\n')
    template = tmp_path / "README.md.in"
    template.write_text("flagged: {{policy_forbidden}}\n")
    assert writeup.render(template, rubric) == "flagged: `inspect`, `.__wrapped__`\n"


def test_the_kit_write_up_lists_every_name_the_policy_scan_flags():
    readme = (KIT / "README.md").read_text()
    section = readme[readme.index("**Flagged for review.**"):]
    assert all(f"`{name}`" in section for name in load_rubric().forbidden)


def test_rubric_errors_name_the_criterion(tmp_path):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text('[[criterion]]\nid = "9.1-a"\nproblem = "9.1"\npoints = 3\n')
    with pytest.raises(writeup.WriteupError, match=r"criterion #1 \(9\.1-a\): missing key 'title'"):
        writeup.read_criteria(rubric)


def test_unknown_directive_names_file_and_line(tmp_path):
    template = tmp_path / "README.md.in"
    template.write_text("line one\n{# a note\n   over two lines #}\n{{figure nonsense}}\n")
    with pytest.raises(writeup.WriteupError, match=r"README\.md\.in:2: unknown directive"):
        writeup.render(template, REPO / "grader" / "rubric.toml")


def kit_pages() -> dict[str, str]:
    """The kit's Markdown write-up, by path: the README and the problem pages."""
    pages = [KIT / "README.md", *sorted((KIT / "problems").glob("*.md"))]
    return {page.relative_to(KIT).as_posix(): page.read_text() for page in pages}


def test_kit_write_up_shows_the_answer_keys_schedule():
    from minitorch.pipeline import clock_cycles

    text = "\n".join(kit_pages().values())
    for index, wave in enumerate(clock_cycles(3, 3)):
        assert f"  k = {index}: {wave}" in text
    assert "{{" not in text and "{#" not in text


def test_kit_write_up_draws_the_answer_keys_schedules_and_links_every_picture():
    from minitorch import pipeline, schedules

    pages = kit_pages()
    text = "\n".join(pages.values())
    for schedule in (schedules.gpipe(4, 8), pipeline.one_f_one_b(4, 8), pipeline.interleaved_one_f_one_b(2, 4, 2)):
        assert schedules.render_ascii(schedules.simulate(schedule)) in text
    linked = {posixpath.normpath(posixpath.join(posixpath.dirname(page), link))
              for page, page_text in pages.items() for link in re.findall(r"\]\(([^)]+\.svg)\)", page_text)}
    written = {p.relative_to(KIT).as_posix() for p in (KIT / "figures").glob("*.svg")}
    assert linked == written and "figures/1f1b_k4_m8.svg" in written
    svg = (KIT / "figures" / "1f1b_k4_m8.svg").read_text()
    assert svg.startswith("<svg") and "1F1B, K = 4, M = 8" in svg


def test_schedule_figures_without_the_answer_key_render_a_note_not_an_error(monkeypatch, capsys):
    from minitorch import pipeline

    def stub(*args):
        raise NotImplementedError("Problem 4.1: one_f_one_b")

    monkeypatch.setattr(pipeline, "one_f_one_b", stub)
    text = figures.timeline("1f1b", "4", "8")
    assert "python -m minitorch.timeline --schedule 1f1b -K 4 -M 8" in text and "device 0" not in text
    pictures = {}
    assert "not generated" in figures.svg_picture(("1f1b", "4", "8"), pictures) and pictures == {}
    assert "device 0 |" in figures.timeline("gpipe", "4", "8")  # provided schedules need no answer key
    monkeypatch.setitem(sys.modules, "minitorch.pipeline", None)  # the file is absent: ImportError
    assert "python -m minitorch.demos" in figures.clock_cycles_waves("3", "3")
    assert "needs the answer key" in capsys.readouterr().err


def test_bad_schedule_figure_names_file_and_line(tmp_path):
    template = tmp_path / "README.md.in"
    template.write_text("one\n{{figure timeline 1f1b 4 8 v2}}\n")
    with pytest.raises(writeup.WriteupError, match=r"README\.md\.in:2: unknown schedule option 'v2'"):
        writeup.render(template, REPO / "grader" / "rubric.toml")
    template.write_text("{{svg pipedream 4 8}}\n")
    with pytest.raises(writeup.WriteupError, match=r"README\.md\.in:1: expected SCHEDULE K M"):
        writeup.render(template, REPO / "grader" / "rubric.toml")


def test_committed_kit_matches_a_fresh_generation_and_drift_is_reported(tmp_path):
    assert handout.differences(KIT) == []
    copy = tmp_path / "handout"
    shutil.copytree(KIT, copy)
    (copy / "README.md").write_text("edited by hand\n")
    (copy / "minitorch" / "extra.py").write_text("")
    (copy / "Makefile").unlink()
    (copy / ".venv").mkdir()  # what `make test` leaves behind is not drift
    (copy / ".venv" / "x").write_text("")
    assert handout.differences(copy) == ["missing: Makefile", "extra: minitorch/extra.py", "changed: README.md"]


def test_build_refuses_to_overwrite_the_repository():
    with pytest.raises(HandoutError, match="refusing to overwrite"):
        handout.build(REPO)


def test_answer_key_is_not_in_the_kit():
    for name in handout.STUDENT_FILES:
        key = REPO / "minitorch" / name
        if key.exists():
            assert (KIT / "minitorch" / name).read_text() == strip_solutions(key.read_text(), name)
            assert "BEGIN SOLUTION" not in (KIT / "minitorch" / name).read_text()


# --- validation both ways, on a scratch copy of the kit --------------------------------------

OUTCOMES_PLUGIN = '''
import json, os
import pytest

RESULTS = {}

def _chain(error):
    seen = []
    todo = [error]
    while todo and len(seen) < 50:
        error = todo.pop()
        if error is None or any(error is s for s in seen):
            continue
        seen.append(error)
        todo += list(getattr(error, "exceptions", ())) + [error.__cause__, error.__context__]
    return seen

def pytest_runtest_makereport(item, call):
    entry = RESULTS.setdefault(item.nodeid, {
        "markers": sorted({m.name for m in item.iter_markers() if m.name.startswith("problem_")}),
        "outcome": "passed", "error": None, "not_implemented": None})
    if call.excinfo is None or entry["error"] is not None:
        return
    error = call.excinfo.value
    entry["outcome"] = "skipped" if call.excinfo.errisinstance(pytest.skip.Exception) else "failed"
    entry["error"] = f"{type(error).__name__}: {error}"[:300]
    entry["not_implemented"] = next((str(e) for e in _chain(error) if isinstance(e, NotImplementedError)), None)

def pytest_collectreport(report):
    if report.failed:
        RESULTS["collect:" + report.nodeid] = {"outcome": "collection error", "error": str(report.longrepr)[-300:]}

def pytest_sessionfinish(session):
    with open(os.environ["KIT_OUTCOMES"], "w") as handle:
        json.dump(RESULTS, handle)
'''


KIT_TESTS_S = 300  # the kit's test run; the tests that wait for it allow 60 s more


def run_kit_tests(kit: Path, tmp_path: Path, as_a_student: bool = False) -> tuple[dict, str]:
    """Run the kit's own tests in a subprocess, from the kit folder: each test's outcome, and
    what the run printed. ``as_a_student``: through the kit's ``make test``, in its own .venv."""
    (tmp_path / "plugin").mkdir(parents=True, exist_ok=True)
    (tmp_path / "plugin" / "kit_outcomes.py").write_text(OUTCOMES_PLUGIN)
    outcomes = tmp_path / "outcomes.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "plugin"), "KIT_OUTCOMES": str(outcomes), "COLUMNS": "80"}
    env.setdefault("HYPOTHESIS_PROFILE", "ci")
    if as_a_student:
        borrow_environment(kit)
        command = ["make", "--no-print-directory", "test", "PYTEST_ARGS=-p kit_outcomes"]
    else:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "kit_outcomes", "-p", "no:cacheprovider"]
    result = subprocess.run(command, cwd=kit, env=env, capture_output=True, text=True, timeout=KIT_TESTS_S)
    assert outcomes.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(outcomes.read_text()), result.stdout + result.stderr


def _builds_on(marker: str, raised: tuple) -> bool:
    """A test of Problem N.M may stop at the stub of N.M or of an earlier part of N (3.3 uses 3.2);
    a test of N.0 (the conventions across Problem N) at the stub of any part of N."""
    problem, part = (int(x) for x in marker.split("."))
    return int(raised[0]) == problem and (part == 0 or int(raised[1]) <= part)


@pytest.fixture(scope="module")
def scratch_kit(tmp_path_factory):
    root = tmp_path_factory.mktemp("kit")
    shutil.copytree(KIT, root / "kit", ignore=shutil.ignore_patterns(*handout.IGNORED_NAMES))
    return root


@pytest.fixture(scope="module")
def first_make_test(scratch_kit):
    """A student's first ``make test`` in a fresh copy of the kit: outcomes and what it printed."""
    kit = scratch_kit / "first"
    shutil.copytree(scratch_kit / "kit", kit)
    return run_kit_tests(kit, scratch_kit / "stub-run", as_a_student=True)


@pytest.mark.slow
@pytest.mark.timeout(KIT_TESTS_S + 60)
def test_stubbed_kit_fails_every_public_test_with_its_own_problem(first_make_test):
    results, _ = first_make_test
    assert results, "the kit has no public tests"
    wrong = []
    for test, entry in results.items():
        problems = [m.removeprefix("problem_").replace("_", ".") for m in entry.get("markers", [])]
        raised = re.search(r"Problem (\d+)\.(\d+):", entry["not_implemented"] or "")
        if entry["outcome"] != "failed":
            wrong.append(f"{test}: {entry['outcome']} on the stubs {entry.get('error') or ''}")
        elif len(problems) != 1:
            wrong.append(f"{test}: needs exactly one problem marker, has {entry['markers']}")
        elif raised is None or not _builds_on(problems[0], raised.groups()):
            wrong.append(f"{test}: expected NotImplementedError('Problem {problems[0]}: ...') or of a part "
                         f"it builds on, got {entry['error']}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
@pytest.mark.timeout(KIT_TESTS_S + 60)
def test_answer_key_passes_every_public_test_of_the_kit(scratch_kit):
    kit = scratch_kit / "key"
    shutil.copytree(scratch_kit / "kit", kit)
    for name in handout.STUDENT_FILES:
        if (REPO / "minitorch" / name).exists():
            shutil.copyfile(REPO / "minitorch" / name, kit / "minitorch" / name)
    results, _ = run_kit_tests(kit, scratch_kit / "key-run")
    assert results, "the kit has no public tests"
    failed = [f"{test}: {entry['outcome']} {entry.get('error') or ''}" for test, entry in results.items()
              if entry["outcome"] != "passed"]
    assert not failed, "\n".join(failed)


@pytest.mark.slow
@pytest.mark.timeout(KIT_TESTS_S + 60)
def test_a_students_first_make_test_is_short_and_ends_with_a_summary_per_problem(first_make_test):
    results, printed = first_make_test
    lines = printed.rstrip().splitlines()
    assert len(lines) <= 150, f"{len(lines)} lines:\n{printed[-3000:]}"
    assert "Traceback" not in printed and "distributed.py" not in printed
    summary = lines[lines.index(next(line for line in lines if "public tests by problem" in line)) + 1:]
    markers = tomllib.loads((KIT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    problems = [m.split(":")[0].removeprefix("problem_").replace("_", ".") for m in markers if m.startswith("problem_")]
    for problem in problems:
        tests = sum(problem in [m.removeprefix("problem_").replace("_", ".") for m in r["markers"]] for r in results.values())
        line = next((line for line in summary if line.startswith(problem + " ")), None)
        assert line is not None, f"no summary line for {problem}:\n" + "\n".join(summary)
        assert f" 0/{tests} pass" in line and f"{tests} not implemented yet: Problem " in line, line
    conventions = next(line for line in summary if line.startswith("3.0 "))  # they build on every part of 3
    assert "Problem 3.1: " in conventions and "a part this one builds on" in conventions, conventions
    # pytest adds "(0:01:00)" after a minute: a busy machine must not fail this
    assert re.search(rf"=+ {len(results)} not implemented in [\d.]+s( \(\d+:\d\d:\d\d\))? =+", printed), lines[-3:]
