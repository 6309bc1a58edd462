"""Canvas as it really exports: the Download Submissions layout in, the gradebook import out.

The last test grades a made-up Canvas download (a resubmission, late work, an archive, a
student the roster lacks) with the real grader (Problem 2.1 only, to stay fast)."""
import csv
import io
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from grading_helpers import answer_key_source, stub_files

from course import canvas, discovery, gradebook, outcomes
from course.outcomes import StudentGrade
from grader.grading import select
from grader.layout import REPOSITORY as REPO
from grader.rubric import load_rubric

ROSTER = (
    "Student,ID,SIS User ID,SIS Login ID,Section,HW5 Model Parallelism (77)\n"
    "    Points Possible,,,,,100\n"
    '"Lovelace, Ada",101,s001,ada,Sec A,\n'
    '"Turing, Alan",102,s002,alan,Sec B,\n'
    '"Hopper, Grace",103,s003,grace,Sec A,\n'
    "=Mallory,104,s004,103,Sec B,\n"  # her login is Grace's Canvas id

)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_download_names_are_taken_apart():
    parsed = canvas.parse_download_name("lovelaceada_LATE_101_9001_pipeline-2.py")
    assert (parsed.name, parsed.canvas_id, parsed.attachment_id, parsed.original, parsed.attempt, parsed.late) == (
        "lovelaceada", "101", 9001, "pipeline.py", 2, True
    )
    parsed = canvas.parse_download_name("turingalan_102_9002_my_hw-final.tar.gz")
    assert (parsed.original, parsed.attempt, parsed.late) == ("my_hw-final.tar.gz", 0, False)
    assert canvas.parse_download_name("turingalan_102_9002_hw5-1.tar.gz").original == "hw5.tar.gz"
    assert canvas.parse_download_name("hopper_late_103_9003_x.py").late  # Canvas has written it lower-case too
    for other in ("alice", "notes.txt", "alice_101_pipeline.py", "a/b_1_2_c.py", "x_1_y_z.py"):
        assert canvas.parse_download_name(other) is None, other


def test_grouping_keeps_the_latest_resubmission_and_the_late_mark():
    submissions, others = canvas.group_download([
        "lovelaceada_101_9001_pipeline.py", "lovelaceada_LATE_101_9001_pipeline-1.py",
        "lovelaceada_101_9001_tensor_parallel.py", "turingalan_102_9002_hw.zip", "turingalan_102_9002_hw-2.zip",
        "turingalan_102_9002_hw-1.zip", "README.txt",
    ])
    assert others == ["README.txt"]
    ada, alan = submissions
    assert (ada.student, ada.late, sorted(ada.files)) == ("lovelaceada_101", True, ["pipeline.py", "tensor_parallel.py"])
    assert ada.files["pipeline.py"].entry == "lovelaceada_LATE_101_9001_pipeline-1.py"
    assert ada.superseded == ["lovelaceada_101_9001_pipeline.py"]
    assert (alan.late, alan.files["hw.zip"].entry) == (False, "turingalan_102_9002_hw-2.zip")
    assert ada.note() == ("lovelaceada_101: graded lovelaceada_LATE_101_9001_pipeline-1.py; "
                          "older upload not graded: lovelaceada_101_9001_pipeline.py")
    assert alan.superseded == ["turingalan_102_9002_hw.zip", "turingalan_102_9002_hw-1.zip"]


def test_two_files_of_one_submission_are_both_graded(tmp_path):
    """The third number of a Canvas download name is the file's attachment id: two files
    uploaded together have two, and both belong to the student (issue 23, item 1)."""
    key, stubs = answer_key_source("pipeline.py"), stub_files()
    with zipfile.ZipFile(tmp_path / "download.zip", "w") as download:
        download.writestr("lovelaceada_1001_555001_pipeline.py", key)
        download.writestr("lovelaceada_1001_555002_tensor_parallel.py", stubs["tensor_parallel.py"])
    students, notes = discovery.discover(tmp_path / "download.zip", tmp_path / "unpacked")
    assert [(s.name, s.canvas_id) for s in students] == [("lovelaceada_1001", "1001")]
    assert sorted(p.name for p in students[0].path.iterdir()) == ["pipeline.py", "tensor_parallel.py"]
    assert (students[0].path / "pipeline.py").read_text() == key
    assert "0 older upload(s) not graded" in notes[-1]
    # Uploads of one name without a -N suffix (downloads merged by hand): the later attachment wins.
    submissions, _ = canvas.group_download(["a_5_12_pipeline.py", "a_5_10_pipeline.py", "a_5_11_tensor_parallel.py"])
    (only,) = submissions
    assert {name: f.entry for name, f in only.files.items()} == {
        "pipeline.py": "a_5_12_pipeline.py", "tensor_parallel.py": "a_5_11_tensor_parallel.py"}
    assert only.superseded == ["a_5_10_pipeline.py"] and "a_5_10_pipeline.py" in (only.note() or "")


def test_discovery_skips_with_a_word_and_flags_unreadable_tars(tmp_path):
    source = tmp_path / "class"
    for name in ("alice", "__MACOSX", ".git"):
        (source / name).mkdir(parents=True)
    (source / ".DS_Store").write_text("")
    (source / "notes.txt").write_text("")
    (source / "bob.tgz").write_bytes(b"")
    (source / "carol.tar.gz").write_bytes(b"")
    students, notes = discovery.discover(source, tmp_path / "unpacked")
    assert [s.name for s in students] == ["alice", "bob", "carol"]
    assert notes == ["skipped .DS_Store (hidden)", "skipped .git (hidden)",
                     "skipped __MACOSX/ (macOS metadata, not a student)",
                     "skipped notes.txt (not a folder, .zip, .tar.gz or .tgz)"]
    try:
        from grader.submission import load_submission
        load_submission(source / "bob.tgz")
        readable = True
    except Exception:  # noqa: BLE001 - this grader cannot read tar archives yet
        readable = False
    expected = [] if readable else ["tar_not_supported", "needs_review"]
    assert students[1].flags == expected and students[2].flags == expected


def test_roster_matching_and_identity_columns(tmp_path):
    (tmp_path / "export.csv").write_text(ROSTER)
    roster = canvas.read_roster(tmp_path / "export.csv")
    assert canvas.identify("ada", "", roster, None) == (["Lovelace, Ada", "101", "s001", "ada", "Sec A"], None)
    assert canvas.identify("s002", "", roster, None)[0][1] == "102"  # SIS User ID
    assert canvas.identify("102", "", roster, None)[0][0] == "Turing, Alan"  # Canvas ID
    assert canvas.identify("whatever_102", "102", roster, None)[0][3] == "alan"  # a Canvas download: its id
    assert canvas.identify("ghost", "", roster, None) == (["ghost", "", "", "", ""], "not_in_roster")
    assert canvas.identify("103", "", roster, None) == (["103", "", "", "", ""], "ambiguous_identity")
    assert canvas.identify("103", "", roster, "login")[0][0] == "=Mallory"
    assert canvas.identify("103", "", roster, "canvas")[0][0] == "Hopper, Grace"
    assert canvas.identify("ada", "", None, "login") == (["ada", "", "", "ada", ""], None)
    assert canvas.identify("s9", "", None, "sis") == (["s9", "", "s9", "", ""], None)
    assert canvas.identify("lovelaceada_101", "101", None, None) == (["lovelaceada_101", "101", "", "", ""], None)


def test_bad_rosters_and_options_are_named(tmp_path):
    (tmp_path / "bad.csv").write_text("Name,Email\nAda,ada@x\n")
    with pytest.raises(canvas.RosterError, match="no column 'Student', 'ID', 'SIS User ID', 'SIS Login ID'"):
        canvas.read_roster(tmp_path / "bad.csv")
    (tmp_path / "empty.csv").write_text("Student,ID,SIS User ID,SIS Login ID,Section\n    Points Possible,,,,\n")
    with pytest.raises(canvas.RosterError, match="no student rows"):
        canvas.read_roster(tmp_path / "empty.csv")
    with pytest.raises(canvas.RosterError, match="cannot read"):
        canvas.read_roster(tmp_path / "missing.csv")
    folders = [discovery.Student("ada", tmp_path, [])]
    with pytest.raises(canvas.OptionsError, match="--canvas needs --assignment"):
        gradebook.check(gradebook.Options(canvas=tmp_path / "c.csv"), folders)
    with pytest.raises(canvas.OptionsError, match="--name-is login|sis|canvas"):
        gradebook.check(gradebook.Options(canvas=tmp_path / "c.csv", assignment="HW5 (77)"), folders)
    downloaded = [discovery.Student("ada_101", tmp_path, [], "101")]
    assert gradebook.check(gradebook.Options(canvas=tmp_path / "c.csv", assignment="HW5 (77)"), downloaded) is None
    assert canvas.assignment_warning("HW5 (77)") is None and "no assignment id" in canvas.assignment_warning("HW5")


def test_unmatched_students_are_flagged_in_the_csv_and_unscored_in_canvas(tmp_path):
    (tmp_path / "export.csv").write_text(ROSTER)
    reports = gradebook.reports_folder(tmp_path / "grades.csv")
    outcomes = [
        StudentGrade("ada", Path("ada"), reports / "ada.json", score=40.0, max_score=90.0, problems={"2.1": 40.0}),
        StudentGrade("ghost", Path("ghost"), reports / "ghost.json", score=12.0, max_score=90.0, problems={"2.1": 12.0}),
        StudentGrade("s002", Path("s002"), reports / "s002.json", status="error", score=None, flags=["needs_review"]),
    ]
    students = [discovery.Student(o.student, o.path, []) for o in outcomes]
    options = gradebook.Options(canvas=tmp_path / "canvas.csv", assignment="HW5 Model Parallelism (77)",
                                roster=tmp_path / "export.csv")
    lines = []
    gradebook.finish(outcomes, students, tmp_path / "grades.csv", options, "test-run", progress=lines.append)
    imported = read_csv(tmp_path / "canvas.csv")
    assert list(imported[0]) == [*canvas.IDENTITY, "HW5 Model Parallelism (77)"]
    assert imported[0] == {"Student": "Lovelace, Ada", "ID": "101", "SIS User ID": "s001", "SIS Login ID": "ada",
                           "Section": "Sec A", "HW5 Model Parallelism (77)": "40"}
    assert len(imported) == 2  # ghost has no identity Canvas could match: left out, and named
    assert any("left out of" in line and "ghost" in line for line in lines), lines
    assert (imported[1]["ID"], imported[1]["HW5 Model Parallelism (77)"]) == ("102", "")  # no trustworthy score
    # scores out of 90 for an assignment worth 100 in Canvas (the export's Points Possible): said before importing
    assert any(line.startswith("WARNING: the scores are out of 90") and "worth 100" in line for line in lines), lines
    flags = {row["student"]: row["flags"] for row in read_csv(tmp_path / "grades.csv")}
    assert flags == {"ada": "", "ghost": "not_in_roster;needs_review", "s002": "needs_review"}


def _canvas_download(path: Path) -> None:
    """Ada: a stub first, the answer key as resubmission -1, late. Alan: a zip of the answer
    key. Zed: the stubs, not in the roster. Plus a file that is no submission."""
    key, stubs = answer_key_source("pipeline.py"), stub_files()
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("hw5/minitorch/pipeline.py", key)
    with zipfile.ZipFile(path, "w") as download:
        download.writestr("lovelaceada_101_9001_pipeline.py", stubs["pipeline.py"])
        download.writestr("lovelaceada_LATE_101_9001_pipeline-1.py", key)
        download.writestr("turingalan_102_9002_submission.zip", inner.getvalue())
        download.writestr("zeduser_999_9009_pipeline.py", stubs["pipeline.py"])
        download.writestr("grading_notes.txt", "not a submission")


@pytest.mark.slow  # a whole grader run in a subprocess
@pytest.mark.timeout(360)  # outlasts the batch's own 300 s limit
def test_a_canvas_download_grades_into_a_canvas_import(tmp_path):
    _canvas_download(tmp_path / "submissions.zip")
    (tmp_path / "export.csv").write_text(ROSTER)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "course", "batch", str(tmp_path / "submissions.zip"), "--csv", str(tmp_path / "grades.csv"),
         "--only", "2.1", "--jobs", "2", "--canvas", str(tmp_path / "canvas.csv"),
         "--assignment", "HW5 Model Parallelism (77)", "--roster", str(tmp_path / "export.csv"), "--no-similarity"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    print(f"a Canvas download of 3 students graded (2.1 only) in {time.monotonic() - started:.1f} s")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "skipped grading_notes.txt in submissions.zip (not a Canvas download name)" in result.stdout
    assert "Canvas download: 3 students (1 late)" in result.stdout and "1 older upload(s) not graded" in result.stdout
    full = f"{sum(c.points for c in select(load_rubric().active(), ['2.1'])):g}"  # the answer key's: all of 2.1
    rows = {row["student"]: row for row in read_csv(tmp_path / "grades.csv")}
    assert sorted(rows) == ["lovelaceada_101", "turingalan_102", "zeduser_999"]
    assert (rows["lovelaceada_101"]["2.1"], rows["lovelaceada_101"]["flags"]) == (full, "late;missing:tensor_parallel.py")
    assert (rows["turingalan_102"]["2.1"], rows["turingalan_102"]["flags"]) == (full, "missing:tensor_parallel.py")
    assert rows["zeduser_999"]["2.1"] == "0" and "not_in_roster" in rows["zeduser_999"]["flags"]
    imported = {row["ID"] or row["Student"]: row for row in read_csv(tmp_path / "canvas.csv")}
    assert set(imported) == {"101", "102"}  # zeduser is not in the roster: left out, named in a line
    assert "left out of" in result.stdout and "zeduser_999" in result.stdout
    assert (imported["101"]["SIS Login ID"], imported["101"]["HW5 Model Parallelism (77)"]) == ("ada", full)
    assert (imported["102"]["Student"], imported["102"]["HW5 Model Parallelism (77)"]) == ("Turing, Alan", full)
    unpacked = gradebook.submissions_folder(tmp_path / "grades.csv")
    assert (unpacked / "lovelaceada_101" / "pipeline.py").read_text() == answer_key_source("pipeline.py")


def test_canvas_usage_errors_come_before_grading(tmp_path):
    (tmp_path / "class" / "ada").mkdir(parents=True)
    for extra, message in (
        ([], "--canvas needs --assignment"),
        (["--assignment", "HW5 (77)"], "--name-is login|sis|canvas"),
        (["--assignment", "HW5 (77)", "--roster", str(tmp_path / "none.csv")], "cannot read"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "course", "batch", str(tmp_path / "class"), "--csv", str(tmp_path / "g.csv"),
             "--canvas", str(tmp_path / "c.csv"), *extra],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert not (tmp_path / "g-reports").exists()


def test_escape_still_applies_to_canvas_cells(tmp_path):
    rows = canvas.import_rows("HW (1)", [(["=cmd", "1", "", "", ""], 3.0)])
    outcomes.write_csv(tmp_path / "c.csv", rows)
    assert read_csv(tmp_path / "c.csv")[0]["Student"] == "'=cmd"


def test_an_unpacked_download_beside_student_folders(tmp_path):
    source = tmp_path / "class"
    (source / "bob").mkdir(parents=True)
    (source / "lovelaceada_LATE_101_9001_pipeline.py").write_text("first")
    (source / "lovelaceada_LATE_101_9001_pipeline-1.py").write_text("second")
    with zipfile.ZipFile(source / "turingalan_102_9002_hw5.zip", "w") as archive:
        archive.writestr("pipeline.py", "")
    (source / "turingalan_102_9002_notes.pdf").write_text("")
    students, notes = discovery.discover(source, tmp_path / "unpacked")
    assert [(s.name, s.canvas_id, s.flags) for s in students] == [
        ("bob", "", []), ("lovelaceada_101", "101", ["late"]), ("turingalan_102", "102", []),
    ]
    assert (students[1].path / "pipeline.py").read_text() == "second"
    assert students[2].path == tmp_path / "unpacked" / "turingalan_102" / "hw5.zip"  # the archive is graded
    assert notes == [f"Canvas download: 2 students (1 late), unpacked into {tmp_path / 'unpacked'}; "
                     "1 older upload(s) not graded",
                     "lovelaceada_101: graded lovelaceada_LATE_101_9001_pipeline-1.py; "
                     "older upload not graded: lovelaceada_LATE_101_9001_pipeline.py"]


@pytest.mark.parametrize("without_gpu, points_possible, expected", [
    (True, 90, None),  # a class graded without GPUs: CPU scores out of 90, the assignment set to 90 as documented
    (True, 100, "WARNING: the scores are out of 90 but the Canvas assignment 'HW5 (77)' is worth 100 points"),
    (False, 100, None),  # the cell waits for the GPU merge, whose scores are out of 100
    (False, 90, "WARNING: the scores are out of 100 but the Canvas assignment 'HW5 (77)' is worth 90 points"),
    (True, None, "the Canvas file's scores are out of 90; the assignment's points cannot be checked"),
    (False, None, "the Canvas file's scores are out of 100; the assignment's points cannot be checked"),
])
def test_the_canvas_points_check_and_its_neighbours_follow_canvas_without_gpu(tmp_path, without_gpu, points_possible,
                                                                            expected):
    """Issue 28, item 2: under --canvas-without-gpu the check compared the full 100 with Canvas."""
    roster = ROSTER.replace("HW5 Model Parallelism (77)", "HW5 (77)")
    if points_possible is None:
        roster = roster.replace("    Points Possible,,,,,100\n", "")
    (tmp_path / "export.csv").write_text(roster.replace(",,,,,100", f",,,,,{points_possible}"))
    reports = gradebook.reports_folder(tmp_path / "grades.csv")
    ada = StudentGrade("ada", Path("ada"), reports / "ada.json", score=80.0, max_score=100.0, problems={"2.1": 80.0},
                       flags=["blocked_points=10"])
    options = gradebook.Options(canvas=tmp_path / "canvas.csv", assignment="HW5 (77)", roster=tmp_path / "export.csv",
                                canvas_without_gpu=without_gpu)
    lines: list[str] = []
    gradebook.finish([ada], [discovery.Student("ada", Path("ada"), [])], tmp_path / "grades.csv", options, "run",
                     progress=lines.append)
    points = [line for line in lines if "out of" in line]
    if expected is None:
        assert points == [], lines
    else:
        (line,) = points
        assert line.startswith(expected), line
    flipped = "pass --canvas-without-gpu" if not without_gpu else "grade without --canvas-without-gpu"
    assert (flipped in " ".join(points)) == (points_possible is not None and expected is not None)
    waiting = [line for line in lines if "an EMPTY cell" in line]
    assert len(waiting) == (0 if without_gpu else 1), lines
    (row,) = read_csv(tmp_path / "canvas.csv")
    assert row["HW5 (77)"] == ("80" if without_gpu else "")

