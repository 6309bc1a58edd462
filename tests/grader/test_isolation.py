"""The harness isolates every child: the submitted file, never the answer key; own process
group; private TMPDIR; limits; an unprivileged user when the grader runs as root."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from grading_helpers import REPO, answer_key_source, grade_folder, write_submission

from grader.rubric import parse_rubric

RUBRIC = """
[[criterion]]
id = "9.1-isolation"
problem = "9.1"
title = "the child is isolated"
points = 1
needs = "cpu"
check = "selftest:isolation"
timeout = 60
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    source = answer_key_source() + '\nSUBMITTED_MARKER = "submitted"\n'
    folder = write_submission(tmp_path_factory.mktemp("isolation"), {"pipeline.py": source})
    return grade_folder(folder, rubric=parse_rubric(RUBRIC))


def test_child_is_isolated(report):
    (result,) = report.results
    assert result.status == "passed", result.message


def test_answer_key_not_importable_from_the_child(report):
    # The grader's own process can import the answer key (the repo root is on its path);
    # the passed criterion above says the child imported the submitted file instead.
    assert str(REPO) in [os.path.realpath(p or ".") for p in sys.path]
    assert report.results[0].status == "passed"


@pytest.mark.skipif(os.geteuid() != 0, reason="privileges are dropped only when the grader runs as root")
def test_children_drop_root(report):
    assert report.environment["children_uid"] != 0, report.notes



@pytest.mark.skipif(os.geteuid() != 0, reason="children change user only when the grader runs as root")
def test_batch_slots_give_concurrent_children_distinct_uids(monkeypatch):
    import pwd

    from grader.harness import HarnessError, _unprivileged_user
    from grader.layout import UID_SLOT_VARIABLE as UID_SLOT
    from grader.rubric import Settings

    nobody = pwd.getpwnam("nobody")
    monkeypatch.setenv(UID_SLOT, "0")
    assert _unprivileged_user(Settings()) == (nobody.pw_uid, nobody.pw_gid)
    free = next(k for k in range(1, 50) if not _has_account(nobody.pw_uid - k))
    monkeypatch.setenv(UID_SLOT, str(free))
    assert _unprivileged_user(Settings()) == (nobody.pw_uid - free, nobody.pw_gid)
    taken = pwd.getpwnam("root").pw_uid  # a slot that lands on an account is refused
    monkeypatch.setenv(UID_SLOT, str(nobody.pw_uid - taken))
    with pytest.raises(HarnessError, match="belongs to 'root'"):
        _unprivileged_user(Settings())


def _has_account(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def test_hiding_plan_keeps_only_a_virtualenv_inside_the_repository(monkeypatch, tmp_path):
    from grader import harness

    venv = REPO / ".venv-example"
    site = venv / "lib" / "site-packages"
    monkeypatch.setattr(harness, "_python_folders", lambda: [REPO, REPO / "tests", site, Path("/usr/lib/python3")])
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "exec_prefix", str(venv))
    assert harness.hiding_plan(tmp_path) == ((str(REPO.resolve()), (str(site),)),)
    assert harness.hiding_plan(REPO / "scratch") == ()  # the children's tree would be hidden too
