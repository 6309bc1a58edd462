"""``python -m course COMMAND ...``: running a class, one subcommand per task.

    python -m course batch FOLDER --csv FILE [--jobs N] [--html FILE] ...
    python -m course dashboard REPORTS --html FILE
    python -m course feedback REPORTS --out DIR [--canvas-download DOWNLOAD.zip] ...
    python -m course import-gradescope SCORES.csv --csv FILE [--html FILE] [--canvas FILE ...]
    python -m course slurm write FOLDER --csv FILE --submit ...   (and slurm merge, slurm task)
    python -m course grade PATH ...                               (the same as python -m grader grade)

Each command is a thin layer over a module (``batch`` over :mod:`course.batch`, ``dashboard``
over :mod:`course.dashboard`, ``slurm`` over :mod:`course.cluster`, ``grade`` over
:mod:`grader.cli`), which provides ``add_arguments(parser)`` and ``run(args) -> exit status``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from grader.cli import command_line

# command -> (module providing add_arguments/run, one-line help)
COMMANDS = {
    "batch": ("course.batch", "grade a folder of submissions into a gradebook CSV"),
    "dashboard": ("course.dashboard", "build the class dashboard (one HTML file) from a batch's reports folder"),
    "import-gradescope": ("course.gradescope_scores", "Gradescope's Download Grades CSV into the gradebook CSV, dashboard and Canvas's import"),
    "feedback": ("course.feedback", "write each student's feedback file (and Canvas's bulk upload) from a batch's reports folder"),
    "slurm": ("course.cluster", "grade a folder of submissions on a Slurm cluster (write, merge, task)"),
    "grade": ("grader.cli", "grade one submission (a folder, a .zip, or a student file), as python -m grader grade"),
}


def parser() -> argparse.ArgumentParser:
    return command_line("python -m course",
                        "Run a class: grade every student, build the gradebook, Canvas's import and the dashboard.", COMMANDS)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    return importlib.import_module(COMMANDS[args.command][0]).run(args)
