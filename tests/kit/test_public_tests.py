"""Public parity: every criterion of the rubric has a public test that catches the same kind
of mistake (its ``@pytest.mark.criterion`` marker names the criterion), every marker names a
criterion that exists, the markers read from the syntax tree are the ones pytest sees, and
the write-up lists the tests next to each criterion.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from grader.layout import DEFAULT_RUBRIC, REPOSITORY
from grader.rubric import load_rubric
from kit import writeup
from kit.public_tests import MarkerError, criterion_tests

PUBLIC = REPOSITORY / "tests" / "public"
KIT_PAGES = [REPOSITORY / "handout" / "README.md", *sorted((REPOSITORY / "handout" / "problems").glob("*.md"))]


def test_every_criterion_has_a_public_test_and_every_marker_a_criterion():
    criteria = {c.id for c in load_rubric(DEFAULT_RUBRIC).active()}
    found = criterion_tests(PUBLIC)
    assert not criteria - set(found), f"criteria without a public test: {sorted(criteria - set(found))}"
    assert not set(found) - criteria, f"markers naming no criterion of the rubric: {sorted(set(found) - criteria)}"


COLLECT = """
import json, sys
import pytest

class Markers:
    def __init__(self):
        self.found = {}

    def pytest_collection_modifyitems(self, items):
        for item in items:
            for marker in item.iter_markers("criterion"):
                for criterion in marker.args:
                    tests = self.found.setdefault(criterion, [])
                    name = item.path.name + "::" + item.originalname
                    if name not in tests:
                        tests.append(name)

markers = Markers()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", sys.argv[1]], plugins=[markers])
print("MARKERS" + json.dumps(markers.found))
sys.exit(code)
"""


def test_markers_read_from_the_source_are_what_pytest_collects():
    result = subprocess.run([sys.executable, "-c", COLLECT, str(PUBLIC)], cwd=REPOSITORY, capture_output=True,
                            text=True, timeout=110)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    collected = json.loads(result.stdout.split("MARKERS", 1)[1])
    found = criterion_tests(PUBLIC)
    assert {k: sorted(v) for k, v in collected.items()} == {k: sorted(v) for k, v in found.items()}


def test_module_markers_classes_and_bad_markers(tmp_path):
    (tmp_path / "test_a.py").write_text(textwrap.dedent("""\
        import pytest
        pytestmark = [pytest.mark.problem_9_1, pytest.mark.criterion("9.1-all")]

        @pytest.mark.criterion("9.1-one", "9.1-two")
        def test_one():
            pass

        class TestGroup:
            @pytest.mark.criterion("9.1-two")
            def test_two(self):
                pass

        def helper():
            pass
        """))
    assert criterion_tests(tmp_path) == {
        "9.1-all": ["test_a.py::test_one", "test_a.py::TestGroup.test_two"],
        "9.1-one": ["test_a.py::test_one"],
        "9.1-two": ["test_a.py::test_one", "test_a.py::TestGroup.test_two"],
    }
    (tmp_path / "test_b.py").write_text("import pytest\nID = 'x'\n\n@pytest.mark.criterion(ID)\ndef test_b():\n    pass\n")
    with pytest.raises(MarkerError, match=r"test_b.py:4: criterion markers take criterion ids as string literals"):
        criterion_tests(tmp_path)


def test_write_up_names_the_public_tests_next_to_each_criterion(tmp_path):
    criteria = writeup.read_criteria(DEFAULT_RUBRIC)
    public = {"2.2-transfers": ["test_pipeline.py::test_moves"], "2.2-forward": ["test_pipeline.py::test_a", "test_pipeline.py::test_b"]}
    table = writeup.points_table(criteria, "2.2", public)
    assert "| Public tests |" in table.splitlines()[0]
    transfers = next(line for line in table.splitlines() if line.startswith("| `2.2-transfers`"))
    assert transfers.endswith("| `test_moves` |")
    forward = next(line for line in table.splitlines() if line.startswith("| `2.2-forward`"))
    assert forward.endswith("| `test_a`, `test_b` |")
    no_grad = next(line for line in table.splitlines() if line.startswith("| `2.2-no-grad`"))
    assert no_grad.endswith("| (none) |")
    write_up = "\n".join(page.read_text() for page in KIT_PAGES)
    for criterion, tests in criterion_tests(PUBLIC).items():
        row = next(line for line in write_up.splitlines() if line.startswith(f"| `{criterion}` |"))
        assert all(f"`{test.split('::')[-1]}`" in row for test in tests), row


def unexplained_assertions(folder) -> list[str]:
    """``file:line: code`` for each assertion of the public tests that would fail without
    saying what it expected: an ``assert`` without a message, a ``torch.testing.assert_close``
    without ``msg``."""
    import ast

    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            bare = isinstance(node, ast.Assert) and node.msg is None
            bare = bare or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                            and node.func.attr == "assert_close" and not any(k.arg == "msg" for k in node.keywords))
            if bare:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:100]}")
    return found


def test_every_public_assertion_says_what_it_expected():
    # A student reads only the message: "assert None is not None" names neither the case nor the expectation.
    bare = unexplained_assertions(PUBLIC)
    assert not bare, "public assertions without a message naming the case and what was expected:\n" + "\n".join(bare)


def test_unexplained_assertions_are_found(tmp_path):
    (tmp_path / "test_a.py").write_text(textwrap.dedent("""\
        import torch

        def test_a(x):
            assert x == 1
            assert x == 2, "x is 2"
            torch.testing.assert_close(x, x)
            torch.testing.assert_close(x, x, msg="same")
        """))
    assert unexplained_assertions(tmp_path) == ["test_a.py:4: assert x == 1", "test_a.py:6: torch.testing.assert_close(x, x)"]
