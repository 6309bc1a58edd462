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
    from grader.sandbox import plan

    venv = REPO / ".venv-example"
    site = venv / "lib" / "site-packages"
    monkeypatch.setattr(plan, "_python_folders", lambda: [REPO, REPO / "tests", site, Path("/usr/lib/python3")])
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "exec_prefix", str(venv))
    assert plan.hiding_plan(tmp_path) == ((str(REPO.resolve()), (str(site),)),)
    assert plan.hiding_plan(REPO / "scratch") == ()  # the children's tree would be hidden too


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


def test_a_check_modules_own_preload_reaches_the_forkserver_only():
    """Problem 4's children import torch's symbolic-shape machinery (sympy, seconds) on their first
    checkpointed backward: the forkserver preloads it for them; a check module without it adds nothing."""
    from multiprocessing import forkserver

    import grader.checks.problem2.clock_cycles.observe  # noqa: F401 - forkserver_context reads the imported modules
    import grader.checks.problem4.recompute.observe  # noqa: F401
    from grader.harness import forkserver_context

    try:
        forkserver_context(["grader.checks.problem4.recompute.observe"])
        assert forkserver._forkserver._preload_modules == ["torch", "grader.child", "torch.fx.experimental.symbolic_shapes"]
        forkserver_context(["grader.checks.problem2.clock_cycles.observe"])  # the check module itself is not preloaded
        assert forkserver._forkserver._preload_modules == ["torch", "grader.child"]
    finally:
        forkserver_context([])


ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the jail and its namespaces need the grader to run as root")
SYSTEM_V = '''
import ctypes as _ctypes
_libc = _ctypes.CDLL(None, use_errno=True)
_libc.shmget(@KEY@, 4096, 0o1000 | 0o666)  # IPC_CREAT, readable and writable by every user
_libc.msgget(@KEY@, 0o1000 | 0o666)
_libc.semget(@KEY@, 1, 0o1000 | 0o666)
'''


def _system_v_keys() -> set[int]:
    keys = set()
    for kind in ("shm", "msg", "sem"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        keys |= {int(line.split()[0]) for line in lines if line.split()}
    return keys


@ROOT_ONLY
def test_system_v_objects_made_by_a_child_vanish_with_it(tmp_path):
    key = 0x5EED0000 + os.getpid() % 0xFFFF
    source = answer_key_source().replace("from __future__ import annotations\n",
                                         "from __future__ import annotations\n" + SYSTEM_V.replace("@KEY@", str(key)), 1)
    report = grade_folder(write_submission(tmp_path / "ipc", {"pipeline.py": source}), only=["2.1-schedule"])
    assert report.results[0].status == "passed", report.results[0].message
    assert "namespace" in report.environment["defences"]["ipc"]
    assert key not in _system_v_keys()


def test_a_scratch_tree_deeper_than_the_recursion_limit_and_the_longest_path_is_removed():
    import tempfile

    from grader.processes import remove_tree

    base = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    folder = os.open(base, os.O_RDONLY)
    for depth in range(sys.getrecursionlimit() + 100):  # names of 10 characters: far past PATH_MAX
        os.mkdir("d" * 10, dir_fd=folder)
        inner = os.open("d" * 10, os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
        if depth % 300 == 0:
            os.close(os.open("file", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=folder))
    os.close(folder)
    remove_tree(base)
    assert not os.path.exists(base)


# --- a signal the grader did not send ------------------------------------------------------
SLOW_START = '''
import ctypes as _ctypes, time as _time
_ctypes.CDLL(None).prctl(15, b"@NAME@", 0, 0, 0)  # PR_SET_NAME: the test finds this process by name
_time.sleep(1.5)
'''


def _named(name: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if Path(f"/proc/{entry.name}/comm").read_text().strip() == name:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("kills", [1, 2])
def test_a_child_killed_from_outside_runs_again_and_a_second_kill_asks_for_review(tmp_path, kills):
    import signal
    import threading
    import time

    name = f"victim{os.getpid() % 10000}{kills}"
    source = answer_key_source().replace("from __future__ import annotations\n", "from __future__ import annotations\n"
                                         + SLOW_START.replace("@NAME@", name), 1)
    killed: list[int] = []
    done = threading.Event()

    def killer():  # the OOM killer or an administrator: kills the criterion's child, `kills` times
        while not done.is_set() and len(killed) < kills:
            for pid in _named(name):
                if pid not in killed:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        report = grade_folder(write_submission(tmp_path / "victim", {"pipeline.py": source}), only=["2.1-schedule"])
    finally:
        done.set()
        thread.join(10)
    (result,) = report.results
    assert len(killed) == kills
    if kills == 1:
        assert result.status == "passed", result.message
        assert any("killed by SIGKILL" in note and "run again" in note for note in report.notes), report.notes
        assert not any("SIGKILL" in reason for reason in report.review), report.review  # (the scan flags ctypes)
    else:
        assert result.status == "failed" and "SIGKILL, a signal the grader did not send" in result.message
        assert "out of memory" not in result.message or "out-of-memory killer ran" in result.message
        assert report.needs_review and any("SIGKILL" in reason for reason in report.review), report.review
