"""The course layout, in one place: which files students write, which are provided, where
the repository and the default rubric are.

Standard library only: the batch runner and the Gradescope entry point import it without
importing torch.
"""
from __future__ import annotations

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
PACKAGE = "minitorch"
PROVIDED_FOLDER = REPOSITORY / PACKAGE  # the provided modules, and the answer key's student files
DEFAULT_RUBRIC = REPOSITORY / "grader" / "rubric.toml"

STUDENT_FILES = ("pipeline.py", "tensor_parallel.py")
# Which student file each homework problem (the part before the dot) is written in.
FILE_OF_PROBLEM = {"2": "pipeline.py", "3": "tensor_parallel.py", "4": "pipeline.py", "5": "pipeline.py"}
SOLUTION_MARKER = "# BEGIN SOLUTION"


def provided_files(folder: Path = PROVIDED_FOLDER) -> list[Path]:
    """The provided modules of ``folder``: every ``.py`` file that is not a student file."""
    return sorted(p for p in folder.glob("*.py") if p.name not in STUDENT_FILES)


def provided_names(folder: Path = PROVIDED_FOLDER) -> frozenset[str]:
    return frozenset(p.name for p in provided_files(folder))
