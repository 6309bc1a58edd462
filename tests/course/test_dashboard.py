"""The class dashboard and the similarity pass, end to end, in a real browser.

A small class is graded ONCE per module by the real grader through ``batch.run_batch`` (a
rubric with four problems keeps it to seconds): the answer key, the untouched stubs, two
independently written wrong submissions, a near-copy of the key, and a hostile submission
whose name, messages, printed output and code are HTML and script. The dashboard it writes is
opened in headless Chromium; the assertions read the DOM Chromium rendered.
"""
from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import ARTIFACTS, DomReader, Element, chromium_run
from grading_helpers import REPO, answer_key_source, stub_files

from course import batch, dashboard, gradebook, similarity

pytestmark = pytest.mark.timeout(300)  # the module's grading happens in the first test's setup
PROBLEMS = ("2.1", "2.3", "3.1", "4.1")  # 2.3 is blocked without GPUs: the class-wide note
HOSTILE = "<img src=x onerror=alert(1)>"
CANARY = "data-pwned"
STUDENTS = ("key", "near-copy", "stubs", "wrong-schedule", "wrong-pipe", HOSTILE)

WRONG_SCHEDULE = {  # reversed stage order in a wave; 1F1B as GPipe (every F, then every B)
    "2.1": '''\
if num_microbatches < 0 or num_stages < 1:
    raise ValueError("bad arguments")
for clock in range(num_microbatches + num_stages - 1):
    yield [(clock - s, s) for s in reversed(range(num_stages)) if 0 <= clock - s < num_microbatches]''',
    "4.1": '''\
plan = []
for d in range(num_stages):
    plan.append([Action(d, "F", m) for m in range(num_microbatches)] + [Action(d, "B", m) for m in range(num_microbatches)])
return plan''',
}
WRONG_PIPE = {  # a correct clock_cycles written differently; a 1F1B with one forward too many in flight
    "2.1": '''\
if num_stages < 1:
    raise ValueError(f"need at least one stage, not {num_stages}")
if num_microbatches < 0:
    raise ValueError(f"negative microbatch count {num_microbatches}")
t = 0
while num_microbatches and t < num_microbatches + num_stages - 1:
    lo = 0 if t < num_microbatches else t - num_microbatches + 1
    hi = t if t < num_stages else num_stages - 1
    yield [(t - k, k) for k in range(lo, hi + 1)]
    t += 1''',
    "4.1": '''\
out = []
for dev in range(num_stages):
    n_warm = min(num_stages - dev + 1, num_microbatches)
    seq, f, b = [], 0, 0
    while f < n_warm:
        seq.append(Action(dev, "F", f))
        f += 1
    while f < num_microbatches:
        seq.append(Action(dev, "B", b))
        seq.append(Action(dev, "F", f))
        b, f = b + 1, f + 1
    while b < num_microbatches:
        seq.append(Action(dev, "B", b))
        b += 1
    out.append(seq)
return out''',
}
HOSTILE_CODE = {
    "2.1": f'''\
print('<img src=x onerror="document.body.setAttribute(\\'{CANARY}\\', \\'output\\')">')
raise ValueError("<script>document.body.setAttribute('{CANARY}', 'message')</script><b>bold</b>")''',
}


def fill(stub: str, bodies: dict[str, str]) -> str:
    """``stub`` with the ``raise NotImplementedError("Problem N.M: ...")`` of each problem in
    ``bodies`` replaced by that code, indented like the line it replaces."""
    def replace(match: re.Match) -> str:
        body = bodies.get(match["problem"])
        return match[0] if body is None else "\n".join(match["indent"] + line for line in body.splitlines())

    return re.sub(r'^(?P<indent>[ \t]*)raise NotImplementedError\("Problem (?P<problem>\d\.\d): [^"]*"\)$', replace, stub, flags=re.M)


def near_copy(source: str) -> str:
    """The answer key as a copier hands it in: names changed, comments gone, lines re-spaced."""
    for old, new in (("microbatches", "chunks"), ("wave", "tick"), ("first_error", "err"), ("schedule", "plan"),
                     ("warmup", "ramp"), ("device", "dev"), ("world_size", "ws"), ("rank", "me")):
        source = re.sub(rf"\b{old}\b", new, source)
    lines = [line for line in source.splitlines() if not line.strip().startswith("#")]
    return "\n\n".join(lines) + "\n"


def make_class(folder: Path) -> None:
    stubs = stub_files()
    key = {name: answer_key_source(name) for name in stubs}
    files = {
        "key": key,
        "near-copy": {name: near_copy(text) for name, text in key.items()},
        "stubs": stubs,
        "wrong-schedule": {"pipeline.py": fill(stubs["pipeline.py"], WRONG_SCHEDULE)},  # no tensor_parallel.py
        "wrong-pipe": {**stubs, "pipeline.py": fill(stubs["pipeline.py"], WRONG_PIPE)},
        HOSTILE: {**stubs, "pipeline.py": fill(stubs["pipeline.py"], HOSTILE_CODE).replace(
            "import math\n", "import math\nimport subprocess  # <script>alert('policy')</script>\n", 1)},
    }
    for student, sources in files.items():
        (folder / student).mkdir(parents=True)
        for name, text in sources.items():
            (folder / student / name).write_text(text)


def small_rubric(path: Path) -> Path:
    others = sorted({m for m in re.findall(r'^problem = "([\d.]+)"', (REPO / "grader" / "rubric.toml").read_text(), re.M)} - set(PROBLEMS))
    text = (REPO / "grader" / "rubric.toml").read_text()
    path.write_text(re.sub(r"^disabled_problems = .*$", f"disabled_problems = {json.dumps(others)}", text, count=1, flags=re.M))
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The small class graded once by the real grader, with the similarity pass and the page."""
    root = tmp_path_factory.mktemp("dashboard")
    make_class(root / "class")
    rubric = small_rubric(root / "rubric.toml")
    outcomes = batch.run_batch(  # graded with the small rubric, and the gradebook built against it
        root / "class", root / "grades.csv", jobs=2, timeout=150, progress=print,
        options=gradebook.Options(similarity_threshold=similarity.DEFAULT_THRESHOLD, html=root / "class.html", rubric=rubric),
    )
    return {"root": root, "outcomes": {o.student: o for o in outcomes}, "reports": root / "grades-reports",
            "html": root / "class.html", "csv": root / "grades.csv"}


def rendered(page: Path) -> Element:
    reader = DomReader()
    reader.feed(chromium_run(page, "--dump-dom"))
    return reader.root


@pytest.fixture(scope="module")
def dom(graded):
    return rendered(graded["html"])


def reports_by_student(graded) -> dict[str, dict]:
    return {name: json.loads(o.report_path.read_text()) for name, o in graded["outcomes"].items()}


@pytest.mark.slow  # grades the small class once (module fixture)
def test_similarity_flags_the_near_copy_in_the_csv_and_changes_no_score(graded):
    with open(graded["csv"], newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert sorted(rows) == sorted(STUDENTS)
    assert "similar_to=near-copy" in rows["key"]["flags"].split(";") and "needs_review" in rows["key"]["flags"]
    assert "similar_to=key" in rows["near-copy"]["flags"].split(";")
    for name in ("stubs", "wrong-schedule", "wrong-pipe", HOSTILE):
        assert "similar_to" not in rows[name]["flags"], (name, rows[name]["flags"])
    for name, report in reports_by_student(graded).items():
        assert float(rows[name]["total"]) == sum(c["earned"] for c in report["criteria"]), name
    assert float(rows["key"]["total"]) == float(rows["near-copy"]["total"]) > 0


@pytest.mark.slow  # grades the small class once (module fixture)
def test_the_page_shows_the_class_as_the_reports_say(graded, dom):
    reports = reports_by_student(graded)
    counts = {e.attrs["data-count"]: e.text.strip() for e in dom.find_all("b") if "data-count" in e.attrs}
    achievable = {n: sum(c["points"] for c in r["criteria"] if c["status"] != "blocked") for n, r in reports.items()}
    assert counts["students"] == counts["graded"] == str(len(STUDENTS))
    assert counts["full"] == str(sum(1 for n, r in reports.items() if r["score"] == achievable[n]))
    assert counts["zero"] == str(sum(1 for r in reports.values() if r["score"] == 0))
    assert counts["pairs"] == "1"
    assert sum(int(b.attrs["data-count"]) for b in dom.find_all("g", **{"class": "bin"})) == len(STUDENTS)

    rows = {e.attrs["data-id"]: e for e in dom.find_all("tr", **{"class": "criterion"})}
    for criterion_id, row in rows.items():
        statuses = [c["status"] for r in reports.values() for c in r["criteria"] if c["id"] == criterion_id]
        graded_here = [s for s in statuses if s != "blocked"]
        assert (row.attrs["data-passed"], row.attrs["data-graded"]) == (str(statuses.count("passed")), str(len(graded_here)))
        if graded_here:
            rate = 100 * statuses.count("passed") / len(graded_here)
            assert f"{statuses.count('passed')}/{len(graded_here)} ({rate:.0f}%)" in row.text
    # what the class was built to show: 2.1's waves hold the right pairs for all but the stubs and
    # the hostile student; wrong-schedule lists a wave's stages in reverse, which only 2.1-stage-order takes
    assert (rows["2.1-schedule"].attrs["data-passed"], rows["2.1-schedule"].attrs["data-graded"]) == ("4", "6")
    assert (rows["2.1-stage-order"].attrs["data-passed"], rows["2.1-stage-order"].attrs["data-graded"]) == ("3", "6")
    assert rows["4.1-peak-in-flight"].attrs["data-passed"] == "2"
    rates = [int(r.attrs["data-passed"]) / int(r.attrs["data-graded"]) for r in rows.values() if r.attrs["data-graded"] != "0"]
    assert rates == sorted(rates), "criteria are not sorted from the hardest"
    assert "2.3-speedup" in dom.find_all("p", **{"class": "note"})[0].text  # blocked for all: said once


@pytest.mark.slow  # grades the small class once (module fixture)
def test_the_near_copy_pair_and_the_students_to_look_at(graded, dom):
    pairs = {(e.attrs["data-a"], e.attrs["data-b"]) for e in dom.find_all("tr", **{"class": "pair"})}
    assert pairs == {("key", "near-copy")}
    pair_rows = dom.find_all("tr", **{"class": "pair"})
    assert {"pipeline.py", "tensor_parallel.py"} <= {row.find_all("code")[0].text for row in pair_rows}
    copied = "".join(row.text for row in dom.find_all("tr", **{"class": "regions"}))
    assert "yield [(wave - stage, stage)" in copied and "yield [(tick - stage, stage)" in copied  # both sides' code

    look_at = {row.find_all("a")[0].text: row for row in dom.find_all("tr") if "data-student" in row.attrs}
    assert set(look_at) == {"key", "near-copy", "wrong-schedule", "stubs", HOSTILE}  # stubs: 0 points
    kinds = lambda name: {b.attrs["data-kind"] for b in look_at[name].find_all("span")}  # noqa: E731
    assert kinds("wrong-schedule") == {"missing"} and "missing tensor_parallel.py" in look_at["wrong-schedule"].text
    assert kinds("key") == {"similar"} and "review" in kinds(HOSTILE) and kinds("stubs") == {"zero"}

    sections = {e.find_all("summary")[0].text.split(" · ")[0].strip(): e for e in dom.find_all("details", **{"class": "student"})}
    assert set(sections) == set(STUDENTS)
    schedule_failures = [g for r in dom.find_all("tr", **{"class": "groups"}) for g in r.find_all("div", **{"class": "group"})
                         if "wrong-schedule" in g.text and "wave" in g.text]
    assert schedule_failures, "2.1's failure message of wrong-schedule is not grouped under its criterion"


@pytest.mark.slow  # grades the small class once (module fixture)
def test_no_submission_markup_or_script_reaches_the_page(graded, dom):
    assert not dom.find_all("script") and not dom.find_all("img"), "markup from a submission became elements"
    assert all(CANARY not in element.attrs for element in dom.find_all()), "a submission's script ran"
    hostile = [e for e in dom.find_all("details", **{"class": "student"}) if HOSTILE in e.find_all("summary")[0].text]
    assert len(hostile) == 1, "the hostile student's name is not shown as text"
    text = hostile[0].text
    assert "<script>document.body.setAttribute" in text and "<b>bold</b>" in text  # the message, as text
    assert '<img src=x onerror="document.body' in text  # what it printed, as text
    assert "<script>alert('policy')</script>" in text  # the policy finding's code, as text
    assert all(e.tag != "b" or "bold" not in e.text for e in dom.find_all())


def test_the_browser_check_would_see_an_injected_script(tmp_path):
    """The control: in this Chromium mode a script in a page runs and its mark shows in the DOM."""
    page = tmp_path / "injected.html"
    page.write_text(f"<!DOCTYPE html><html><body><p>x</p><script>document.body.setAttribute('{CANARY}', '1')</script></body></html>")
    body = rendered(page).find_all("body")[0]
    assert body.attrs.get(CANARY) == "1"


@pytest.mark.slow  # grades the small class once (module fixture)
def test_screenshot_of_the_dashboard(graded):
    """Saved for people to look at: build/test-artifacts/dashboard.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    shot.unlink(missing_ok=True)
    chromium_run(graded["html"], f"--screenshot={shot}", "--window-size=1280,1900")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


@pytest.mark.slow  # grades the small class once (module fixture)
def test_dashboard_command_rebuilds_the_page_from_the_reports(graded, tmp_path):
    page = tmp_path / "again.html"
    result = subprocess.run(
        [sys.executable, "-m", "course", "dashboard", str(graded["reports"]), "--html", str(page), "--title", "HW <5>"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "6 students, 5 to look at, 1 similar pairs" in result.stdout
    text = page.read_text()
    assert "<title>HW &lt;5&gt;</title>" in text and 'data-a="key" data-b="near-copy"' in text


@pytest.mark.slow  # grades the small class once (module fixture)
def test_dashboard_command_names_bad_input(tmp_path, graded):
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "course", "dashboard", *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=60)
    missing = run(tmp_path / "nowhere", "--html", tmp_path / "x.html")
    assert missing.returncode == 2 and "nowhere is not a folder" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = run(tmp_path / "empty", "--html", tmp_path / "x.html")
    assert empty.returncode == 2 and "holds no reports" in empty.stderr
    broken = tmp_path / "broken"
    shutil.copytree(graded["reports"], broken)
    (broken / similarity.SIMILARITY_FILE).write_text(json.dumps({"schema": similarity.SCHEMA, "pairs": [{"a": "x"}]}))
    bad = run(broken, "--html", tmp_path / "x.html")
    assert bad.returncode == 2 and "pair 1: malformed" in bad.stderr and not (tmp_path / "x.html").exists()


def test_failure_messages_group_with_numbers_names_and_paths_masked():
    same = [
        "wave 2: expected submit(0) submit(1); got submit(1) submit(0)",
        "wave 7: expected submit(3) submit(4); got submit(4) submit(3)",
    ]
    assert dashboard.normalise(same[0]) == dashboard.normalise(same[1]) == "wave #: expected submit(#) submit(#); got submit(#) submit(#)"
    traceback = ("your code raised an exception:\nTraceback (most recent call last):\n  File \"/tmp/a/minitorch/pipeline.py\", "
                 "line 12, in forward\nNameError: name 'foo' is not defined")
    assert dashboard.normalise(traceback) == "your code raised an exception: NameError: name '…' is not defined"
    student_frames = 'your code raised an exception:\n  File "pipeline.py", line 50, in f\n    raise E("</b>")\nValueError: </b> 3'
    assert dashboard.normalise(student_frames) == "your code raised an exception: ValueError: </b> #"
    assert dashboard.normalise("cannot read /srv/class/alice/pipeline.py at 0x7f3a") == "cannot read <path> at 0x…"
    assert dashboard.normalise("") == "(no message)"


def test_histogram_bins_whole_points_and_keeps_the_top_score():
    bins = dashboard.histogram([0, 0, 21.5, 22, 9], 22)
    assert [(b["low"], b["high"]) for b in bins][:2] == [(0, 3), (3, 6)] and bins[-1]["high"] == 22
    assert [b["count"] for b in bins] == [2, 0, 0, 1, 0, 0, 0, 2]
    assert max(b["height"] for b in bins) == 1.0


def test_the_page_counts_the_courses_final_scores_and_shows_late_work(tmp_path):
    """Issue 28, item 5: the page showed raw totals ("4 full marks" counted a penalised student),
    disagreeing with the CSV and Canvas; it shows the final scores, the raw one beside them, and
    the late-work flags."""
    from course import outcomes

    reports = tmp_path / "reports"
    reports.mkdir()
    criteria = [{"id": "2.1-schedule", "problem": "2.1", "title": "t", "points": 10, "earned": 10, "status": "passed",
                 "message": "", "seconds": 0.1}]
    rows = []
    for name, final, adjustment, flags in (("ada", 10, "", []), ("bob", 8, "penalty 20%", ["late=2d", "late_penalty=20%"]),
                                           ("cy", 10, "", ["extension"]), ("dee", 10, "", ["late=1d", "late_days_used=1"])):
        (reports / f"{name}.json").write_text(json.dumps({"schema_version": 1, "submission": name, "complete": True,
                                                          "files": {"pipeline.py": "0" * 64, "tensor_parallel.py": "1" * 64},
                                                          "criteria": criteria}))
        rows.append(outcomes.StudentGrade(name, tmp_path, reports / f"{name}.json", score=10, max_score=10, final=final,
                                          adjustment=adjustment, reason="why" if flags else "", flags=flags))
    outcomes.save_rows(reports, rows)
    page = dashboard.write(reports, tmp_path / "class.html")
    assert (page["full"], page["late"], page["mean"]) == (3, 2, 9.5)
    reader = DomReader()
    reader.feed((tmp_path / "class.html").read_text())
    counts = {e.attrs["data-count"]: e.text.strip() for e in reader.root.find_all("b") if "data-count" in e.attrs}
    assert (counts["full"], counts["late"]) == ("3", "2")
    ranked = {row.find_all("a")[0].text: row for row in reader.root.find_all("tr", **{"class": "ranked"})}
    assert (ranked["bob"].attrs["data-score"], ranked["bob"].attrs["data-raw"]) == ("8", "10")
    assert list(ranked)[0] == "bob"  # lowest final score first
    assert "graded 10; penalty 20%" in ranked["bob"].text
    badges = {name: {b.text for b in row.find_all("span")} for name, row in ranked.items()}
    assert badges == {"ada": set(), "bob": {"2 days late"}, "cy": {"extension"}, "dee": {"1 day late", "1 late day used"}}
    summaries = {e.find_all("summary")[0].text.split(" · ")[0].strip(): e for e in reader.root.find_all("details", **{"class": "student"})}
    assert "Course score 8 (graded 10; penalty 20%): why" in summaries["bob"].text
