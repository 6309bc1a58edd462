"""A browser's rename of exactly one student file is graded as that file, with a note; only
what is ambiguous is refused (issue 23, item 3). Folders, archives, single files, Gradescope
uploads and Canvas downloads alike."""
import io
import tarfile
import zipfile

import pytest

from course import discovery
from grader import gradescope_run
from grader.submission import load_submission, renamed_student_file

PIPELINE, TENSOR = b"# pipeline\n", b"# tensor parallel\n"


@pytest.mark.parametrize("name, original", [
    ("pipeline (1).py", "pipeline.py"), ("pipeline (12).py", "pipeline.py"), ("pipeline-2.py", "pipeline.py"),
    ("Copy of pipeline.py", "pipeline.py"), ("copy of tensor_parallel (3).py", "tensor_parallel.py"),
    ("tensor_parallel-1.py", "tensor_parallel.py"),
    ("pipeline.py", None), ("pipeline_v2.py", None), ("my pipeline.py", None), ("pipeline (1).txt", None),
    ("pipeline (x).py", None), ("runtime (1).py", None), ("Copy of Copy of pipeline.py", None),
])
def test_which_names_are_renames(name, original):
    assert renamed_student_file(name) == original


def test_a_renamed_file_in_a_folder_is_graded_with_a_note(tmp_path):
    (tmp_path / "pipeline (1).py").write_bytes(PIPELINE)
    (tmp_path / "tensor_parallel.py").write_bytes(TENSOR)
    submission = load_submission(tmp_path)
    assert submission.files == {"pipeline.py": PIPELINE, "tensor_parallel.py": TENSOR} and submission.problem is None
    assert any("pipeline (1).py" in note and "rename" in note for note in submission.notes)
    assert "pipeline (1).py" not in submission.ignored


def test_the_file_itself_wins_and_several_copies_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "pipeline.py").write_bytes(PIPELINE)
    (tmp_path / "a" / "pipeline (1).py").write_bytes(b"older")
    assert load_submission(tmp_path / "a").files == {"pipeline.py": PIPELINE}
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "pipeline (1).py").write_bytes(b"one")
    (tmp_path / "b" / "pipeline (2).py").write_bytes(b"two")
    (tmp_path / "b" / "tensor_parallel.py").write_bytes(TENSOR)
    submission = load_submission(tmp_path / "b")
    assert submission.files == {"tensor_parallel.py": TENSOR}  # which one was meant? neither, said why
    assert any("several renamed copies" in note and "pipeline (2).py" in note for note in submission.notes)


def test_renamed_files_in_archives_and_alone(tmp_path):
    with zipfile.ZipFile(tmp_path / "hw.zip", "w") as archive:
        archive.writestr("hw5/pipeline (1).py", PIPELINE)
        archive.writestr("hw5/Copy of tensor_parallel.py", TENSOR)
    assert load_submission(tmp_path / "hw.zip").files == {"pipeline.py": PIPELINE, "tensor_parallel.py": TENSOR}
    with tarfile.open(tmp_path / "hw.tar.gz", "w:gz") as archive:
        for name, data in (("pipeline-1.py", PIPELINE), ("tensor_parallel (2).py", TENSOR)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    submission = load_submission(tmp_path / "hw.tar.gz")
    assert submission.files == {"pipeline.py": PIPELINE, "tensor_parallel.py": TENSOR}
    assert any("hw.tar.gz" in note and "rename" in note for note in submission.notes)
    (tmp_path / "pipeline (3).py").write_bytes(PIPELINE)
    assert load_submission(tmp_path / "pipeline (3).py").files == {"pipeline.py": PIPELINE}


def test_gradescope_and_canvas_uploads(tmp_path):
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "pipeline (1).py").write_bytes(PIPELINE)
    (upload / "tensor_parallel.py").write_bytes(TENSOR)
    (tmp_path / "scratch").mkdir()
    folder, notes = gradescope_run.prepare(upload, tmp_path / "scratch")
    assert (folder / "pipeline.py").read_bytes() == PIPELINE and "graded pipeline (1).py as pipeline.py" in notes
    with zipfile.ZipFile(tmp_path / "download.zip", "w") as download:
        download.writestr("lovelaceada_101_9001_pipeline (1).py", PIPELINE)
        download.writestr("lovelaceada_101_9002_tensor_parallel.py", TENSOR)
    students, _ = discovery.discover(tmp_path / "download.zip", tmp_path / "unpacked")
    assert load_submission(students[0].path).files == {"pipeline.py": PIPELINE, "tensor_parallel.py": TENSOR}


@pytest.mark.slow  # one criterion graded by the real grader in a subprocess
def test_the_note_reaches_the_json_report_and_the_terminal(tmp_path):
    """Issue 28, item 6: the note was promised, but only Gradescope's wrapper wrote one."""
    import json
    import subprocess
    import sys

    from grading_helpers import answer_key_source

    from grader.layout import REPOSITORY

    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "pipeline (1).py").write_text(answer_key_source("pipeline.py"))
    result = subprocess.run([sys.executable, "-m", "grader", "grade", str(tmp_path / "alice"), "--only", "2.1-schedule",
                             "--json", str(tmp_path / "alice.json")], cwd=REPOSITORY, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    note = "pipeline.py from pipeline (1).py (a browser's rename of pipeline.py)"
    assert note in json.loads((tmp_path / "alice.json").read_text())["notes"]
    assert f"note: {note}" in result.stdout


def test_a_plain_folder_says_nothing_about_where_its_files_came_from(tmp_path):
    from grader.grading import _new_report
    from grader.rubric import load_rubric

    (tmp_path / "pipeline.py").write_bytes(PIPELINE)
    (tmp_path / "minitorch").mkdir()
    (tmp_path / "minitorch" / "tensor_parallel.py").write_bytes(TENSOR)
    report = _new_report(load_submission(tmp_path), load_rubric(), 1, seed=1)
    assert report.notes == ["tensor_parallel.py from minitorch/tensor_parallel.py"]
