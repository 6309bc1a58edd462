"""Graders sharing one machine never touch each other.

Each grader process leases a uid of its own for its children (grader.sandbox.uids.lease_uid):
no account owns it, no other grader holds it, and it ran nothing when it was leased, so the
grader may count and kill everything that uid runs. The last test runs two real graders at
once, one of them on a submission that kills every process it is allowed to.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grading_helpers import REPO, answer_key_source, write_submission

from grader.processes import processes_of
from grader.sandbox import uids
from grader.sandbox.uids import SlotError, has_account, lease_uid, return_uid

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="children run as a leased uid only when the grader runs as root")
TEST_UIDS = 50_000  # the tests lease below this uid, far from the real graders' (below nobody's)


def free_uids(below: int, count: int = 8) -> list[int]:
    return [uid for uid in range(below - 1, below - 1 - count, -1) if not has_account(uid)]


@ROOT_ONLY
def test_leases_are_distinct_and_a_returned_one_is_reused():
    first, second = lease_uid(TEST_UIDS, count=8), lease_uid(TEST_UIDS, count=8)
    try:
        assert first != second
        assert {first, second} <= set(free_uids(TEST_UIDS))
        return_uid(first)
        assert lease_uid(TEST_UIDS, count=8) == first  # still this process's: its next harness reuses it
    finally:
        return_uid(first)
        return_uid(second)


@ROOT_ONLY
def test_a_uid_another_grader_holds_is_skipped():
    below = TEST_UIDS - 100
    script = "import sys, time\nfrom grader.sandbox.uids import lease_uid\nprint(lease_uid(int(sys.argv[1]), count=8), flush=True)\ntime.sleep(60)"
    other = subprocess.Popen([sys.executable, "-c", script, str(below)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        theirs = int(other.stdout.readline())
        mine = lease_uid(below, count=8)
        assert mine != theirs and theirs == free_uids(below)[0]
        return_uid(mine)
    finally:
        other.kill()
        other.wait()


@ROOT_ONLY
def test_a_uid_that_runs_a_process_is_skipped():
    below = TEST_UIDS - 200
    busy = free_uids(below)[0]
    sleeper = subprocess.Popen(["sleep", "60"], user=busy)
    try:
        assert processes_of(busy)
        mine = lease_uid(below, count=8)
        assert mine != busy
        return_uid(mine)
    finally:
        sleeper.kill()
        sleeper.wait()


@ROOT_ONLY
def test_no_free_uid_is_a_clear_error():
    if not has_account(1):
        pytest.skip("uid 1 has no account here")
    with pytest.raises(SlotError, match="no free uid for the children among the 1 uids below 2"):
        lease_uid(2, count=1)


def test_a_slot_folder_others_may_write_is_refused(tmp_path, monkeypatch):
    (tmp_path / uids.SLOT_FOLDER_NAME).mkdir()
    os.chmod(tmp_path / uids.SLOT_FOLDER_NAME, 0o777)
    monkeypatch.setattr(uids, "SLOT_PARENTS", (str(tmp_path),))
    with pytest.raises(SlotError, match="owned by root and writable by root only"):
        uids.slot_folder()


# ---------------------------------------------------------------------------------------
# Two graders at once
# ---------------------------------------------------------------------------------------
KILLER = '''
import ctypes as _ctypes, os as _os, time as _time
_ctypes.CDLL(None).prctl(15, b"@NAME@", 0, 0, 0)  # PR_SET_NAME: the test finds this process by name
while True:
    try:
        _os.kill(-1, 9)  # every process this uid may signal
    except OSError:
        pass
    _time.sleep(0.01)
'''
WAIT_FOR_KILLER_S, KEY_S, INTERRUPT_S = 90, 150, 30  # together under the test's own timeout


def named(name: str) -> list[int]:
    """Pids of live processes whose name is ``name``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if Path(f"/proc/{entry.name}/comm").read_text().strip() == name:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def uid_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}").st_uid


@ROOT_ONLY
@pytest.mark.slow
@pytest.mark.multirank
@pytest.mark.timeout(WAIT_FOR_KILLER_S + KEY_S + INTERRUPT_S + 30)
def test_answer_key_keeps_full_marks_beside_a_submission_that_kills_everything(tmp_path):
    name = f"kill{os.getpid() % 100000}"
    killer = write_submission(tmp_path / "killer", {"pipeline.py": answer_key_source().replace(
        "from __future__ import annotations\n", "from __future__ import annotations\n" + KILLER.replace("@NAME@", name), 1)})
    command = [sys.executable, "-m", "grader", "grade"]
    with open(tmp_path / "hostile.log", "w") as log:
        hostile = subprocess.Popen([*command, str(killer), "--only", "2.1-schedule", "--timeout", "600"],
                                   cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_FOR_KILLER_S
        while not named(name):
            assert hostile.poll() is None, (tmp_path / "hostile.log").read_text()
            assert time.monotonic() < deadline, "the hostile submission never started"
            time.sleep(0.2)
        killer_uid = uid_of(named(name)[0])
        key = subprocess.run([*command, "minitorch", "--only", "2.2", "3.1", "3.2", "--require-full",
                              "--json", str(tmp_path / "key.json")], cwd=REPO, capture_output=True, text=True, timeout=KEY_S)
        assert named(name), "the killer stopped before the answer key was graded: the two did not overlap"
    finally:
        os.killpg(hostile.pid, signal.SIGINT)  # Ctrl-C: the grader kills what its children run
        hostile.wait(INTERRUPT_S)
    assert key.returncode == 0, key.stdout + key.stderr
    report = json.loads((tmp_path / "key.json").read_text())
    assert report["score"] == report["max_score"] > 0 and report["complete"]
    assert report["environment"]["children_uid"] not in (killer_uid, 0)
    deadline = time.monotonic() + 10
    while named(name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not named(name), "the killer outlived its grader"


@ROOT_ONLY
def test_a_foreign_process_on_the_leased_uid_is_neither_counted_nor_killed(tmp_path, monkeypatch):
    """Another program runs as the uid (a grader of an older version): the grader kills and
    counts only what its own children left, never the stranger."""
    from grading_helpers import grade_folder

    from grader import sandbox

    uid = lease_uid(TEST_UIDS - 300, count=8)
    stranger = subprocess.run(["sh", "-c", "sleep 60 > /dev/null 2>&1 & echo $!"], user=uid, capture_output=True,
                              text=True, timeout=30, start_new_session=True)
    stranger_pid = int(stranger.stdout)  # re-parented away from this process: not one of the grader's
    monkeypatch.setattr(sandbox, "lease_uid", lambda below: uid)
    sleeper = answer_key_source().replace("        microbatches = list(torch.split(x, self.split_size))", """        import os, time
        if not getattr(Pipe, "_daemon", False):
            Pipe._daemon = True
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(100000)
                os._exit(0)
        microbatches = list(torch.split(x, self.split_size))""")
    try:
        report = grade_folder(write_submission(tmp_path / "sleeper", {"pipeline.py": sleeper}), only=["2.2-forward"])
        assert report.environment["children_uid"] == uid
        assert report.results[0].status == "passed", report.results[0].message
        assert any("2.2-forward: your code left 1 process running" in note for note in report.notes), report.notes
        os.kill(stranger_pid, 0)  # still alive
        assert [int(p["Pid"]) for p in processes_of(uid)] == [stranger_pid]
    finally:
        os.kill(stranger_pid, signal.SIGKILL)
        return_uid(uid)


HOSTILE_NEIGHBOUR = '''
import ctypes as _ctypes, os as _os, tempfile as _tempfile, time as _time
_libc = _ctypes.CDLL(None, use_errno=True)
_libc.shmget(@KEY@, 1 << 20, 0o1000 | 0o666)  # System V shared memory any user could attach
for _place in (_tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):  # fill every scratch it can reach
    try:  # files of 8 MB, under the grader's file-size limit, until the folder is full
        for _index in range(1 << 10):
            with open(_os.path.join(_place, f"filler-@NAME@-{_index}"), "wb") as _filler:
                for _ in range(8):
                    _filler.write(b"x" * (1 << 20))
    except OSError:
        pass
for _place in ("/run/lock", "/var/lock"):
    try:
        open(_os.path.join(_place, "left-@NAME@"), "w").close()
    except OSError:
        pass
_libc.prctl(15, b"@NAME@", 0, 0, 0)  # PR_SET_NAME: the test finds this process by name
while True:
    _time.sleep(0.1)
'''


@ROOT_ONLY
@pytest.mark.slow
@pytest.mark.multirank
@pytest.mark.timeout(WAIT_FOR_KILLER_S + KEY_S + INTERRUPT_S + 30)
def test_answer_key_keeps_full_marks_beside_a_submission_that_fills_and_litters_the_machine(tmp_path):
    """Issue 22: a neighbour that fills TMPDIR, /tmp and /dev/shm, leaves System V shared memory
    and files in world-writable folders harms only itself, and leaves nothing behind."""
    name, key = f"fill{os.getpid() % 100000}", 0x5EEE0000 + os.getpid() % 0xFFFF
    hostile_source = HOSTILE_NEIGHBOUR.replace("@NAME@", name).replace("@KEY@", str(key))
    hostile_folder = write_submission(tmp_path / "hostile", {"pipeline.py": answer_key_source().replace(
        "from __future__ import annotations\n", "from __future__ import annotations\n" + hostile_source, 1)})
    command = [sys.executable, "-m", "grader", "grade"]
    with open(tmp_path / "hostile.log", "w") as log:
        hostile = subprocess.Popen([*command, str(hostile_folder), "--only", "2.1-schedule", "--timeout", "600"],
                                   cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_FOR_KILLER_S
        while not named(name):  # it has filled and littered what it could
            assert hostile.poll() is None, (tmp_path / "hostile.log").read_text()
            assert time.monotonic() < deadline, "the hostile submission never started"
            time.sleep(0.2)
        key_run = subprocess.run([*command, "minitorch", "--only", "2.2-forward", "3.1-f-g", "--require-full",
                                  "--json", str(tmp_path / "key.json")], cwd=REPO, capture_output=True, text=True,
                                 timeout=KEY_S)
        assert named(name), "the hostile child stopped before the answer key was graded: the two did not overlap"
    finally:
        os.killpg(hostile.pid, signal.SIGINT)
        hostile.wait(INTERRUPT_S)
    assert key_run.returncode == 0, key_run.stdout + key_run.stderr
    report = json.loads((tmp_path / "key.json").read_text())
    assert report["score"] == report["max_score"] > 0 and report["complete"]
    left = [p for p in (f"/run/lock/left-{name}", f"/var/lock/left-{name}", f"/tmp/filler-{name}-0",
                        f"/var/tmp/filler-{name}-0", f"/dev/shm/filler-{name}-0") if os.path.lexists(p)]
    assert left == []
    shared = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    assert key not in {int(line.split()[0]) for line in shared if line.split()}
