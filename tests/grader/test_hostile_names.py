"""Names from a submission (files and folders inside an archive, the archive's own name) reach
the TA's terminal, Gradescope's texts and the reports' notes on one line each, their control
characters escaped: a file named with newlines cannot add lines that pass for the grader's own
(a forged table or total), nor move the cursor, reorder the text (RTL override) or hide itself.

Each archive is graded for real (``2.3-speedup`` only: it needs two GPUs, so no child runs
and the test stays fast), then every view a person reads is checked line by line.
"""
from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from grader.grading import grade
from grader.layout import REPOSITORY
from grader.report import gradescope, summary
from grader.rubric import load_rubric
from grader.submission import load_submission

RUBRIC = load_rubric()
# A name that would forge the report's table and total, clear the screen, ring the bell,
# reverse what follows it and smuggle a carriage return; FORGED marks every line it could add.
HOSTILE = "hw\nFORGED Total                 90/90\r\nFORGED\x1b[2J\x07\u202eyp.\u2028FORGED\t"
FORGERY = "FORGED"
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
ONLY = ["2.3-speedup"]  # blocked on a machine without two GPUs: graded without a child
PIPELINE = b"import torch\n"


def _zip(path: Path, members: list[tuple[str, bytes, bool]]) -> Path:
    """A zip of ``(name, content, is_link)``."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, content, link in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 if link else 0o100644) << 16
            archive.writestr(info, content)
    return path


def _tar(path: Path, members: list[tuple[str, bytes, bool]]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, content, link in members:
            info = tarfile.TarInfo(name)
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            else:
                info.size = len(content)
            archive.addfile(info, io.BytesIO(b"" if link else content))
    return path


def _views(report) -> dict[str, str]:
    """Every text a person reads: the TA's summary, Gradescope's page and each test's text."""
    results = gradescope(report, RUBRIC, 1.0)
    return {"summary": summary(report, RUBRIC), "gradescope": results["output"],
            **{test["name"]: test["output"] for test in results["tests"]}}


def _assert_on_own_lines(views: dict[str, str]) -> None:
    """The hostile name never starts a line and never reaches a reader as a control character."""
    for where, text in views.items():
        assert not UNSAFE.search(text.replace("\n", "")), f"{where}: control characters in {text!r}"
        forged = [line for line in text.splitlines() if line.lstrip().startswith(FORGERY)]
        assert forged == [], f"{where}: lines of the submission's own: {forged}"


@pytest.mark.parametrize("pack", [_zip, _tar], ids=["zip", "tar.gz"])
def test_names_in_an_archive_stay_on_their_own_line_in_every_view(pack, tmp_path):
    """The student file inside a hostile folder (a note), an ignored file and a link with hostile
    names (notes): each note is one line of the summary, whatever the names hold."""
    archive = pack(tmp_path / "submission.zip", [
        (f"{HOSTILE}/pipeline.py", PIPELINE, False),
        (f"{HOSTILE}/conftest{HOSTILE}.py", b"", False),
        (f"{HOSTILE}/link{HOSTILE}", b"", True),
    ])
    submission = load_submission(archive)
    assert submission.problem is None and "pipeline.py" in submission.files
    report = grade(submission, RUBRIC, only=ONLY)
    assert any(FORGERY in note for note in report.notes)  # the names are there, escaped
    _assert_on_own_lines(_views(report))


@pytest.mark.parametrize("pack", [_zip, _tar], ids=["zip", "tar.gz"])
def test_a_name_in_the_reason_an_archive_is_refused_stays_on_one_line(pack, tmp_path):
    """A student file that is a link, in a hostile folder: the reason every criterion fails
    quotes the name, on one line (in the terminal, each criterion's Gradescope text)."""
    archive = pack(tmp_path / "submission.zip", [(f"{HOSTILE}/pipeline.py", b"", True)])
    submission = load_submission(archive)
    assert submission.problem is not None and FORGERY in submission.problem
    assert "\n" not in submission.problem
    report = grade(submission, RUBRIC, only=["2.1-schedule"])
    assert report.results[0].status == "failed" and FORGERY in report.results[0].message
    _assert_on_own_lines(_views(report))


def test_a_nul_in_an_archived_name_never_reaches_a_reader(tmp_path):
    """NUL cannot be in a file name on disk; in an archive the formats end the name there (zip
    and tar alike). What is left of it is shown like any other name."""
    archive = _tar(tmp_path / "submission.tar.gz", [
        ("hw/pipeline.py", PIPELINE, False), ("hw/conftest\x00FORGED\nFORGED.py", b"", False)])
    report = grade(load_submission(archive), RUBRIC, only=ONLY)
    assert all("\x00" not in note for note in report.notes)
    _assert_on_own_lines(_views(report))


def test_the_terminal_shows_a_hostile_archive_on_lines_of_the_graders_own(tmp_path):
    """``python -m grader grade`` on an archive refused for a hostile name, in a folder named
    with newlines (as a class's student folder may be): what reaches the TA's terminal (stdout
    and stderr) is the grader's own lines only."""
    folder = tmp_path / HOSTILE.replace("/", "-")
    folder.mkdir()
    archive = _zip(folder / "submission.zip", [(f"{HOSTILE}/pipeline.py", b"", True)])
    run = subprocess.run([sys.executable, "-m", "grader", "grade", str(archive), "--only", "2.1-schedule"],
                         cwd=REPOSITORY, capture_output=True, text=True, timeout=300)
    shown = run.stdout + run.stderr
    assert FORGERY in shown
    _assert_on_own_lines({"terminal": shown})
