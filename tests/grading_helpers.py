"""Shared helpers of the grader tests: write submissions, grade them in this process.

Grading in the test process shares one forkserver (torch already imported) across tests.
"""
from __future__ import annotations

import time
from pathlib import Path

from grader.grading import Report, grade
from grader.handout import strip_solutions
from grader.harness import processes_of
from grader.rubric import load_rubric
from grader.submission import STUDENT_FILES, load_submission

REPO = Path(__file__).resolve().parents[1]
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
