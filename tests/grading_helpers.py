"""Shared helpers of the grader tests: write submissions, grade them in this process.

Grading in the test process shares one forkserver (torch already imported) across tests.
"""
from __future__ import annotations

import importlib
import time
from pathlib import Path

from grader.checks.judging import Fail, observed
from grader.checks.recording import Tampered, Unusable
from grader.child import plain_copy
from grader.grading import grade
from grader.layout import REPOSITORY as REPO
from grader.layout import STUDENT_FILES
from grader.processes import processes_of
from grader.protocol import Report
from grader.result_file import decode, encode
from grader.rubric import check_modules, load_rubric
from grader.submission import load_submission
from kit.handout import strip_solutions

ANSWER_KEY = REPO / "minitorch"


def answer_key_source(name: str = "pipeline.py") -> str:
    return (ANSWER_KEY / name).read_text()


def write_submission(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def stub_files() -> dict[str, str]:
    return {name: strip_solutions(answer_key_source(name)) for name in STUDENT_FILES if (ANSWER_KEY / name).exists()}


def grade_folder(folder: Path, only=None, timeout=None, rubric=None, on_result=None) -> Report:
    return grade(load_submission(folder), rubric or load_rubric(), only=only, timeout=timeout, on_result=on_result)


def leftover_processes(uid: int, wait: float = 2.0) -> list[str]:
    """Processes of ``uid`` still alive (after waiting up to ``wait`` s for them to go)."""
    deadline = time.monotonic() + wait
    while True:
        found = [f"{p['Pid']} {p['Name']}" for p in processes_of(uid) if p.get("State", "").split()[:1] != ["Z"]]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def observe_and_judge(checks, name: str, seed: int, params: dict | None = None):
    """One check, in this process, along the grader's path: ``observe_<name>`` (as the child
    runs it; what the child reports as a failure is raised as :class:`Fail`), the observation
    made plain data, written and read back as the child's report (:mod:`grader.result_file`),
    wrapped by ``observed``, then ``judge_<name>``. ``checks`` is a one-module check, or a check string
    ``"problem2.clock_cycles:schedule"`` (then ``name`` may be None)."""
    if isinstance(checks, str):
        observe_module, judge_module = check_modules(checks)
        name = name or checks.split(":")[1]
        observe_side, judge_side = importlib.import_module(observe_module), importlib.import_module(judge_module)
    else:
        observe_side = judge_side = checks
    params = dict(params or {})
    try:
        observation = plain_copy(getattr(observe_side, f"observe_{name}")(seed, dict(params)))
    except Tampered as tampered:
        raise Fail(str(tampered), details={"tampered": tampered.names}) from tampered
    except Unusable as unusable:
        raise Fail(str(unusable)) from unusable
    envelope = decode(encode({"kind": "observation", "observation": observation}))
    return getattr(judge_side, f"judge_{name}")(seed, params, observed(envelope["observation"]))
