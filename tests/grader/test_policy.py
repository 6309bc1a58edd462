"""The static policy scan (grader/policy.py) and its place in reports."""
from __future__ import annotations

import pytest
from grading_helpers import ANSWER_KEY, STUDENT_FILES

from course.outcomes import StudentGrade, apply_report
from grader.policy import scan, scan_source
from grader.rubric import RubricError, load_rubric, parse_rubric

FORBIDDEN = load_rubric().forbidden


def names(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.name) for f in scan_source("pipeline.py", source, FORBIDDEN)]


def test_answer_key_and_stub_have_no_findings():
    files = {name: (ANSWER_KEY / name).read_bytes() for name in STUDENT_FILES}
    assert scan(files, FORBIDDEN) == []


@pytest.mark.parametrize("source, expected", [
    ("import subprocess\n", [(1, "subprocess")]),
    ("from os import _exit as leave\n", [(1, "os._exit")]),
    ("import os as o\no._exit(0)\n", [(2, "os._exit")]),
    ("import sys\nsys.modules['grader'].x = 1\n", [(2, "sys.modules")]),
    ("import torch.distributed.pipelining\n", [(1, "torch.distributed.pipelining")]),
    ("import importlib\nimportlib.import_module('ctypes')\n", [(1, "importlib"), (2, "ctypes"), (2, "importlib")]),
    ("x = __import__('gc')\n", [(1, "__import__"), (1, "gc")]),
    ("def f(g):\n    return g.__wrapped__\n", [(2, ".__wrapped__")]),
    ("import os\nos.path.join('a', 'b')\nimport torch\ntorch.cat([])\n", []),
    ("def broken(:\n", []),  # the criteria report a syntax error; nothing to review
    ("import torch\nm = torch.sys.modules\n", [(2, ".sys")]),  # an inner attribute of an imported chain
    ("x = " + "-" * 1500 + "len(open.__name__)\n", [(1, "open")]),  # deeper than Python's recursion limit
    ("x = " + "1 + " * 5000 + "1\n", [(0, "(not scanned)")]),  # too deep for Python's own parser
])
def test_scan_finds_imports_uses_and_attributes(source, expected):
    assert names(source) == expected


def test_findings_name_file_line_and_code():
    (finding,) = scan({"tensor_parallel.py": b"\n\nimport ctypes  # why\n"}, FORBIDDEN)
    assert finding == {"file": "tensor_parallel.py", "line": 3, "name": "ctypes", "code": "import ctypes  # why"}


def test_rubric_policy_is_validated():
    text = (ANSWER_KEY.parent / "grader" / "rubric.toml").read_text()
    with pytest.raises(RubricError, match=r"\[policy\] forbidden"):
        parse_rubric(text.replace('"subprocess",', '"sub process",'))
    with pytest.raises(RubricError, match=r"\[policy\] has unknown key"):
        parse_rubric(text.replace("[policy]\n", "[policy]\nallowed = []\n"))


def test_batch_flags_a_report_that_needs_review(tmp_path):
    outcome = StudentGrade("alice", tmp_path, tmp_path / "alice.json")
    report = {"criteria": [{"problem": "2.1", "earned": 8, "status": "passed"}], "max_score": 8,
              "files": {"pipeline.py": "x", "tensor_parallel.py": "y"}, "needs_review": True,
              "policy_findings": [{"file": "pipeline.py", "line": 1, "name": "ctypes", "code": "import ctypes"}]}
    apply_report(outcome, report)
    assert outcome.score == 8 and "needs_review" in outcome.flags and "policy_findings=1" in outcome.flags


def test_a_report_lists_the_first_findings_and_counts_them_all():
    from grader.grading import _new_report
    from grader.policy import FINDINGS_KEPT
    from grader.submission import Submission

    source = "".join(f"x{line} = open\n" for line in range(FINDINGS_KEPT + 50)).encode()
    report = _new_report(Submission("many", {"pipeline.py": source}), load_rubric(), 0, 1)
    assert len(report.policy_findings) == FINDINGS_KEPT and report.needs_review
    assert any(f"found {FINDINGS_KEPT + 50} uses" in note for note in report.notes)
