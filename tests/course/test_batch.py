"""Batch grading: one student's crash, hang or garbage never stops the batch; CSV layouts.

Most tests drive ``run_batch`` with a fake grader (a script that misbehaves on purpose); the
last one runs the real ``python -m course batch`` on three submissions."""
import csv
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from course import batch, discovery, outcomes
from grader.layout import REPOSITORY as REPO
from kit import handout

FAKE_GRADER = textwrap.dedent('''\
    import json, os, subprocess, sys, time
    from pathlib import Path
    path, report = Path(sys.argv[1]), Path(sys.argv[3])
    name = path.stem if path.suffix == ".zip" else path.name
    files = {"pipeline.py": "0" * 64} if name == "bob" else {"pipeline.py": "0" * 64, "tensor_parallel.py": "1" * 64}
    criteria = [
        {"id": "2.1-schedule", "problem": "2.1", "title": "t", "points": 8, "earned": 8, "status": "passed",
         "message": "", "seconds": 0.1},
        {"id": "2.2-forward", "problem": "2.2", "title": "t", "points": 4, "earned": 0, "status": "failed",
         "message": "", "seconds": 0.1},
        {"id": "2.3-speedup", "problem": "2.3", "title": "t", "points": 10, "earned": 0, "status": "blocked",
         "message": "needs 2 CUDA GPUs", "seconds": 0.0},
    ]
    good = {"schema_version": 1, "submission": str(path), "files": files, "environment": {}, "score": 8,
            "max_score": 22, "blocked_points": 10, "criteria": criteria}
    if name == "crash":
        raise RuntimeError("grader blew up")
    if name == "garbage":
        report.write_text("{not json")
        sys.exit(0)
    if name == "future":
        report.write_text(json.dumps({**good, "schema_version": 2}))
        sys.exit(0)
    if name == "hang":
        report.write_text(json.dumps({**good, "criteria": criteria[:1]}))  # partial, as after one criterion
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        Path(os.environ["GRANDCHILD_PID"]).write_text(str(child.pid))
        time.sleep(60)
    report.write_text(json.dumps(good))
    ''')


# Every student gets 1 point; the names graded are appended to a file (argv[1]).
FIXED_GRADER = textwrap.dedent('''\
    import json, sys
    from pathlib import Path
    graded, path, report = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[4])
    with open(graded, "a") as log:
        log.write(path.name + "\\n")
    criteria = [{"id": "2.1-schedule", "problem": "2.1", "title": "t", "points": 8, "earned": 1, "status": "failed",
                 "message": "", "seconds": 0.1}]
    report.write_text(json.dumps({"schema_version": 1, "submission": str(path), "files": {"pipeline.py": "0" * 64,
        "tensor_parallel.py": "1" * 64}, "environment": {}, "score": 1, "max_score": 8, "criteria": criteria}))
    ''')


def make_class(folder: Path) -> None:
    for name in ("alice", "crash", "garbage", "future", "hang", "=HYPERLINK(1)"):
        (folder / name).mkdir(parents=True)
        (folder / name / "pipeline.py").write_text("")
    with zipfile.ZipFile(folder / "bob.zip", "w") as archive:
        archive.writestr("pipeline.py", "")
    (folder / "notes.txt").write_text("not a student")


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_misbehaving_students_never_stop_the_batch(tmp_path, monkeypatch):
    make_class(tmp_path / "class")
    (tmp_path / "fake_grader.py").write_text(FAKE_GRADER)
    monkeypatch.setenv("GRANDCHILD_PID", str(tmp_path / "grandchild.pid"))
    lines = []
    start = time.monotonic()
    outcomes = batch.run_batch(
        tmp_path / "class", tmp_path / "out" / "grades.csv", jobs=2, timeout=4,
        grader_command=[sys.executable, str(tmp_path / "fake_grader.py")], progress=lines.append,
    )
    assert time.monotonic() - start < 30
    assert lines[0] == "skipped notes.txt (not a folder, .zip, .tar.gz or .tgz)"
    assert len(lines) == 8 and all(line.startswith("[") for line in lines[1:])
    rows = {row["student"].lstrip("'"): row for row in read_csv(tmp_path / "out" / "grades.csv")}
    assert sorted(rows) == sorted(o.student for o in outcomes) == sorted(
        ["alice", "bob", "crash", "garbage", "future", "hang", "=HYPERLINK(1)"]
    )
    alice = rows["alice"]
    assert (alice["2.1"], alice["2.2"], alice["2.3"], alice["total"], alice["max_score"]) == ("8", "0", "0", "8", "22")
    assert (alice["status"], alice["flags"]) == ("graded", "blocked_points=10")
    assert alice["report"] == "grades-reports/alice.json"  # relative to the CSV: the two move together
    assert json.loads((tmp_path / "out" / alice["report"]).read_text())["schema_version"] == 1
    assert rows["bob"]["status"] == "graded" and "missing:tensor_parallel.py" in rows["bob"]["flags"]
    for name in ("crash", "garbage", "future"):
        assert rows[name]["status"] == "error" and rows[name]["total"] == "", name
        assert "needs_review" in rows[name]["flags"], name
    assert "grader blew up" in (tmp_path / "out" / "grades-reports" / "crash.log").read_text()
    hang = rows["hang"]
    assert (hang["status"], hang["total"], hang["2.1"]) == ("timeout", "8", "8")  # the partial report counts
    assert "needs_review" in hang["flags"]
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    status = Path(f"/proc/{grandchild}/status")
    deadline = time.monotonic() + 10  # SIGKILL is delivered when the process next runs: a busy machine takes a moment
    while status.exists() and "zombie" not in status.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not status.exists() or "zombie" in status.read_text(), "the hung grader's children were not killed"
    assert rows["=HYPERLINK(1)"]["student"] == "'=HYPERLINK(1)"

    # --rerun-failed: only the killed, timed-out and failed students run again; the others keep their results
    (tmp_path / "fixed_grader.py").write_text(FIXED_GRADER)
    again = []
    batch.run_batch(tmp_path / "class", tmp_path / "out" / "grades.csv", jobs=2, timeout=20, progress=again.append,
                    grader_command=[sys.executable, str(tmp_path / "fixed_grader.py"), str(tmp_path / "graded.txt")],
                    rerun_failed=True)
    assert again[1] == "--rerun-failed: 4 of 7 students to grade again", again
    assert sorted((tmp_path / "graded.txt").read_text().split()) == ["crash", "future", "garbage", "hang"]
    rows = {row["student"].lstrip("'"): row for row in read_csv(tmp_path / "out" / "grades.csv")}
    assert all(row["status"] == "graded" for row in rows.values()), rows
    assert rows["alice"]["report"] == alice["report"] and rows["crash"]["total"] == "1"


def test_cells_that_look_like_formulas_are_escaped():
    assert [outcomes.escape_cell(v) for v in ("=1+1", "+1", "-1", "@SUM", "\tx", "ok", 3, 2.5, None)] == [
        "'=1+1", "'+1", "'-1", "'@SUM", "\\tx", "ok", "3", "2.5", ""
    ]


def test_duplicate_names_are_both_graded_and_flagged(tmp_path):
    (tmp_path / "alice").mkdir()
    with zipfile.ZipFile(tmp_path / "alice.zip", "w") as archive:
        archive.writestr("pipeline.py", "")
    students, _ = discovery.discover(tmp_path, tmp_path / "unpacked")
    assert [(s.name, s.flags) for s in students] == [
        ("alice", []), ("alice.zip", ["duplicate_name", "needs_review"])
    ]


BATCH_S, STUDENT_S = 540, 240  # the batch, each student in it (two rounds of --jobs 2); the test allows 600


@pytest.mark.slow  # a whole grader run in a subprocess
@pytest.mark.timeout(BATCH_S + 60)
def test_real_grader_on_three_submissions(tmp_path):
    """Answer key (folder), stubs (folder) and answer key (zip) through `python -m course batch
    --jobs 2`: the two graded at once run their children as distinct uids (as root)."""
    key, stub = tmp_path / "class" / "key", tmp_path / "class" / "stub"
    key.mkdir(parents=True)
    stub.mkdir()
    with zipfile.ZipFile(tmp_path / "class" / "key_zip.zip", "w") as archive:
        for name in handout.STUDENT_FILES:
            source = REPO / "minitorch" / name
            if source.exists():
                shutil.copyfile(source, key / name)
                (stub / name).write_text(handout.strip_solutions(source.read_text(), name))
                archive.write(source, name)
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "course", "batch", str(tmp_path / "class"), "--csv", str(tmp_path / "grades.csv"),
         "--jobs", "2", "--timeout", str(STUDENT_S), "--html", str(tmp_path / "class.html"),
         "--only", "2"],  # Problem 2 is enough to see two graders at once; the whole key: tests/grader/test_cli.py
        cwd=REPO, capture_output=True, text=True, timeout=BATCH_S,
    )
    print(f"batch of 3 graded in {time.monotonic() - start:.1f} s")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["student"]: row for row in read_csv(tmp_path / "grades.csv")}
    uids = set()
    for name in ("key", "key_zip"):
        report = json.loads((tmp_path / rows[name]["report"]).read_text())
        expected = report["max_score"] - report["blocked_points"]
        assert rows[name]["status"] == "graded" and float(rows[name]["total"]) == expected, rows[name]
        uids.add(report["environment"]["children_uid"])
    if os.geteuid() == 0:
        assert len(uids) == 2 and 0 not in uids, uids
    assert rows["stub"]["status"] == "graded" and float(rows["stub"]["total"]) == 0
    assert "similar_to=key_zip" in rows["key"]["flags"] and "similar_to" not in rows["stub"]["flags"]
    assert 'data-a="key" data-b="key_zip"' in (tmp_path / "class.html").read_text()
