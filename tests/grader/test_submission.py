"""Reading submissions: folders, zips and tar archives (nested folder, Windows paths, traversal,
corrupt, ambiguous, bombs), links and devices."""
from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from grading_helpers import answer_key_source, grade_folder, write_submission

from grader import submission as submission_module
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
    assert "cannot read the archive s.zip" in submission.problem


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


def test_a_missing_student_file_fails_its_problems_without_running_them(tmp_path):
    folder = write_submission(tmp_path / "only-pipeline", {"pipeline.py": answer_key_source("pipeline.py")})
    report = grade_folder(folder, only=["2.1", "3"])
    by_problem = {r.id: r for r in report.results}
    assert by_problem["2.1-schedule"].status == "passed"
    for result in report.results:
        if result.problem.startswith("3."):
            assert result.status == "failed"
            assert result.message == "missing tensor_parallel.py (not in the submission)"
            assert result.seconds < 0.5, "a missing file must not start the criterion's child"


def make_tar(path: Path, entries: dict[str, bytes], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("suffix, mode", [(".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar", "w")])
def test_tar_archives_are_read_in_memory(tmp_path, suffix, mode):
    path = make_tar(tmp_path / f"s{suffix}", {"hw5/minitorch/pipeline.py": b"A = 1\n", "hw5/conftest.py": b"x"}, mode)
    submission = load_submission(path)
    assert submission.files == {"pipeline.py": b"A = 1\n"} and submission.problem is None
    assert submission.ignored == ["hw5/conftest.py"] and not list(tmp_path.glob("hw5"))


def test_a_tar_bomb_is_stopped_while_unpacking(tmp_path, monkeypatch):
    monkeypatch.setattr(submission_module, "MAX_UNPACKED_BYTES", 1_000_000)
    path = make_tar(tmp_path / "bomb.tar.gz", {"zeros.bin": bytes(5_000_000), "pipeline.py": b"A = 1\n"})
    assert path.stat().st_size < 50_000  # small to upload, large to unpack
    submission = load_submission(path)
    assert submission.files == {} and "unpacks to more than 1000000 bytes" in submission.problem


def test_too_many_entries_and_devices_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(submission_module, "MAX_ARCHIVE_ENTRIES", 10)
    many = make_tar(tmp_path / "many.tgz", {f"f{i}.txt": b"" for i in range(11)})
    assert "more than 10 entries" in load_submission(many).problem
    with tarfile.open(tmp_path / "device.tar.gz", "w:gz") as archive:
        device = tarfile.TarInfo("pipeline.py")
        device.type = tarfile.CHRTYPE
        archive.addfile(device)
    assert "pipeline.py in the archive is a device or pipe, not a file" in load_submission(tmp_path / "device.tar.gz").problem


def test_not_really_a_tgz(tmp_path):
    (tmp_path / "s.tgz").write_bytes(b"PK\x03\x04 a zip renamed")
    assert "cannot read the archive s.tgz" in load_submission(tmp_path / "s.tgz").problem


def test_windows_paths_count_as_folders_when_choosing(tmp_path):
    both = make_zip(tmp_path / "s.zip", {"a\\pipeline.py": "A", "b\\pipeline.py": "B"})
    assert "several pipeline.py" in load_submission(both).problem
    shallow = make_zip(tmp_path / "t.zip", {"a\\b\\pipeline.py": "deep", "c\\pipeline.py": "shallow"})
    assert load_submission(shallow).files == {"pipeline.py": b"shallow"}


@pytest.mark.parametrize("mode, name", [("w:gz", "hw.tar"), ("w:bz2", "hw.tar"), ("w:xz", "hw.tgz"), ("w", "hw.tar.gz"),
                                        ("w:gz", "hw.zip"), ("w:gz", "hw-download")])
def test_an_archive_is_recognised_by_its_content_not_its_name(tmp_path, mode, name):
    """A browser or a student renames files: a gzip-compressed tar named .tar is still read."""
    path = tmp_path / name
    data = b"A = 1\n"
    with tarfile.open(path, mode) as archive:
        info = tarfile.TarInfo("hw/minitorch/pipeline.py")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    submission = load_submission(path)
    assert submission.problem is None and submission.files == {"pipeline.py": data}


def test_a_zip_named_tar_is_read_as_a_zip(tmp_path):
    path = make_zip(tmp_path / "hw.tar", {"pipeline.py": "A = 1\n"})
    assert load_submission(path).files == {"pipeline.py": b"A = 1\n"}


def test_a_file_named_like_an_archive_that_is_none_says_so(tmp_path):
    path = tmp_path / "hw.tar.gz"
    path.write_bytes(b"this is not an archive at all\n" * 30)
    assert "not a zip or tar archive" in load_submission(path).problem
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(SubmissionNotFound):
        load_submission(other)
