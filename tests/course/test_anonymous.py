"""Anonymous grading (issue 28): stable pseudonyms instead of names in every output a grader
looks at (the CSV, the dashboard, the similarity pairs), while Canvas's import and the
feedback files keep the students' ids."""
import csv
import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
from browser import DomReader
from grading_helpers import answer_key_source

from course import anonymous, batch, cli, gradebook, similarity

FAKE_GRADER = textwrap.dedent('''\
    import json, sys
    from pathlib import Path
    path, report = Path(sys.argv[1]), Path(sys.argv[3])
    earned = 0 if "zero" in path.name else 8
    criteria = [{"id": "2.1-schedule", "problem": "2.1", "title": "t", "points": 8, "earned": earned,
                 "status": "passed" if earned else "failed", "message": "" if earned else "wave 0: wrong", "seconds": 0.1}]
    report.write_text(json.dumps({"schema_version": 1, "submission": str(path), "complete": True,
        "files": {"pipeline.py": "0" * 64}, "environment": {}, "score": earned, "max_score": 8, "criteria": criteria}))
    ''')
NAMES = ("lovelace", "lovelace_copy", "turing_zero", "hopper")


def make_class(folder: Path, names=NAMES) -> None:
    key = answer_key_source("pipeline.py")
    for name in names:
        (folder / name).mkdir(parents=True, exist_ok=True)
        text = key if name.startswith("lovelace") else f"def clock_cycles(m, n):\n    return iter([{name!r}])\n"
        (folder / name / "pipeline.py").write_text(text)


def run(root: Path) -> list[str]:
    said: list[str] = []
    batch.run_batch(root / "class", root / "grades.csv", jobs=2, grader_command=[sys.executable, str(root / "grader.py")],
                    progress=said.append, options=gradebook.Options(
                        similarity_threshold=similarity.DEFAULT_THRESHOLD, html=root / "class.html", anonymous=True,
                        canvas=root / "canvas.csv", assignment="HW5 (77)", name_is="login", feedback=root / "feedback"))
    return said


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture
def graded(tmp_path):
    make_class(tmp_path / "class")
    (tmp_path / "grader.py").write_text(FAKE_GRADER)
    run(tmp_path)
    return tmp_path


def test_the_csv_and_the_dashboard_name_nobody(graded):
    pseudonyms = anonymous.read(gradebook.reports_folder(graded / "grades.csv"))
    assert sorted(pseudonyms) == sorted(NAMES) and len(set(pseudonyms.values())) == len(NAMES)
    assert all(re.fullmatch(r"anon-\d{4}", p) for p in pseudonyms.values())
    text = (graded / "grades.csv").read_text()
    assert not any(name in text for name in NAMES), text
    rows = {row["student"]: row for row in read_csv(graded / "grades.csv")}
    assert set(rows) == set(pseudonyms.values()) and all(row["report"] == "" for row in rows.values())
    assert f"similar_to={pseudonyms['lovelace_copy']}" in rows[pseudonyms["lovelace"]]["flags"].split(";")
    assert rows[pseudonyms["turing_zero"]]["total"] == "0"
    page = (graded / "class.html").read_text()
    assert not any(name in page for name in NAMES)
    reader = DomReader()
    reader.feed(page)
    pair = reader.root.find_all("tr", **{"class": "pair"})[0]
    assert {pair.attrs["data-a"], pair.attrs["data-b"]} == {pseudonyms["lovelace"], pseudonyms["lovelace_copy"]}


def test_the_import_files_keep_the_students_ids(graded):
    canvas_rows = {row["SIS Login ID"]: row["HW5 (77)"] for row in read_csv(graded / "canvas.csv")}
    assert canvas_rows == {"lovelace": "8", "lovelace_copy": "8", "turing_zero": "0", "hopper": "8"}
    assert sorted(p.name for p in (graded / "feedback").iterdir()) == sorted(f"{name}.txt" for name in NAMES)


def test_a_pseudonym_is_stable_through_rebuilds_and_a_newcomer_gets_a_new_one(graded):
    reports = gradebook.reports_folder(graded / "grades.csv")
    before = anonymous.read(reports)
    make_class(graded / "class", ("babbage",))
    run(graded)
    after = anonymous.read(reports)
    assert {name: after[name] for name in before} == before
    assert after["babbage"] not in before.values()
    assert {row["student"] for row in read_csv(graded / "grades.csv")} == set(after.values())


def test_the_dashboard_command_rebuilds_it_anonymously(graded, tmp_path):
    reports = gradebook.reports_folder(graded / "grades.csv")
    assert cli.main(["dashboard", str(reports), "--html", str(tmp_path / "again.html"), "--anonymous"]) == 0
    page = (tmp_path / "again.html").read_text()
    assert not any(name in page for name in NAMES)
    assert all(pseudonym in page for pseudonym in anonymous.read(reports).values())
    assert cli.main(["dashboard", str(reports), "--html", str(tmp_path / "named.html")]) == 0
    assert all(name in (tmp_path / "named.html").read_text() for name in NAMES)  # the instructor's view


def test_pseudonyms_rename_similar_to_flags_only():
    names = {"ada": "anon-1111", "bob": "anon-2222"}
    assert anonymous.flags(["similar_to=bob", "late=2d", "similar_to=public:web"], names) == [
        "similar_to=anon-2222", "late=2d", "similar_to=public:web"]
    assert json.dumps(names)  # plain data
