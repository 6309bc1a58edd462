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


def test_hiding_plan_keeps_only_a_virtualenv_inside_the_repository(monkeypatch, tmp_path):
    from grader import harness

    venv = REPO / ".venv-example"
    site = venv / "lib" / "site-packages"
    monkeypatch.setattr(harness, "_python_folders", lambda: [REPO, REPO / "tests", site, Path("/usr/lib/python3")])
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "exec_prefix", str(venv))
    assert harness.hiding_plan(tmp_path) == ((str(REPO.resolve()), (str(site),)),)
    assert harness.hiding_plan(REPO / "scratch") == ()  # the children's tree would be hidden too


FORKSERVER_ENVIRONMENT = '''
import ctypes, os
from multiprocessing import forkserver
from grader.harness import _c_environment, forkserver_context, start_forkserver
os.environ["GRADER_TEST_TOKEN"] = "python-level secret"
libc = ctypes.CDLL(None)
libc.setenv(b"GRADER_TEST_C_TOKEN", b"c-level secret", 1)  # as readline sets COLUMNS: os.environ never sees it
forkserver_context([])
start_forkserver()
with open(f"/proc/{forkserver._forkserver._forkserver_pid}/environ", "rb") as environ:
    print(sorted(item.split(b"=")[0].decode() for item in environ.read().split(b"\\0") if item))
print(os.environ["GRADER_TEST_TOKEN"], b"GRADER_TEST_C_TOKEN=c-level secret" in _c_environment(libc))
'''


@pytest.mark.slow  # a fresh Python that imports torch, in a subprocess
def test_the_forkserver_starts_with_only_the_explicit_environment():
    import subprocess

    run = subprocess.run([sys.executable, "-c", FORKSERVER_ENVIRONMENT], cwd=REPO, capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr
    seen, restored = run.stdout.splitlines()
    assert set(eval(seen)) <= {"PATH", "LANG", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "LC_ALL", "LD_LIBRARY_PATH",
                               "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS"}, seen
    assert restored == "python-level secret True"  # the grader's own environment is back as it was
