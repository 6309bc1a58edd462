"""A criterion with a ``fallback`` judges the student's own pieces first and runs again with the
grader's pieces only when they fail: it passes when either passes (the message says which),
so a student's own helpers never cost points and one mistake costs one criterion."""
from __future__ import annotations

import pytest
from grading_helpers import answer_key_source, grade_folder, write_submission

from grader.rubric import parse_rubric

RUBRIC = """
[[criterion]]
id = "9.1-pieces"
problem = "9.1"
title = "the student's own pieces, else the grader's"
points = 1
needs = "cpu"
check = "selftest:pieces"
fallback = "embedding"
timeout = 30
[criterion.params]
fails_with = {fails_with}
"""


@pytest.fixture(scope="module")
def submission(tmp_path_factory):
    return write_submission(tmp_path_factory.mktemp("fallback"), {"pipeline.py": answer_key_source()})


def grade(submission, fails_with: list[str]):
    (result,) = grade_folder(submission, rubric=parse_rubric(RUBRIC.format(fails_with=fails_with))).results
    return result


def test_own_pieces_that_pass_are_judged_alone(submission):
    result = grade(submission, [])
    assert (result.status, result.message, result.details) == ("passed", "", {})


def test_the_graders_pieces_keep_the_points_where_the_students_own_fail(submission):
    result = grade(submission, ["own"])
    assert result.status == "passed"
    assert result.message == ("passed with the grader's embedding in place of yours; with yours it did not: "
                              "wrong with the own pieces")
    assert result.details["own_pieces"] == {"status": "failed", "message": "wrong with the own pieces"}


def test_a_mistake_of_the_criterions_own_fails_with_the_graders_pieces_too(submission):
    result = grade(submission, ["own", "grader"])
    assert (result.status, result.message) == ("failed", "wrong with the grader pieces")
