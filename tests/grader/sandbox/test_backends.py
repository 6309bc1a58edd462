"""Each backend runs a criterion for real, and says so in the report: the in-house jail (root),
bubblewrap (forced here as root; chosen by default where the grader is not root), and the
fallback of a grader that is neither root nor allowed namespaces (run as a user of no account
through setpriv)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from grading_helpers import REPO, answer_key_source, grade_folder, write_submission

from grader.rubric import load_rubric

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="setting up another user's grader needs root")
HAS_BWRAP = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
UNPRIVILEGED_UID = 50_900  # no account: a TA's own user, as far as the grader can tell
# A submission whose clock_cycles first checks what every backend guarantees, with or without root.
PROBES = '''
    import ctypes as _ctypes, os as _os, platform as _platform, stat as _stat
    _held = [fd for fd in _os.listdir("/proc/self/fd") if fd.isdigit() and _os.path.exists(f"/proc/self/fd/{fd}")
             and (_stat.S_ISFIFO(_os.stat(f"/proc/self/fd/{fd}").st_mode) or _os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"))]
    if _held or _os.readlink("/proc/self/fd/0") != "/dev/null":
        raise RuntimeError(f"inherited descriptors {_held}, standard input {_os.readlink('/proc/self/fd/0')}")
    _libc = _ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = _ctypes.c_long
    if _libc.syscall({"x86_64": 248, "aarch64": 217}[_platform.machine()], b"user", b"k", b"v", 1, _ctypes.c_long(-2)) >= 0:
        raise RuntimeError("stored a key")
'''


def probing_submission(folder: Path) -> Path:
    source = answer_key_source().replace("    # BEGIN SOLUTION 2.1\n", "    # BEGIN SOLUTION 2.1\n" + PROBES, 1)
    return write_submission(folder, {"pipeline.py": source})


@ROOT_ONLY
@HAS_BWRAP
@pytest.mark.slow  # a fresh Python per child
def test_the_bubblewrap_backend_grades_and_is_named_in_the_report(tmp_path):
    import dataclasses

    rubric = load_rubric()
    rubric = dataclasses.replace(rubric, settings=dataclasses.replace(rubric.settings, sandbox="bubblewrap"))
    report = grade_folder(probing_submission(tmp_path / "s"), only=["2.1-schedule", "2.1-errors"], rubric=rubric)
    assert [r.status for r in report.results] == ["passed", "passed"], [r.message for r in report.results]
    defences = report.environment["defences"]
    assert defences["backend"].startswith("bubblewrap") and "PID namespace" in defences["processes_visible"]
    assert report.environment["children_uid"] not in (0, os.geteuid())  # the leased uid, dropped to inside bwrap


@ROOT_ONLY
def test_the_in_house_backend_is_named_in_the_report(tmp_path):
    report = grade_folder(probing_submission(tmp_path / "s"), only=["2.1-schedule"])
    assert report.results[0].status == "passed", report.results[0].message
    assert report.environment["defences"]["backend"].startswith("in-house")
    assert "jail" in report.environment["defences"]["files"]


@pytest.fixture
def out():
    """A folder the unprivileged grader can reach (pytest's own is closed to other users)."""
    folder = Path(tempfile.mkdtemp(prefix="grader-unprivileged-"))
    os.chmod(folder, 0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _grade_as_unprivileged_user(out: Path, sandbox: str) -> dict:
    """Grade as a uid of no account, in a mount namespace where only /root is changed: an
    open tmpfs over it with Python's folder (/root/.pyenv here) bound back, since /root is
    closed to other users. The grader itself is this repository's, as TAs run it."""
    rubric = (REPO / "grader" / "rubric.toml").read_text().replace('sandbox = "auto"', f'sandbox = "{sandbox}"')
    (out / "rubric.toml").write_text(rubric)
    submission = probing_submission(out / "submission")
    for path in [out, *out.rglob("*")]:
        os.chmod(path, 0o777 if path.is_dir() else 0o644)
    closed = [p for p in {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)} if p.startswith("/root/")]
    binds = "".join(f'mkdir -p "{out}/keep{i}" && mount --bind "{p}" "{out}/keep{i}" && ' for i, p in enumerate(closed))
    back = "".join(f'mkdir -p "{p}" && mount --bind "{out}/keep{i}" "{p}" && ' for i, p in enumerate(closed))
    cover = "mount -t tmpfs -o mode=0755 tmpfs /root && " if closed else ""
    grade = (f'exec setpriv --reuid={UNPRIVILEGED_UID} --regid={UNPRIVILEGED_UID} --clear-groups env HOME="{out}" '
             f'"{sys.executable}" -m grader grade "{submission}" --only 2.1-schedule --rubric "{out}/rubric.toml" '
             f'--json "{out}/report.json"')
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", binds + cover + back + grade],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert (out / "report.json").exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads((out / "report.json").read_text())


@ROOT_ONLY
@pytest.mark.slow  # a grader of its own, in a subprocess
def test_without_root_and_without_namespaces_the_in_house_fallback_still_grades(out):
    report = _grade_as_unprivileged_user(out, "in-house")
    (result,) = report["criteria"]
    assert result["status"] == "passed", result["message"]
    defences = report["environment"]["defences"]
    assert report["environment"]["children_uid"] == UNPRIVILEGED_UID
    assert defences["backend"].startswith("in-house") and defences["children_user"].startswith("the grader's own user")
    assert "readable" in defences["files"] and "refused" in defences["keyrings"]


@ROOT_ONLY
@HAS_BWRAP
@pytest.mark.slow  # a grader of its own, in a subprocess
def test_without_root_bubblewrap_jails_the_children(out):
    report = _grade_as_unprivileged_user(out, "auto")
    (result,) = report["criteria"]
    assert result["status"] == "passed", result["message"]
    defences = report["environment"]["defences"]
    assert defences["backend"].startswith("bubblewrap"), report["notes"]
    assert "jail" in defences["files"] and "PID namespace" in defences["processes_visible"]
