"""Every entry of tests/catalogue/ (a wrong or hostile submission) loses exactly what it says.

An entry is a small TOML file: ``file`` (the student file it changes), one or more
``[[replace]]`` edits of the answer key (``old`` must occur exactly once) or a whole
``source``, ``lose`` (criteria it must not pass; every other graded criterion must pass),
and optionally ``only`` (criteria or problems to grade, default Problem 2.2), ``timeout``,
``expect_status`` (criterion -> status, default ``failed`` for lost ones) and
``expect_message`` (criterion -> text its message must contain, or a list of texts of which
it must contain one: where the mistake's outcome depends on thread timing, each outcome the
grader can honestly report).

Hostile entries may also give ``[[extra_file]]`` tables (``name``, ``content``: more files in
the submission folder, such as a conftest.py), ``settings`` (rubric ``[grader]`` values to
use, e.g. a low ``max_processes`` for a fork bomb), ``expect_review`` (default false: whether
the report must say "needs review"), ``expect_policy`` (entries of the policy scan that must be
found), ``expect_note`` (text some report note must contain), ``expect_gone`` (paths that
must not exist after grading, e.g. files the submission wrote into /tmp) and
``requires_root`` (skip when the tests do not run as root: the defence needs it). The text
``@RUN_TOKEN@`` in a source or a path is replaced by a token fresh for each test run.

Upload entries give ``archive`` (``"zip"``, ``"tar.gz"`` or ``"tgz"``): the submission is then
that archive instead of a folder, the student file stored as ``prefix`` + its name (a prefix
such as ``'hw5\\minitorch\\'`` is what a Windows zip holds) and each ``[[extra_file]]`` under
its ``name`` as written (``__MACOSX/._pipeline.py``, ``../evil.py``); an extra file with ``link``
instead of ``content`` is a symbolic link to that target.

Every entry is graded like the command line does it, writing the JSON and Gradescope reports
after every criterion; afterwards both must still be the parent's, complete, consistent
and small (a hostile child must not have changed or flooded them), the terminal summary and
the Gradescope texts must hold no control characters but newlines and tabs, no message shows
the grader's internals, and no process the child started may be left.

The last tests run the public tests of the student kit on a few entries: the tests marked with
a criterion the entry loses must fail there too (public parity), and on some, no test of another
criterion may fail (it would blame what the grader keeps).
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from grading_helpers import answer_key_source, grade_folder, leftover_processes, write_submission

from grader import report as reports
from grader.layout import REPOSITORY
from grader.protocol import write_json_report
from grader.rubric import load_rubric

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

CATALOGUE = Path(__file__).resolve().parent
ENTRY_KEYS = {
    "description", "file", "replace", "source", "lose", "only", "timeout", "expect_status", "expect_message",
    "extra_file", "settings", "expect_review", "expect_policy", "expect_note", "requires_root", "expect_gone",
    "archive", "prefix",
}
ARCHIVE_MODES = {"zip": None, "tar.gz": "w:gz", "tgz": "w:gz"}
BOUND_SECONDS = 60  # any entry, hostile ones included, is graded within this
REPORT_BYTES = 1_000_000  # any entry's report.json and results.json stay below this
RUN_TOKEN = "@RUN_TOKEN@"
# An entry grades Problem 2.2 unless it says otherwise: a 2.2 check that fails with the student's
# clock_cycles runs again with the grader's (fallback) and no 2.1 or 2.4 check runs a Pipe, so a
# mistake in one part cannot cost another (2.1 and 2.4 entries say `only`; 2.3 needs GPUs).
# Grading fewer criteria keeps the catalogue fast.
DEFAULT_ONLY = ["2.2"]
# Problem 3's criteria run the grader's own pieces in place of the other sub-problems' where the
# student's own fail (the fallback; grader/checks/problem3/pieces*.py). For each sub-problem, at least one entry with a mistake in it grades
# all of Problem 3: the proof that its mistake costs no other sub-problem's criteria. The other
# entries of that sub-problem may grade less (test_each_tensor_parallel_piece_is_graded_against_all_of_problem_3).
TP_PIECES = ("3.1", "3.2", "3.3", "3.4", "3.5")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# A student's message never shows the grader's modules or files (grader.checks..., .../grader/...).
GRADER_INTERNALS = re.compile(r"\bgrader\.(checks|child|harness|grading|protocol)\b|[/\\]grader[/\\]")


def load_entry(path: Path) -> dict:
    entry = tomllib.loads(path.read_text())
    unknown = set(entry) - ENTRY_KEYS
    assert not unknown, f"{path.name}: unknown keys {sorted(unknown)}"
    if "file" in entry:
        assert ("replace" in entry) != ("source" in entry), f"{path.name}: give either [[replace]] edits or a whole source"
    return entry


def build_source(entry: dict, name: str) -> str:
    if "source" in entry:
        return entry["source"]
    source = answer_key_source(entry["file"])
    for number, edit in enumerate(entry["replace"], start=1):
        count = source.count(edit["old"])
        assert count == 1, f"{name}: [[replace]] #{number}: `old` occurs {count} times in the answer key, expected exactly once"
        source = source.replace(edit["old"], edit["new"])
    return source


def submission_files(entry: dict, name: str, token: str = "") -> dict[str, str]:
    files = {} if entry.get("file") is None else {entry["file"]: build_source(entry, name).replace(RUN_TOKEN, token)}
    for extra in entry.get("extra_file", []):
        files[extra["name"]] = extra["content"]
    return files


def pack(entry: dict, name: str, out: Path) -> Path:
    """The entry's submission as an archive of kind ``entry["archive"]``, as a student's tool writes it."""
    members = [(entry.get("prefix", "") + entry["file"], build_source(entry, name), None)] if entry.get("file") else []
    members += [(extra["name"], extra.get("content", ""), extra.get("link")) for extra in entry.get("extra_file", [])]
    path = out / f"submission.{entry['archive']}"
    if entry["archive"] == "zip":
        with zipfile.ZipFile(path, "w") as archive:
            for member, content, link in members:
                info = zipfile.ZipInfo(member)
                info.external_attr = ((stat.S_IFLNK | 0o777) if link else (stat.S_IFREG | 0o644)) << 16
                archive.writestr(info, link or content)
        return path
    with tarfile.open(path, ARCHIVE_MODES[entry["archive"]]) as archive:
        for member, content, link in members:
            info = tarfile.TarInfo(member)
            data = content.encode()
            if link:
                info.type, info.linkname, data = tarfile.SYMTYPE, link, b""
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def grade_like_the_cli(folder: Path, entry: dict, out: Path):
    """Grade ``folder`` writing report.json after every criterion and results.json at the end."""
    rubric = load_rubric()
    if entry.get("settings"):
        rubric = dataclasses.replace(rubric, settings=dataclasses.replace(rubric.settings, **entry["settings"]))
    json_path, gradescope_path = out / "report.json", out / "results.json"
    started = time.monotonic()
    report = grade_folder(folder, only=entry.get("only", DEFAULT_ONLY), timeout=entry.get("timeout"), rubric=rubric,
                          on_result=lambda report, result: write_json_report(report, json_path))
    write_json_report(report, json_path)
    reports.write_gradescope(report, rubric, time.monotonic() - started, gradescope_path)
    return report, json_path, gradescope_path


def check_reports(report, json_path: Path, gradescope_path: Path, wait: bool) -> None:
    """Both files are the parent's: parseable, complete, small, and saying what the report says;
    what a person reads holds no control characters."""
    if wait:  # a process the submission left behind would have had time to change them
        time.sleep(0.3)
    for path in (json_path, gradescope_path):
        assert path.stat().st_size < REPORT_BYTES, f"{path.name} is {path.stat().st_size} bytes"
    written = json.loads(json_path.read_text())
    assert written["complete"] is True and written["score"] == report.score
    assert [(c["id"], c["status"], c["earned"]) for c in written["criteria"]] == [
        (r.id, r.status, r.earned) for r in report.results
    ]
    gradescope = json.loads(gradescope_path.read_text())
    graded = [r for r in report.results if r.status != "blocked"]  # blocked ones are a note, not a test
    assert gradescope["score"] == report.score and len(gradescope["tests"]) == len(graded)
    for text in [reports.summary(report, load_rubric()), gradescope["output"], *(t["output"] for t in gradescope["tests"])]:
        text.encode("utf-8")  # strict: a lone surrogate would raise here, as on a terminal
        assert not CONTROL.search(text.replace("\n", "").replace("\t", "")), f"control characters in {text[:200]!r}"


@pytest.mark.parametrize("path", sorted(CATALOGUE.glob("*.toml")), ids=lambda p: p.stem)
def test_catalogue_entry(path: Path, tmp_path: Path):
    entry = load_entry(path)
    if entry.get("requires_root") and os.geteuid() != 0:
        pytest.skip("the defence this entry tests needs the grader to run as root")
    token = secrets.token_hex(8)
    gone = [Path(p.replace(RUN_TOKEN, token)) for p in entry.get("expect_gone", [])]
    if "archive" in entry:
        assert entry["archive"] in ARCHIVE_MODES, f"{path.name}: archive must be one of {sorted(ARCHIVE_MODES)}"
        folder = pack(entry, path.name, tmp_path)
    else:
        folder = write_submission(tmp_path / "submission", submission_files(entry, path.name, token))
    started = time.monotonic()
    report, json_path, gradescope_path = grade_like_the_cli(folder, entry, tmp_path)
    assert time.monotonic() - started < BOUND_SECONDS
    assert report.complete
    check_reports(report, json_path, gradescope_path, wait=entry.get("expect_review", False))
    statuses = {r.id: r.status for r in report.results}
    messages = {r.id: r.message for r in report.results}
    unknown = set(entry["lose"]) - set(statuses)
    assert not unknown, f"{path.name}: lose names criteria that were not graded: {sorted(unknown)}"
    for result in report.results:
        if result.id in entry["lose"]:
            want = entry.get("expect_status", {}).get(result.id, "failed")
            assert result.status == want, f"{result.id}: expected {want}, got {result.status}: {result.message}"
        else:
            assert result.status in ("passed", "blocked"), f"{result.id} should pass, got {result.status}: {result.message}"
    for criterion, wanted in entry.get("expect_message", {}).items():
        texts = [wanted] if isinstance(wanted, str) else wanted
        assert any(text in messages[criterion] for text in texts), f"{criterion}: none of {texts!r} in message {messages[criterion]!r}"
    if not entry.get("expect_review", False):  # a tampering report names what the submission touched
        internals = {r.id: r.message for r in report.results if GRADER_INTERNALS.search(r.message)}
        assert not internals, f"messages show the grader's internals: {internals}"
    assert report.needs_review == entry.get("expect_review", False), f"needs review: {report.review}"
    found = {finding["name"] for finding in report.policy_findings}
    assert set(entry.get("expect_policy", [])) <= found, f"policy findings: {sorted(found)}"
    if "expect_note" in entry:
        assert any(entry["expect_note"] in note for note in report.notes), f"notes: {report.notes}"
    if os.geteuid() == 0 and report.environment.get("children_uid") not in (None, 0):
        assert leftover_processes(report.environment["children_uid"]) == []
    assert [p for p in gone if os.path.lexists(p)] == [], "left behind after grading"


def test_each_tensor_parallel_piece_is_graded_against_all_of_problem_3():
    entries = [load_entry(path) for path in sorted(CATALOGUE.glob("*.toml"))]
    unproved = [
        piece for piece in TP_PIECES
        if not any(entry.get("only") == ["3"] and any(c.startswith(piece + "-") for c in entry["lose"]) for entry in entries)
    ]
    assert not unproved, f"no entry with a mistake in {unproved} grades all of Problem 3 (only = [\"3\"])"


def test_old_must_occur_once():
    entry = {"file": "pipeline.py", "replace": [{"old": "torch", "new": "x"}]}
    with pytest.raises(AssertionError, match="occurs .* times"):
        build_source(entry, "example")


# --- public parity on real mistakes ---------------------------------------------------------
# For a catalogue entry, every criterion it must lose has a public test (marked
# @pytest.mark.criterion(<id>)) that fails on the same code, run in a copy of the student kit,
# so a student learns locally what the grader will say. Each entry costs a pytest run of the
# kit's marked tests (seconds), so this runs on the classes students most often get past the
# public tests, not the whole catalogue (that every criterion has a marked public test at all
# is tests/kit/test_public_tests.py's check).

PARITY_KIT = REPOSITORY / "handout"  # the kit's Makefile, markers and conftest; the public tests are this repository's
PARITY_ENTRIES = [
    "transfer-guarded-by-device",   # a move on the calling thread that only happens between devices
    "chunk-instead-of-split",       # the right number of microbatches, the wrong sizes
    "serial-waves",                 # call order and concurrency
    "reraise-copy",                 # a copy of the stage's exception, not the stage's own
    "pipe-raises-last-error-of-the-wave",  # the last of a wave's errors, right wherever one stage fails
    "pipe-contiguous-copy-per-microbatch",  # a copy on the calling thread only of a batch that is not contiguous
    "pipe-retries-timeouts",        # a timed-out stage call submitted again
    "clock-cycles-cache-skips-checks",  # a cache hit answers clock_cycles(True, 3) after clock_cycles(1, 3)
    "plan-pipeline-no-returning-gradient",  # a factor of 2 in one term of 5.1 (once hidden by a wide tolerance)
    "plan-data-parallel-half-ring",         # (d - 1)/d for 2(d - 1)/d
    "plan-search-memory-below-the-limit",   # < for <= at exactly the memory of a GPU
]

PARITY_PLUGIN = '''
import json, os

WANTED = set(os.environ["PARITY_CRITERIA"].split(","))
PROBLEMS = set(filter(None, os.environ.get("PARITY_PROBLEMS", "").split(",")))  # every test of these, if given
RESULTS = {}

def pytest_collection_modifyitems(config, items):
    keep = []
    for item in items:
        criteria = {c for marker in item.iter_markers("criterion") for c in marker.args}
        problems = {marker.name for marker in item.iter_markers() if marker.name.startswith("problem_")}
        if problems & PROBLEMS if PROBLEMS else criteria & WANTED:
            RESULTS[item.nodeid] = {"criteria": sorted(criteria), "failed": False, "message": ""}
            keep.append(item)
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep

def pytest_runtest_logreport(report):
    if report.failed and report.nodeid in RESULTS:
        RESULTS[report.nodeid]["failed"] = True
        RESULTS[report.nodeid]["message"] = getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message

def pytest_sessionfinish(session):
    with open(os.environ["PARITY_OUT"], "w") as handle:
        json.dump(RESULTS, handle)
'''


def run_public_tests(entry: dict, name: str, tmp_path: Path, problems: list[str] = ()) -> dict:
    """Per public test (node id): its criteria, whether it failed on the entry's code, and why.
    Runs the tests marked with a criterion the entry loses, or every test of ``problems``
    (markers such as ``problem_2_1``), in a copy of the kit holding this repository's public tests."""
    kit = tmp_path / "kit"
    shutil.copytree(PARITY_KIT, kit, ignore=shutil.ignore_patterns(".venv", "__pycache__", ".pytest_cache", ".hypothesis"))
    for test in (REPOSITORY / "tests" / "public").glob("*.py"):
        shutil.copyfile(test, kit / "tests" / test.name)
    for file in ("pipeline.py", "tensor_parallel.py"):  # the answer key, then the entry's mistake
        shutil.copyfile(REPOSITORY / "minitorch" / file, kit / "minitorch" / file)
    for file, text in submission_files(entry, name).items():
        (kit / "minitorch" / file).write_text(text)
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "parity_plugin.py").write_text(PARITY_PLUGIN)
    out = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "plugin"), "PARITY_OUT": str(out),
           "PARITY_CRITERIA": ",".join(entry["lose"]), "PARITY_PROBLEMS": ",".join(problems), "HYPOTHESIS_PROFILE": "ci"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "parity_plugin", "-p", "no:cacheprovider"],
                         cwd=kit, env=env, capture_output=True, text=True, timeout=100)
    assert out.exists(), run.stdout[-2000:] + run.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", PARITY_ENTRIES)
def test_public_tests_fail_where_the_grader_does(name: str, tmp_path: Path):
    entry = load_entry(CATALOGUE / f"{name}.toml")
    results = run_public_tests(entry, name, tmp_path)
    caught = {criterion for result in results.values() if result["failed"] for criterion in result["criteria"]}
    missed = sorted(set(entry["lose"]) - caught)
    assert not missed, f"{name}: no public test fails for {missed}; ran {sorted(results)}"


# The other way round: on an entry, every public test of the problems it is graded on that fails
# is marked with a criterion the entry loses, so no public message blames what the grader keeps
# (a wave listed in the wrong stage order reads as a wrong schedule; a mistake in estimate fails
# a test of best_plan). Entries whose mistake once failed a test of a criterion the grader keeps.
BLAME_ENTRIES = [
    "clock-cycles-unsorted-wave",        # the right pairs in each wave, only the stage order wrong
    "plan-activations-every-microbatch",  # estimate wrong (memory), best_plan right
    "one-f-one-b-backward-before-forward",  # an invalid 1F1B, train_step right
    "balance-returns-numpy-ints",        # the right split as NumPy integers: 2.4-arguments only
]


@pytest.mark.slow
@pytest.mark.parametrize("name", BLAME_ENTRIES)
def test_public_tests_fail_only_for_what_the_grader_takes(name: str, tmp_path: Path):
    from grader.grading import select

    entry = load_entry(CATALOGUE / f"{name}.toml")
    problems = sorted({"problem_" + c.problem.replace(".", "_") for c in select(load_rubric().active(), entry.get("only", DEFAULT_ONLY))})
    results = run_public_tests(entry, name, tmp_path, problems)
    assert results, f"{name}: no public test of {problems} ran"
    blamed = {node: result for node, result in results.items()
              if result["failed"] and not set(result["criteria"]) & set(entry["lose"])}
    assert not blamed, (f"{name} loses only {entry['lose']} in the grader, yet these public tests of other criteria "
                        f"fail: {json.dumps(blamed, indent=1)[:3000]}")
    caught = {criterion for result in results.values() if result["failed"] for criterion in result["criteria"]}
    assert set(entry["lose"]) <= caught, f"{name}: no public test fails for {sorted(set(entry['lose']) - caught)}"
