"""The rubric: the shipped one is valid and splits Problem 2's points as agreed; mistakes
are reported with the entry and the field."""
from __future__ import annotations

import pytest

from grader.rubric import DEFAULT_GRADESCOPE_BUDGET, RubricError, gradescope_budget, load_rubric, parse_rubric

GOOD = """
[grader]
timeout = 30
disabled_problems = []

[[criterion]]
id = "2.1-schedule"
problem = "2.1"
title = "waves"
points = 6
needs = "cpu"
check = "problem2.clock_cycles:schedule"

[[criterion]]
id = "2.2-forward"
problem = "2.2"
title = "forward"
points = 6
needs = "cpu"
check = "problem2.pipe_forward:forward"
timeout = 10
[criterion.params]
anything = 1
"""


def test_shipped_rubric_points():
    rubric = load_rubric()
    points = {}
    for criterion in rubric.criteria:
        points[criterion.problem] = points.get(criterion.problem, 0) + criterion.points
    # Problem 2 = 42 (the lead's split of the 100 points); 2.3 stays 10 (Gradescope counts 90 = 100 - 10).
    assert (points["2.1"], points["2.2"], points["2.3"], points["2.4"]) == (7, 20, 10, 5)
    (speedup,) = [c for c in rubric.criteria if c.problem == "2.3"]
    assert speedup.needs == "cuda2"


def test_good_rubric_defaults_and_params():
    rubric = parse_rubric(GOOD)
    schedule, forward = rubric.criteria
    assert schedule.timeout == 30 and forward.timeout == 10
    assert forward.params == {"anything": 1} and schedule.params == {}
    assert [c.id for c in rubric.active()] == ["2.1-schedule", "2.2-forward"]


def test_disabling_a_criterion_or_a_problem():
    rubric = parse_rubric(GOOD.replace('check = "problem2.pipe_forward:forward"', 'check = "problem2.pipe_forward:forward"\nenabled = false'))
    assert [c.id for c in rubric.active()] == ["2.1-schedule"]
    rubric = parse_rubric(GOOD.replace("disabled_problems = []", 'disabled_problems = ["2.1"]'))
    assert [c.id for c in rubric.active()] == ["2.2-forward"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (("points = 6\nneeds", "points = 0\nneeds"), r"criterion #1 \(2.1-schedule\): points must be a positive number"),
        (("title = \"waves\"", "title = \"waves\"\npoint = 3"), r"2.1-schedule\): unknown key 'point'"),
        (('id = "2.2-forward"\nproblem = "2.2"', 'id = "2.1-schedule"\nproblem = "2.1"'), r"criterion #2: duplicate id '2.1-schedule' \(also criterion #1\)"),
        (('"problem2.clock_cycles:schedule"', '"problem2.clock_cycles:nothing"'), r"has no function observe_nothing"),
        (('"problem2.clock_cycles:schedule"', '"nowhere:schedule"'), r"no module grader/checks/nowhere.py"),
        (('needs = "cpu"', 'needs = "gpu"'), r"needs must be one of"),
        (("disabled_problems = []", 'disabled_problems = ["7.7"]'), r"disabled_problems names '7.7'"),
        (("timeout = 10", "timeout = -1"), r"2.2-forward\): timeout must be a positive number"),
        (('id = "2.2-forward"', 'id = "forward"'), r"id must be"),
        (("[grader]", "[grader]\nmemory = 5"), r"\[grader\] has unknown key 'memory'"),
        (("[grader]", "[grader\n"), r"not valid TOML"),
        (('check = "problem2.pipe_forward:forward"', 'check = "problem2.pipe_forward:forward"\nvisibility = "after_due"'),
         r"2.2-forward\): visibility must be one of 'visible', 'hidden', 'after_due_date', 'after_published', got 'after_due'"),
        (("[grader]", "[gradescope]\nbudget = 0\n[grader]"), r"\[gradescope\] budget must be a positive number of seconds"),
        (("[grader]", "[gradescope]\nbudgets = 300\n[grader]"), r"\[gradescope\] has unknown key 'budgets'"),
    ],
)
def test_mistakes_name_entry_and_field(edit, message):
    old, new = edit
    assert old in GOOD
    with pytest.raises(RubricError, match=message):
        parse_rubric(GOOD.replace(old, new, 1))


def test_gradescope_visibility_and_budget(tmp_path):
    rubric = parse_rubric(GOOD.replace('check = "problem2.pipe_forward:forward"', 'check = "problem2.pipe_forward:forward"\nvisibility = "after_due_date"'))
    assert [c.visibility for c in rubric.criteria] == ["visible", "after_due_date"]
    assert rubric.gradescope_budget == DEFAULT_GRADESCOPE_BUDGET
    path = tmp_path / "rubric.toml"
    path.write_text("[gradescope]\nbudget = 300\n" + GOOD)
    assert load_rubric(path).gradescope_budget == gradescope_budget(path) == 300
    path.write_text("[gradescope]\nbudget = 'soon'\n" + GOOD)  # the grader reports it; the wrapper keeps going
    assert gradescope_budget(path) == DEFAULT_GRADESCOPE_BUDGET
