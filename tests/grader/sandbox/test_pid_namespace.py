"""The in-house jail's PID namespace (grader/sandbox/pidns.py): a jailed child's code runs as
PID 2 below an init of the grader's, sees and signals only its own namespace's processes, and
what it leaves running is counted by that init and dies with it.

Each test grades a submission whose clock_cycles first does what it checks and raises what it
saw (the criterion's message carries it back)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from grading_helpers import answer_key_source, grade_folder, leftover_processes, write_submission


def _kernel_allows_pid_namespaces() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=60).returncode == 0


ROOT_ONLY = pytest.mark.skipif(not _kernel_allows_pid_namespaces(),
                               reason="the in-house jail needs root, and a PID namespace a kernel that allows it")


def _submission(folder, probe: str):
    source = answer_key_source().replace("    # BEGIN SOLUTION 2.1\n", "    # BEGIN SOLUTION 2.1\n" + probe, 1)
    return write_submission(folder, {"pipeline.py": source})


def _grade(folder, probe: str):
    report = grade_folder(_submission(folder, probe), only=["2.1-schedule"])
    assert "PID namespace" in report.environment["defences"]["processes_visible"], report.notes
    return report


@ROOT_ONLY
def test_the_childs_code_sees_and_signals_only_its_own_namespace(tmp_path):
    grader = os.getpid()
    report = _grade(tmp_path / "s", f'''
    import os as _os, signal as _signal
    def _signal_result(pid):
        try:
            _os.kill(pid, 0)
        except OSError as error:
            return type(error).__name__
        return "delivered"
    _visible = sorted(int(p) for p in _os.listdir("/proc") if p.isdigit())
    raise RuntimeError(f"pid={{_os.getpid()}} parent={{_os.getppid()}} visible={{_visible}} "
                       f"init={{_signal_result(1)}} grader={{_signal_result({grader})}}")
''')
    message = report.results[0].message
    seen = dict(re.findall(r"(\w+)=(\[[^\]]*\]|\w+)", message))
    assert (seen["pid"], seen["parent"]) == ("2", "1"), message  # below the grader's init, never PID 1 itself
    assert seen["visible"] == "[2]", message  # its own process only: init is root's (hidepid), the machine's are not in it
    assert seen["init"] == "PermissionError", message  # init ignores it: another user's
    assert seen["grader"] == "ProcessLookupError", message  # the grader is not in the namespace at all


@ROOT_ONLY
def test_processes_left_running_are_counted_by_init_and_die_with_the_namespace(tmp_path):
    """Three grandchildren that leave the process group (setsid) and sleep: the criterion
    keeps its point, the report says three were left running, and none survives it."""
    report = _grade(tmp_path / "s", '''
    import os as _os, time as _time
    if not getattr(clock_cycles, "_left", False):
        clock_cycles._left = True
        for _ in range(3):
            if _os.fork() == 0:
                _os.setsid()
                _time.sleep(1000)
                _os._exit(0)
''')
    assert report.results[0].status == "passed", report.results[0].message
    assert any("2.1-schedule: your code left 3 processes running" in note for note in report.notes), report.notes
    assert leftover_processes(report.environment["children_uid"]) == []


@ROOT_ONLY
def test_a_timeout_kills_the_whole_namespace_and_counts_nothing_twice(tmp_path):
    """A criterion that hangs after leaving a sleeper outside its process group: the timeout
    kills the child, its init and so the namespace; no process of the children's uid is left,
    and the init, re-parented to the grader, is not counted as left running."""
    submission = _submission(tmp_path / "s", '''
    import os as _os, time as _time
    if _os.fork() == 0:
        _os.setsid()
        _time.sleep(1000)
    _time.sleep(1000)
''')
    report = grade_folder(submission, only=["2.1-schedule"], timeout=3)
    assert report.results[0].status == "timeout", report.results[0].message
    assert not any("left" in note for note in report.notes), report.notes
    assert leftover_processes(report.environment["children_uid"]) == []
