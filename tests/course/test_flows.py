"""One class through both flows, ``batch`` and Slurm's tasks + merge (here run in this
process, without a cluster): the same gradebook, the same similarity flags, a dashboard from
each; and that dashboard as a TA sees it, in headless Chromium at 420, 800 and 1,400 px.

A fake grader writes the reports (the real grader's runs are tested elsewhere), so the whole
module grades its class twice in a few seconds."""
import csv
import json
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from browser import ARTIFACTS, DomReader, chromium_run
from grading_helpers import answer_key_source

from course import batch, cli, cluster, gradebook, similarity

# Full marks (8) for everyone but "zero"; "bob"'s run had a criterion killed twice (needs review).
FAKE_GRADER = textwrap.dedent('''\
    import json, sys
    from pathlib import Path
    path, report = Path(sys.argv[1]), Path(sys.argv[3])
    earned = 0 if path.name == "zero" else 8
    criteria = [{"id": "2.1-schedule", "problem": "2.1", "title": "t", "points": 8, "earned": earned,
                 "status": "passed" if earned else "failed", "message": "" if earned else "wave 0: wrong", "seconds": 0.1}]
    reasons = ["2.1-schedule: the child was killed by signal 9 twice"] if path.name == "bob" else []
    report.write_text(json.dumps({"schema_version": 1, "submission": str(path), "complete": True,
        "files": {"pipeline.py": "0" * 64, "tensor_parallel.py": "1" * 64}, "environment": {}, "score": earned,
        "max_score": 8, "criteria": criteria, "needs_review": bool(reasons), "review_reasons": reasons}))
    ''')
WIDTHS = (420, 800, 1400)


def make_class(folder: Path) -> None:
    """key and its copy (a .tar.gz), bob and zero with their own code."""
    key = {name: answer_key_source(name) for name in ("pipeline.py", "tensor_parallel.py")}
    for name, files in (("key", key), ("bob", {"pipeline.py": "def clock_cycles(m, n):\n    return iter(())\n"}),
                        ("zero", {"pipeline.py": "x = 1\n"})):
        (folder / name).mkdir(parents=True)
        for file, text in files.items():
            (folder / name / file).write_text(text)
    with tarfile.open(folder / "copy.tar.gz", "w:gz") as archive:
        for file in key:
            archive.add(folder / "key" / file, arcname=file)


def read_csv(path: Path) -> dict[str, dict]:
    with open(path, newline="") as handle:
        return {row["student"]: {**row, "report": Path(row["report"]).name} for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def flows(tmp_path_factory):
    root = tmp_path_factory.mktemp("flows")
    make_class(root / "class")
    (root / "fake_grader.py").write_text(FAKE_GRADER)
    fake = [sys.executable, str(root / "fake_grader.py")]
    batch.run_batch(root / "class", root / "batch" / "grades.csv", jobs=2, grader_command=fake, progress=print,
                    options=gradebook.Options(similarity_threshold=similarity.DEFAULT_THRESHOLD, html=root / "batch.html",
                                              feedback=root / "feedback"))
    slurm_csv = root / "slurm" / "grades.csv"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADER_SLOT_LOCKS", str(root / "locks"))
        assert cli.main(["slurm", "write", str(root / "class"), "--csv", str(slurm_csv), "--per-task", "2",
                         "--html", str(root / "slurm.html")]) == 0
        plan_path = cluster.slurm_folder(slurm_csv) / "cpu" / "plan.json"
        plan = json.loads(plan_path.read_text())
        plan_path.write_text(json.dumps({**plan, "grader_command": fake}))
        for task in range(plan["tasks"]):
            assert cluster.run_task(plan_path, task, print) == 0
        cluster.merge(slurm_csv, gradebook.Options(), progress=print)
    return root


def test_slurm_and_batch_write_the_same_gradebook_similarity_and_dashboard(flows):
    by_batch, by_slurm = read_csv(flows / "batch" / "grades.csv"), read_csv(flows / "slurm" / "grades.csv")
    assert by_slurm == by_batch
    assert by_batch["key"]["flags"] == "similar_to=copy;needs_review" and by_batch["copy"]["flags"] == "similar_to=key;needs_review"
    assert by_batch["bob"]["flags"] == "needs_review"  # the report asked for a person: the CSV says so
    found = {kind: json.loads((gradebook.reports_folder(flows / kind / "grades.csv") / similarity.SIMILARITY_FILE).read_text())
             for kind in ("batch", "slurm")}
    assert found["slurm"]["pairs"] == found["batch"]["pairs"]
    assert [{p["a"], p["b"]} for p in found["slurm"]["pairs"]] == [{"copy", "key"}]
    for page in ("batch.html", "slurm.html"):
        text = (flows / page).read_text()
        assert 'data-count="pairs">1<' in text and 'data-count="look-at">4<' in text, page


def page_dom(page: Path) -> DomReader:
    reader = DomReader()
    reader.feed(chromium_run(page, "--dump-dom"))
    return reader


def test_the_dashboard_names_archives_as_the_csv_and_lists_whom_to_look_at(flows):
    root = page_dom(flows / "batch.html").root
    look_at = {row.find_all("a")[0].text: row for row in root.find_all("tr") if "data-student" in row.attrs}
    assert set(look_at) == {"key", "copy", "bob", "zero"}  # not copy.tar.gz: the CSV's name, with its pair
    kinds = {name: {b.attrs["data-kind"] for b in row.find_all("span")} for name, row in look_at.items()}
    assert kinds["copy"] == {"similar"} and "zero" in kinds["zero"] and "review" in kinds["bob"]
    assert "killed by signal 9" in look_at["bob"].text
    assert [row.find_all("a")[0].text for row in root.find_all("tr", **{"class": "ranked"})][0] == "zero"  # lowest first
    pair = root.find_all("tr", **{"class": "pair"})[0]
    assert {a.attrs["href"] for a in pair.find_all("a")} == {f"#{look_at[n].attrs['data-student']}" for n in ("key", "copy")}


PROBE = """<!DOCTYPE html><html><body><script>
// Opens the dashboard at each width in a frame, every <details> open, and writes into the DOM how
// wide the page is and every element that runs past the window or past the box that scrolls it
// (a wide table's; code keeps its lines and scrolls on purpose).
const widths = %s, results = [];
function clipped(doc, width) {
  const found = [];
  for (const element of doc.querySelectorAll("main *")) {
    if (element.closest("pre.code, svg")) continue;
    const box = element.getBoundingClientRect();
    if (box.width === 0) continue;
    const scroller = element.parentElement.closest(".wide, pre");
    const limit = scroller ? Math.min(width, scroller.getBoundingClientRect().right) : width;
    if (box.right > limit + 1) found.push(element.tagName + "." + element.className + ": " + element.textContent.slice(0, 60));
  }
  return found;
}
function next(i) {
  if (i === widths.length) { document.body.setAttribute("data-done", JSON.stringify(results)); return; }
  const frame = document.createElement("iframe");
  frame.style.width = widths[i] + "px"; frame.style.height = "900px"; frame.style.border = "0";
  frame.onload = () => {
    const doc = frame.contentDocument, table = doc.getElementById("problems");
    for (const details of doc.querySelectorAll("details")) details.open = true;
    const box = table.getBoundingClientRect();
    results.push({width: widths[i], page: doc.documentElement.scrollWidth, table: box.width, right: box.right,
                  clipped: clipped(doc, doc.documentElement.clientWidth)});
    frame.remove(); next(i + 1);
  };
  frame.src = %s; document.body.appendChild(frame);
}
next(0);
</script></body></html>"""


def fits(page: Path, probe: Path, name: str) -> None:
    """At 420, 800 and 1,400 px nothing of ``page`` runs off the window or is cut at the edge of
    the box that scrolls it, and the per-problem table shows within it; screenshots saved as
    ``<name>-<width>px.png`` for people to look at."""
    probe.write_text(PROBE % (json.dumps(WIDTHS), json.dumps(page.as_uri())))
    reader = DomReader()
    reader.feed(chromium_run(probe, "--allow-file-access-from-files", "--virtual-time-budget=10000", "--dump-dom"))
    results = json.loads(reader.root.find_all("body")[0].attrs["data-done"])
    assert [measured["width"] for measured in results] == list(WIDTHS)
    for measured in results:
        width = measured["width"]
        assert measured["page"] <= width, measured  # no horizontal scroll of the whole page
        assert 0 < measured["table"] and measured["right"] <= width, measured
        assert measured["clipped"] == [], measured
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        shot = ARTIFACTS / f"{name}-{width}px.png"
        shot.unlink(missing_ok=True)
        chromium_run(page, f"--screenshot={shot}", f"--window-size={width},1600")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # four Chromium runs
def test_the_dashboard_fits_narrow_windows(flows, tmp_path):
    fits(flows / "batch.html", tmp_path / "probe.html", "dashboard")


LONG_MESSAGE = (  # spaces, a path, and words longer than a phone's screen
    "wave 2: expected submit(0) submit(1) receive(0) submit(2) receive(1) receive(2); got submit(0) receive(0) "
    "submit(1) receive(1)\n  File \"/srv/courses/cs999/hw5/submissions/lovelaceada_LATE_101/minitorch/pipeline.py\", "
    "line 123, in forward_all_the_microbatches_through_every_stage\nAssertionError: expected_shape=torch.Size([16,32,64])"
    "_got_torch.Size([16,64,32])_with_dtype_torch.float32_on_device_cpu_after_the_second_wave")


@pytest.mark.slow  # four Chromium runs
def test_long_messages_names_and_reasons_wrap_at_every_width(tmp_path):
    """Issue 28, item 9: at 420 px the dashboard cut long messages at the right edge."""
    from course import dashboard, outcomes

    reports = tmp_path / "reports"
    reports.mkdir()
    names = ("lovelaceada_with_a_folder_name_longer_than_any_phone_is_wide_12345", "bob")
    for name in names:
        criteria = [{"id": "2.1-a-criterion-id-longer-than-most", "problem": "2.1", "title": "clock_cycles " * 12,
                     "points": 3, "earned": 0, "status": "failed", "message": LONG_MESSAGE, "seconds": 0.5,
                     "output": "printed_without_a_single_space_" * 12}]
        (reports / f"{name}.json").write_text(json.dumps({
            "schema_version": 1, "submission": name, "complete": True, "files": {"pipeline.py": "0" * 64},
            "criteria": criteria, "notes": ["pipeline (1).py was graded as pipeline.py; " + "a_note_without_spaces_" * 12],
            "review_reasons": ["2.1: killed by signal 9 twice; /a/long/path" * 8],
            "policy_findings": [{"file": "pipeline.py", "line": 3, "name": "subprocess",
                                 "code": "subprocess.run(['rm','-rf','/a/really/long/path/that/never/wraps/at/a/space'])"}]}))
    outcomes.save_rows(reports, [outcomes.StudentGrade(
        name, tmp_path, reports / f"{name}.json", score=0, final=0, adjustment="penalty 30%", reason="late " * 20,
        flags=["late=3d", "extension", "late_days_used=1", "needs_review", "unreadable_file:" + "x" * 80]) for name in names])
    dashboard.write(reports, tmp_path / "long.html")
    fits(tmp_path / "long.html", tmp_path / "probe.html", "dashboard-long")


def test_each_students_feedback_is_a_file_of_their_own(flows):
    files = sorted(p.name for p in (flows / "feedback").iterdir())
    assert files == ["bob.txt", "copy.txt", "key.txt", "zero.txt"]
    zero = (flows / "feedback" / "zero.txt").read_text()
    total = next(line for line in zero.splitlines() if line.startswith("Total"))
    assert zero.startswith("Feedback for zero\n\n") and total.split()[1] == "0/8" and "wave 0: wrong" in zero
    key = (flows / "feedback" / "key.txt").read_text()
    assert "8/8" in key and "What went wrong" not in key
    assert not any(word in key.lower() for word in ("similar", "review", "flag"))  # the TA's business, not the student's


def test_every_reason_the_gradebook_flags_reaches_to_look_at(tmp_path):
    """A row needs review for a reason only the gradebook knows (a Slurm task that died and left
    no report; a GPU run that timed out; a report asking for review without saying
    needs_review): the CSV and the dashboard's "to look at" both say so (issue 23, item 2)."""
    from course import dashboard, outcomes

    reports = tmp_path / "reports"
    reports.mkdir()
    report = {"schema_version": 1, "submission": "ada", "complete": True, "files": {"pipeline.py": "0" * 64,
              "tensor_parallel.py": "1" * 64}, "criteria": [{"id": "2.1-schedule", "problem": "2.1", "title": "t",
              "points": 8, "earned": 8, "status": "passed", "message": "", "seconds": 0.1}]}
    (reports / "ada.json").write_text(json.dumps(report))
    (reports / "cy.json").write_text(json.dumps({**report, "review_reasons": ["2.1-schedule: killed by signal 9 twice"]}))
    rows = [outcomes.StudentGrade("ada", tmp_path, reports / "ada.json", flags=["gpu_timeout", "needs_review"]),
            outcomes.StudentGrade("bob", tmp_path, reports / "bob.json", status="error", flags=["task_died", "needs_review"])]
    cy = outcomes.StudentGrade("cy", tmp_path, reports / "cy.json")
    outcomes.apply_report(cy, json.loads((reports / "cy.json").read_text()))
    assert "needs_review" in cy.flags  # review reasons without the needs_review key still flag the row
    outcomes.save_rows(reports, [*rows, cy])
    look_at = {s.name: s.reasons for s in dashboard.summarise(reports)["look_at"]}
    assert ("review", "gradebook: gpu_timeout") in look_at["ada"]
    assert ("review", "gradebook: task_died") in look_at["bob"] and look_at["bob"][0][0] == "error"
    assert any("killed by signal 9" in text for _, text in look_at["cy"])
