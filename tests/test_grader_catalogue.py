"""Every entry of tests/catalogue/ (a wrong or hostile submission) loses exactly what it says.

An entry is a small TOML file: ``file`` (the student file it changes), one or more
``[[replace]]`` edits of the answer key (``old`` must occur exactly once) or a whole
``source``, ``lose`` (criteria it must not pass; every other graded criterion must pass),
and optionally ``only`` (criteria or problems to grade, default Problem 2), ``timeout``,
``expect_status`` (criterion -> status, default ``failed`` for lost ones) and
``expect_message`` (criterion -> text its message must contain).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from grading_helpers import answer_key_source, grade_folder, leftover_processes, write_submission

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

CATALOGUE = Path(__file__).resolve().parent / "catalogue"
ENTRY_KEYS = {"description", "file", "replace", "source", "lose", "only", "timeout", "expect_status", "expect_message"}
BOUND_SECONDS = 60  # any entry, hostile ones included, is graded within this


def load_entry(path: Path) -> dict:
    entry = tomllib.loads(path.read_text())
    unknown = set(entry) - ENTRY_KEYS
    assert not unknown, f"{path.name}: unknown keys {sorted(unknown)}"
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


@pytest.mark.parametrize("path", sorted(CATALOGUE.glob("*.toml")), ids=lambda p: p.stem)
def test_catalogue_entry(path: Path, tmp_path: Path):
    entry = load_entry(path)
    folder = write_submission(tmp_path / "submission", {entry["file"]: build_source(entry, path.name)})
    started = time.monotonic()
    report = grade_folder(folder, only=entry.get("only", ["2"]), timeout=entry.get("timeout"))
    assert time.monotonic() - started < BOUND_SECONDS
    assert report.complete
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
    for criterion, text in entry.get("expect_message", {}).items():
        assert text in messages[criterion], f"{criterion}: {text!r} not in message {messages[criterion]!r}"
    if os.geteuid() == 0 and report.environment.get("children_uid") not in (None, 0):
        assert leftover_processes(report.environment["children_uid"]) == []


def test_old_must_occur_once():
    entry = {"file": "pipeline.py", "replace": [{"old": "torch", "new": "x"}]}
    with pytest.raises(AssertionError, match="occurs .* times"):
        build_source(entry, "example")
