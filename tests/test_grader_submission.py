"""Reading submissions: folders, zips (nested folder, traversal, corrupt, ambiguous), links."""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from grader.submission import SubmissionNotFound, load_submission


def make_zip(path: Path, entries: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in entries.items():
            archive.writestr(name, text)
    return path


def test_folder_and_minitorch_subfolder(tmp_path):
    (tmp_path / "minitorch").mkdir()
    (tmp_path / "pipeline.py").write_text("A = 1\n")
    (tmp_path / "minitorch" / "tensor_parallel.py").write_text("B = 2\n")
    (tmp_path / "conftest.py").write_text("raise SystemExit\n")
    submission = load_submission(tmp_path)
    assert submission.files == {"pipeline.py": b"A = 1\n", "tensor_parallel.py": b"B = 2\n"}
    assert submission.problem is None and submission.missing() == []


def test_zip_with_one_top_folder(tmp_path):
    path = make_zip(tmp_path / "s.zip", {"hw5/minitorch/pipeline.py": "A = 1\n", "hw5/sitecustomize.py": "x"})
    submission = load_submission(path)
    assert submission.files == {"pipeline.py": b"A = 1\n"} and submission.problem is None


@pytest.mark.parametrize(
    "entries, reason",
    [
        ({"../../etc/pipeline.py": "A"}, "unsafe path"),
        ({"/abs/pipeline.py": "A"}, "unsafe path"),
        ({"a/pipeline.py": "A", "b/pipeline.py": "B"}, "several pipeline.py"),
    ],
)
def test_bad_zips_give_a_reason(tmp_path, entries, reason):
    submission = load_submission(make_zip(tmp_path / "s.zip", entries))
    assert submission.files == {} and reason in submission.problem


def test_corrupt_zip(tmp_path):
    (tmp_path / "s.zip").write_bytes(b"PK\x03\x04 not really a zip")
    submission = load_submission(tmp_path / "s.zip")
    assert "cannot read the zip" in submission.problem


def test_symlink_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("answers")
    (tmp_path / "sub").mkdir()
    os.symlink(secret, tmp_path / "sub" / "pipeline.py")
    submission = load_submission(tmp_path / "sub")
    assert "not a regular file" in submission.problem and submission.files == {}


def test_missing_path(tmp_path):
    with pytest.raises(SubmissionNotFound, match="no such file"):
        load_submission(tmp_path / "nope")
