"""Classes of hostile submissions that can harm someone else than themselves: the TA at the
terminal the grader runs in, and a later submission whose children get the same leased uid.
Each test runs the victim beside (or after) the hostile submission and checks the victim is
unharmed; the catalogue entries of the same names check the hostile side."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest
from grading_helpers import REPO, answer_key_source, grade_folder, write_submission

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="children run as a leased uid only when the grader runs as root")


def _with_prologue(prologue: str) -> str:
    """The answer key's pipeline.py with ``prologue`` run first in clock_cycles."""
    return answer_key_source().replace("    # BEGIN SOLUTION 2.1\n", "    # BEGIN SOLUTION 2.1\n" + prologue, 1)


READS_THE_TERMINAL = '''
    import os as _os
    _typed = []
    for _path in ["/proc/self/fd/0", *(f"/proc/{_os.getppid()}/fd/{fd}" for fd in (0, 1, 2))]:
        try:  # its own standard input, then its parent's (the forkserver's) standard streams
            _fd = _os.open(_path, _os.O_RDWR | _os.O_NONBLOCK)
        except OSError:
            continue
        try:
            _typed.append(_os.read(_fd, 4096))
            _os.write(_fd, b"\\x1b[2J\\x1b[HTotal 100/100\\n")  # what it could draw on a TA's screen
        except OSError:
            pass
        _os.close(_fd)
    if any(_typed):
        raise RuntimeError(f"read what the TA typed: {_typed!r}")
'''


@pytest.mark.slow  # a grader of its own, in a subprocess (torch imported afresh)
def test_a_child_cannot_read_what_the_ta_types(tmp_path):
    """The grader's standard input (a TA's terminal; here a pipe the test types into) never
    reaches a child: its standard input is /dev/null."""
    secret = f"password-{secrets.token_hex(4)}"
    folder = write_submission(tmp_path / "reader", {"pipeline.py": _with_prologue(READS_THE_TERMINAL)})
    grader = subprocess.Popen([sys.executable, "-m", "grader", "grade", str(folder), "--only", "2.1-schedule",
                               "--json", str(tmp_path / "report.json")], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert grader.stdin is not None
    grader.stdin.write(secret + "\n")  # typed ahead, while the grader starts: it waits in the pipe
    grader.stdin.flush()
    output, _ = grader.communicate(timeout=300)
    report = json.loads((tmp_path / "report.json").read_text())
    (result,) = report["criteria"]
    assert result["status"] == "passed", result["message"]
    assert secret not in output + json.dumps(report)
    assert "/dev/null" in report["environment"]["defences"]["descriptors"]


STORES_A_KEY = '''
    import ctypes as _ctypes, platform as _platform
    _libc = _ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = _ctypes.c_long
    _add_key = {"x86_64": 248, "aarch64": 217}[_platform.machine()]
    _libc.syscall(_add_key, b"user", b"@NAME@", b"secret", 6, _ctypes.c_long(-4))  # into @u, if it may
'''
FINDS_THE_KEY = '''
    import ctypes as _ctypes, platform as _platform
    _libc = _ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = _ctypes.c_long
    _keyctl = {"x86_64": 250, "aarch64": 219}[_platform.machine()]
    _found = _libc.syscall(_keyctl, 10, _ctypes.c_long(-4), b"user", b"@NAME@", 0)  # KEYCTL_SEARCH @u
    if _found >= 0:
        raise RuntimeError(f"found key {_found}, left by an earlier submission")
'''


@ROOT_ONLY
def test_a_key_left_in_the_uids_keyring_never_reaches_the_next_submission(tmp_path):
    """Two submissions graded one after the other by one grader process get the same leased
    uid; the first tries to leave a key in that uid's keyring, the second looks for it."""
    name = f"grader-test-{secrets.token_hex(4)}"
    hostile = write_submission(tmp_path / "hostile", {"pipeline.py": _with_prologue(STORES_A_KEY.replace("@NAME@", name))})
    victim = write_submission(tmp_path / "victim", {"pipeline.py": _with_prologue(FINDS_THE_KEY.replace("@NAME@", name))})
    first = grade_folder(hostile, only=["2.1-schedule"])
    second = grade_folder(victim, only=["2.1-schedule"])
    assert first.environment["children_uid"] == second.environment["children_uid"] != 0  # the same uid, leased again
    assert second.results[0].status == "passed", second.results[0].message
    assert "refused" in second.environment["defences"]["keyrings"]
