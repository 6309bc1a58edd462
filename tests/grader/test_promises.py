"""The promise registry (grader/promises/problemN.toml) is complete and true: every clause of every
student docstring is a registered promise (or registered prose), every promise names the hidden
criteria and the public tests that fail for its mistake, every criterion tries a promise, and a
docstring edit fails here until its promises have been reviewed."""
from __future__ import annotations

from dataclasses import replace

import pytest

from grader import promises
from grader.rubric import load_rubric

PROBLEMS = sorted({c.problem for c in load_rubric().criteria})


@pytest.fixture(scope="module")
def found() -> list[tuple[str, str]]:
    return promises.problems_with(promises.load())


def test_every_student_unit_is_registered(found):
    unplaced = [line for problem, line in found if not problem]
    assert not unplaced, "\n".join(unplaced)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_the_registry_is_complete_for(problem, found):
    lines = [line for where, line in found if where == problem]
    assert not lines, f"{len(lines)} problem(s) in grader/promises/ for {problem}:\n" + "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the checker itself

DOC = """Do a thing.

Args:
    n: an int >= 1.

Raises:
    ValueError: ``n < 1``.
"""


@pytest.fixture
def tiny(monkeypatch):
    """A registry of one unit, ``minitorch.pipeline.thing`` with the docstring DOC, checked
    against a one-criterion rubric and one public test."""
    monkeypatch.setattr(promises, "all_docstrings", lambda: {"minitorch.pipeline.thing": DOC})
    monkeypatch.setattr(promises, "student_units", lambda: {"minitorch.pipeline.thing": DOC})
    criterion = replace(load_rubric().criteria[0], id="2.1-thing", problem="2.1")
    monkeypatch.setattr(promises, "load_rubric", lambda: replace(load_rubric(), criteria=(criterion,)))
    monkeypatch.setattr(promises, "public_test_names", lambda: {"tests/public/test_p.py::test_thing": {"2.1-thing"}})
    unit = promises.Unit("minitorch.pipeline.thing", "2.1", promises.fingerprint(DOC), ("Do a thing.",))
    registry = promises.Registry({unit.name: unit}, [
        promises.Promise("2.1-n", unit.name, "an int >= 1", ("2.1-thing",), ("tests/public/test_p.py::test_thing",)),
        promises.Promise("2.1-raises", unit.name, "ValueError: ``n < 1``", ("2.1-thing",), ("tests/public/test_p.py::test_thing",)),
    ])
    return registry


def lines(registry) -> list[str]:
    return [line for _, line in promises.problems_with(registry)]


def test_a_complete_registry_has_nothing_to_say(tiny):
    assert lines(tiny) == []


def test_a_clause_no_promise_quotes_is_named(tiny):
    tiny.promises.pop()
    assert lines(tiny) == ["minitorch.pipeline.thing: no promise or prose quotes the clause 'ValueError: `n < 1`.'"]


def test_a_docstring_edit_is_caught(tiny, monkeypatch):
    edited = DOC.replace(">= 1", ">= 0")
    monkeypatch.setattr(promises, "all_docstrings", lambda: {"minitorch.pipeline.thing": edited})
    found = lines(tiny)
    assert any("its docstring changed" in line for line in found)
    assert any("its quote is not in the docstring" in line for line in found)


def test_a_promise_without_a_check_or_a_public_test_is_named(tiny):
    tiny.promises[0] = replace(tiny.promises[0], criteria=(), public=())
    found = lines(tiny)
    assert any("no hidden criterion tries it" in line for line in found)
    assert any("no public test fails for its mistake" in line for line in found)


def test_a_criterion_no_promise_names_is_named(tiny):
    tiny.promises[:] = [replace(p, criteria=(), unchecked="nobody can") for p in tiny.promises]
    assert "criterion 2.1-thing: no promise names it (a check must try a promise)" in lines(tiny)


def test_a_public_test_marked_for_another_criterion_is_named(tiny, monkeypatch):
    monkeypatch.setattr(promises, "public_test_names", lambda: {"tests/public/test_p.py::test_thing": {"2.2-other"}})
    assert any("is marked for ['2.2-other']" in line for line in lines(tiny))


def test_clauses_leave_out_code_blocks_and_headings():
    text = "Sum them.\n\nExample::\n\n    >>> f(1)\n    2\n\nReturns:\n    The sum. Never negative.\n"
    assert promises.clauses(text) == ["Sum them.", "The sum.", "Never negative."]


def test_a_criterion_id_leads_to_its_checks_files_in_one_step():
    """``python -m grader.promises --criterion ID``: a newcomer's way from an id to the code."""
    from grader.layout import REPOSITORY

    text = promises.describe_criterion("5.1-memory")
    files = [line.split()[-1] for line in text.splitlines() if line.lstrip().startswith(("child", "parent"))]
    assert len(files) == 2 and all((REPOSITORY / path).is_file() for path in files), text
    with pytest.raises(ValueError, match="no criterion '9.9-nothing'"):
        promises.describe_criterion("9.9-nothing")
