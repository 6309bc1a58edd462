"""One class through both flows, ``batch`` and Slurm's tasks + merge (here run in this
process, without a cluster): the same gradebook, the same similarity flags, a dashboard from
each; and that dashboard as a TA sees it, in headless Chromium at 420, 800 and 1,400 px.
A fake grader writes those reports, so that class is graded twice in a few seconds.

Then a TA's run of a class of 8 from Canvas's download with the real grader (issue 28's "done
when"): a perfect student, a wrong clock_cycles, only one file, a zip, browser renames, a late
submission, an extension and a copied pair get the right grades, and the dashboard shows the
final scores and the late flags at every width without clipping."""
import csv
import io
import json
import re
import sys
import tarfile
import textwrap
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from browser import ARTIFACTS, DomReader, chromium_run
from grading_helpers import REPO, answer_key_source, stub_files

from course import batch, cli, cluster, gradebook, similarity
from grader.rubric import load_rubric

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
    """key and its copy (a .tar.gz), bob and zero with their own code; bob's folder says when
    he submitted, as Gradescope's submission_metadata.json does (30 hours late: see FLOWS_LATE)."""
    key = {name: answer_key_source(name) for name in ("pipeline.py", "tensor_parallel.py")}
    metadata = json.dumps({"id": 7, "created_at": "2025-03-16T05:59:00.000000-05:00"})
    for name, files in (("key", key), ("bob", {"pipeline.py": "def clock_cycles(m, n):\n    return iter(())\n",
                                               "submission_metadata.json": metadata}),
                        ("zero", {"pipeline.py": "x = 1\n"})):
        (folder / name).mkdir(parents=True)
        for file, text in files.items():
            (folder / name / file).write_text(text)
    with tarfile.open(folder / "copy.tar.gz", "w:gz") as archive:
        for file in key:
            archive.add(folder / "key" / file, arcname=file)
    (folder.parent / "late.toml").write_text(FLOWS_LATE)


FLOWS_LATE = """\
due = 2025-03-14T23:59:00-05:00
penalty_per_day = 10

[submitted]
key = 2025-03-14T10:00:00-05:00
copy = 2025-03-14T11:00:00-05:00
zero = 2025-03-13T09:00:00-05:00
"""


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
                                              feedback=root / "feedback", late_policy=root / "late.toml"))
    slurm_csv = root / "slurm" / "grades.csv"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADER_SLOT_LOCKS", str(root / "locks"))
        assert cli.main(["slurm", "write", str(root / "class"), "--csv", str(slurm_csv), "--per-task", "2",
                         "--html", str(root / "slurm.html"), "--late-policy", str(root / "late.toml")]) == 0
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
    assert by_batch["bob"]["flags"] == "needs_review;late=2d;late_penalty=20%"  # the report asked for a person: the CSV says so
    assert (by_batch["bob"]["total"], by_batch["bob"]["final"]) == ("8", "6.4")  # late by Gradescope's created_at
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


def fits(page: Path, probe: Path, name: str, height: int = 1600) -> None:
    """At 420, 800 and 1,400 px nothing of ``page`` runs off the window or is cut at the edge of
    the box that scrolls it, and the per-problem table shows within it; screenshots ``height``
    px tall saved as ``<name>-<width>px.png`` for people to look at."""
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
        chromium_run(page, f"--screenshot={shot}", f"--window-size={width},{height}")
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


# ---------------------------------------------------------------- a TA's run of a fake class of 8 (issue 28, done when)

# Each student's own code for the graded parts (Problems 2.1 and 2.2), written differently, so
# that the similarity pass has exactly one pair to find: the copier's.
# Each admits what the contract admits (a Python or NumPy integer, not a bool).
CLOCK_CYCLES = {
    "while": '''\
if not isinstance(num_stages, numbers.Integral) or not isinstance(num_microbatches, numbers.Integral) \\
        or isinstance(num_stages, bool) or isinstance(num_microbatches, bool):
    raise ValueError("sizes must be ints")
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
    "nested": '''\
for value in (num_microbatches, num_stages):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("clock_cycles takes ints")
if num_microbatches < 0 or num_stages < 1:
    raise ValueError("M must be >= 0 and K >= 1")
total = num_microbatches + num_stages - 1 if num_microbatches else 0
for clock in range(total):
    wave = []
    for stage in range(num_stages):
        mb = clock - stage
        if 0 <= mb < num_microbatches:
            wave.append((mb, stage))
    yield wave''',
    "counted": '''\
def check(x, name, low):
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < low:
        raise ValueError(f"{name}={x!r}")
check(num_microbatches, "M", 0)
check(num_stages, "K", 1)
k = done = 0
while done < num_microbatches * num_stages:
    pairs = [(k - s, s) for s in range(min(k, num_stages - 1) + 1) if k - s < num_microbatches]
    done += len(pairs)
    k += 1
    yield pairs''',
    "progress": '''\
if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (num_microbatches, num_stages)):
    raise ValueError("expected integers")
if num_stages <= 0:
    raise ValueError("K must be positive")
if num_microbatches < 0:
    raise ValueError("M cannot be negative")
next_mb = [0] * num_stages
while next_mb[-1] < num_microbatches:
    ready = []
    for stage in range(num_stages):
        m = next_mb[stage]
        if m < num_microbatches and (stage == 0 or next_mb[stage - 1] > m):
            ready.append((m, stage))
    for m, stage in ready:
        next_mb[stage] += 1
    yield ready''',
    "diagonal": '''\
for v in (num_microbatches, num_stages):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ValueError("integers only")
if num_microbatches < 0 or num_stages < 1:
    raise ValueError("bad sizes")
num_microbatches, num_stages = int(num_microbatches), int(num_stages)
clock = 0
while True:
    wave = []
    stage = max(0, clock - num_microbatches + 1)
    while stage < num_stages and stage <= clock:
        wave.append((clock - stage, stage))
        stage += 1
    if not wave:
        return
    yield wave
    clock += 1''',
    "one-wave-short": '''\
if isinstance(num_stages, bool) or isinstance(num_microbatches, bool):
    raise ValueError("no bools")
if not (isinstance(num_stages, int) and isinstance(num_microbatches, int)):
    raise ValueError("ints please")
if num_stages < 1 or num_microbatches < 0:
    raise ValueError("out of range")
for tick in range(num_microbatches + num_stages - 2):
    yield sorted(((tick - s, s) for s in range(num_stages) if 0 <= tick - s < num_microbatches), key=lambda p: p[1])''',
}
PIPE_FORWARD = '''\
pieces = list(torch.split(x, self.split_size))
pending_error = None
for tick in clock_cycles(len(pieces), len(self.stages)):
    index = 0
    while index < len(tick):
        mb, st = tick[index]
        module, device, tensor = self.stages[st], self.devices[st], pieces[mb]
        def work(module=module, device=device, tensor=tensor):
            return module(tensor.to(device, non_blocking=True))
        self.workers.submit(st, work)
        index += 1
    index = 0
    while index < len(tick):
        mb, st = tick[index]
        try:
            pieces[mb] = self.workers.receive(st)
        except BaseException as problem:
            if pending_error is None:
                pending_error = problem
        index += 1
    if pending_error is not None:
        raise pending_error
return torch.cat(pieces, dim=0)'''


def fill(stub: str, bodies: dict[str, str]) -> str:
    """``stub`` with the ``raise NotImplementedError("Problem N.M: ...")`` of each problem in
    ``bodies`` replaced by that code, indented like the line it replaces."""
    def replace(match: re.Match) -> str:
        body = bodies.get(match["problem"])
        return match[0] if body is None else "\n".join(match["indent"] + line for line in body.splitlines())

    return re.sub(r'^(?P<indent>[ \t]*)raise NotImplementedError\("Problem (?P<problem>\d\.\d): [^"]*"\)$', replace, stub,
                  flags=re.M)


def near_copy(source: str) -> str:
    """The answer key as a copier hands it in: names changed, comments gone, lines re-spaced."""
    for old, new in (("microbatches", "chunks"), ("wave", "tick"), ("first_error", "err"), ("_run_stage", "_go")):
        source = re.sub(rf"\b{old}\b", new, source)
    return "\n\n".join(line for line in source.splitlines() if not line.strip().startswith("#")) + "\n"


def zipped(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


DUE = datetime(2025, 3, 14, 23, 59, tzinfo=timezone(timedelta(hours=-5)))
LATE_POLICY = """\
due = 2025-03-14T23:59:00-05:00
grace_minutes = 10
penalty_per_day = 10
canvas_submissions = "canvas-submissions.json"

[extensions]
extendedeve_207 = { days = 3, reason = "medical note" }
"""
GRADED = ("2.1", "2.2")


def make_course(root: Path) -> dict[str, tuple]:
    """The class as Canvas hands it over: its Download Submissions zip, the gradebook export
    (roster), the submission times from Canvas's API, a late policy and a rubric of Problems 2.1
    and 2.2. Returns ``{student: (Canvas id, hours submitted after the due date)}``."""
    stubs = stub_files()
    key = {name: answer_key_source(name) for name in stubs}
    own = {name: {"pipeline.py": fill(stubs["pipeline.py"], {"2.1": CLOCK_CYCLES[name]}),
                  "tensor_parallel.py": stubs["tensor_parallel.py"]} for name in CLOCK_CYCLES}
    uploads = {  # (Canvas name, user id, marked late by Canvas, hours after the due date): files as uploaded
        ("perfectpat", 201, False, -20): key,
        ("wrongwill", 202, False, -20): {"pipeline.py": fill(stubs["pipeline.py"], {"2.1": CLOCK_CYCLES["one-wave-short"],
                                                                                     "2.2": PIPE_FORWARD}),
                                         "tensor_parallel.py": stubs["tensor_parallel.py"]},
        ("onefileolga", 203, False, -20): {"pipeline.py": own["while"]["pipeline.py"]},
        ("zipzoe", 204, False, -20): {"hw5.zip": zipped(own["nested"])},
        ("renamerrex", 205, False, -20): {"pipeline (1).py": own["counted"]["pipeline.py"],
                                          "tensor_parallel (2).py": stubs["tensor_parallel.py"]},
        ("latelou", 206, True, 36): own["progress"],
        ("extendedeve", 207, True, 50): own["diagonal"],
        ("copiercy", 208, False, -2): {name: near_copy(text) for name, text in key.items()},
    }
    attachment = 9000
    with zipfile.ZipFile(root / "submissions.zip", "w") as archive:
        for (name, user, late, _), files in uploads.items():
            for original, content in files.items():
                attachment += 1
                archive.writestr(f"{name}{'_LATE' if late else ''}_{user}_{attachment}_{original}", content)
    (root / "canvas-submissions.json").write_text(json.dumps(
        [{"user_id": user, "submitted_at": (DUE + timedelta(hours=hours)).isoformat()} for (_, user, _, hours) in uploads]))
    (root / "late.toml").write_text(LATE_POLICY)
    (root / "roster.csv").write_text("Student,ID,SIS User ID,SIS Login ID,Section,HW5 (77)\n    Points Possible,,,,,27\n" + "".join(
        f'"{name.title()}",{user},s{user},{name},A,\n' for (name, user, _, _) in uploads))
    text = (REPO / "grader" / "rubric.toml").read_text()
    others = sorted(set(re.findall(r'^problem = "([\d.]+)"', text, re.M)) - set(GRADED))
    (root / "rubric.toml").write_text(re.sub(r"^disabled_problems = .*$", f"disabled_problems = {json.dumps(others)}",
                                             text, count=1, flags=re.M))
    return {f"{name}_{user}": (str(user), hours) for (name, user, _, hours) in uploads}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The class of 8 run by a TA from the command line, with the real grader."""
    root = tmp_path_factory.mktemp("course")
    students = make_course(root)
    assert cli.main([
        "batch", str(root / "submissions.zip"), "--csv", str(root / "grades.csv"), "--jobs", "2", "--timeout", "600",
        "--rubric", str(root / "rubric.toml"), "--late-policy", str(root / "late.toml"),
        "--canvas", str(root / "canvas.csv"), "--assignment", "HW5 (77)", "--roster", str(root / "roster.csv"),
        "--html", str(root / "class.html"), "--feedback", str(root / "feedback"),
    ]) == 0
    with open(root / "grades.csv", newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    reports = {name: json.loads((gradebook.reports_folder(root / "grades.csv") / f"{name}.json").read_text())
               for name in students}
    return {"root": root, "students": students, "rows": rows, "reports": reports}


CRITERIA_OF = {problem: sum(c.problem == problem for c in load_rubric().active()) for problem in ("2.1", "2.2")}


def statuses(report: dict, problem: str) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["criteria"] if c["problem"] == problem}


@pytest.mark.slow  # the real grader on 8 students (Problems 2.1 and 2.2), then Chromium
@pytest.mark.timeout(1500)
def test_a_ta_run_of_a_class_of_eight_gives_the_right_grades(course):
    rows, reports = course["rows"], course["reports"]
    assert set(rows) == set(course["students"])
    full_21 = {"perfectpat_201", "copiercy_208", "wrongwill_202"}  # their own Pipe (2.2) is right
    for name, report in reports.items():
        two_one, two_two = statuses(report, "2.1"), statuses(report, "2.2")
        assert len(two_one) == CRITERIA_OF["2.1"] and len(two_two) == CRITERIA_OF["2.2"], name
        if name == "wrongwill_202":  # a wrong clock_cycles costs 2.1 only: 2.2 is judged with the grader's
            assert two_one["2.1-schedule"] == "failed" and set(two_two.values()) == {"passed"}, report["criteria"]
            assert rows[name]["2.2"] == "20" and float(rows[name]["2.1"]) < 7
        else:
            assert set(two_one.values()) == {"passed"}, (name, report["criteria"])
            assert set(two_two.values()) == ({"passed"} if name in full_21 else {"failed"}), (name, report["criteria"])
        assert float(rows[name]["total"]) == sum(c["earned"] for c in report["criteria"]), name
    assert rows["perfectpat_201"]["total"] == rows["copiercy_208"]["total"] == "27"
    assert rows["onefileolga_203"]["total"] == "7" and "missing:tensor_parallel.py" in rows["onefileolga_203"]["flags"]
    assert rows["zipzoe_204"]["total"] == "7"  # the uploaded zip was graded
    assert any("pipeline (1).py" in note for note in reports["renamerrex_205"]["notes"])  # graded, and said so
    flags = {name: set(row["flags"].split(";")) for name, row in rows.items()}
    assert {f for f in flags["perfectpat_201"] if f.startswith("similar_to=")} == {"similar_to=copiercy_208"}
    assert {n for n, f in flags.items() if any(x.startswith("similar_to=") for x in f)} == {"perfectpat_201", "copiercy_208"}
    # late work: 36 hours late is 2 days at 10% a day; the extension's 3 days cover 50 hours
    assert (rows["latelou_206"]["adjustment"], rows["latelou_206"]["final"]) == ("penalty 20%", "5.6")
    assert {"late=2d", "late_penalty=20%"} <= flags["latelou_206"] and "late" not in flags["latelou_206"]
    assert (rows["extendedeve_207"]["adjustment"], rows["extendedeve_207"]["final"]) == ("", "7")
    assert "extension" in flags["extendedeve_207"] and not any(f.startswith("late") for f in flags["extendedeve_207"])
    for name in set(rows) - {"latelou_206"}:
        assert rows[name]["final"] == rows[name]["total"], name
    with open(course["root"] / "canvas.csv", newline="") as handle:
        canvas_scores = {row["ID"]: row["HW5 (77)"] for row in csv.DictReader(handle)}
    assert canvas_scores == {user: rows[name]["final"] for name, (user, _) in course["students"].items()}
    late_feedback = (course["root"] / "feedback" / "latelou_206.txt").read_text()
    assert "Score recorded by the course: 5.6 (graded 7; penalty 20%: submitted 2025-03-16 11:59" in late_feedback
    assert "extension to 2025-03-17 23:59 (UTC-0500) (medical note)" in (
        course["root"] / "feedback" / "extendedeve_207.txt").read_text()


@pytest.mark.slow  # the real grader on 8 students (module fixture), then Chromium
@pytest.mark.timeout(1500)
def test_the_classs_dashboard_shows_final_scores_and_late_flags_at_every_width(course, tmp_path):
    page = course["root"] / "class.html"
    fits(page, tmp_path / "probe.html", "dashboard-class-of-8", height=8000)  # the whole page, students last
    reader = DomReader()
    reader.feed(chromium_run(page, "--dump-dom"))
    ranked = {row.find_all("a")[0].text: row for row in reader.root.find_all("tr", **{"class": "ranked"})}
    late = ranked["latelou_206"]
    assert (late.attrs["data-score"], late.attrs["data-raw"]) == ("5.6", "7")
    assert {b.text for b in late.find_all("span")} == {"2 days late"}
    assert {b.text for b in ranked["extendedeve_207"].find_all("span")} == {"extension"}
    counts = {e.attrs["data-count"]: e.text.strip() for e in reader.root.find_all("b") if "data-count" in e.attrs}
    assert (counts["full"], counts["late"], counts["pairs"]) == ("2", "1", "1")  # perfect and the copier: 27 of 27
