"""``python -m grader grade ...``: the grader's command line, grading one submission.

    python -m grader grade PATH [--json FILE] [--gradescope FILE] [--only ...] ...

A command module provides ``add_arguments(parser)`` and ``run(args) -> exit status``; ``grade``
is a thin layer over :mod:`grader.grading` (here). Running a class (``batch``, ``dashboard``,
``slurm``) is the course package's command line, ``python -m course``, which uses this one;
the grader never imports the course, so the Gradescope bundle ships the grading engine alone.

Exit status of ``grade``: 0 when grading ran to completion, whatever the score; 1 with
``--require-full`` unless every criterion that is not blocked passed; 2 for bad usage (no
such PATH, a bad rubric, an unknown ``--only``) or when the grader itself failed (any
criterion with status ``error``).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

EXIT_OK, EXIT_NOT_FULL, EXIT_USAGE = 0, 1, 2

# command -> (module providing add_arguments/run, one-line help)
COMMANDS = {
    "grade": ("grader.cli", "grade one submission (a folder, a .zip, or a student file)"),
}
# Commands that moved to ``python -m course`` (a TA's notes may still say ``python -m grader batch``).
CLASS_COMMANDS = ("batch", "dashboard", "slurm")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``grade`` command's arguments."""
    parser.add_argument("path", metavar="PATH",
                        help="a folder with pipeline.py and/or tensor_parallel.py, or an archive of one (.zip, .tar.gz, .tgz, .tar)")
    parser.add_argument("--json", metavar="FILE", help="write the report as JSON (rewritten after every criterion)")
    parser.add_argument("--gradescope", metavar="FILE", help="write Gradescope's results.json (rewritten after every criterion)")
    parser.add_argument("--only", nargs="+", action="extend", metavar="PROBLEM_OR_ID",
                        help="grade only these problems (2.2, or 2 for all of 2.x) or criterion ids; may be repeated")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="per-criterion timeout, replacing the rubric's")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="time for the whole run: criteria get at most what is left, and those that no longer fit are not run (timeout)")
    parser.add_argument("--require-full", action="store_true", help="exit 1 unless every criterion that is not blocked passed")
    parser.add_argument("--rubric", metavar="FILE", help="use this rubric instead of grader/rubric.toml")
    parser.add_argument("--seed", type=int, help="reuse a run's seed (printed at the end) to reproduce it")
    parser.add_argument("--gpu-smoke", action="store_true",
                        help="run only the GPU criteria, on ONE GPU with a small workload: exercises the CUDA code paths, scores nothing")


def command_line(prog: str, description: str, commands: dict[str, tuple[str, str]]) -> argparse.ArgumentParser:
    """A parser of ``prog COMMAND ...``: each command's module (``commands[name][0]``) adds its
    own arguments. The course's command line is built the same way."""
    top = argparse.ArgumentParser(prog=prog, description=description,
                                  epilog=f"`{prog} COMMAND --help` describes a command.")
    subparsers = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in commands.items():
        command = subparsers.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        importlib.import_module(module).add_arguments(command)
    return top


def parser() -> argparse.ArgumentParser:
    return command_line("python -m grader",
                        "Grade submissions criterion by criterion, each criterion in an isolated child process.", COMMANDS)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] and arguments[0] in CLASS_COMMANDS:
        print(f"python -m grader {arguments[0]}: running a class is `python -m course {arguments[0]} ...`", file=sys.stderr)
        return EXIT_USAGE
    args = parser().parse_args(arguments)
    return importlib.import_module(COMMANDS[args.command][0]).run(args)


def _give_up(message: str, args: argparse.Namespace, started: float) -> int:
    """Bad usage: say why, and still leave a Gradescope results.json when one was asked for."""
    from grader.protocol import printable

    print(printable(f"python -m grader grade: {message}"), file=sys.stderr)
    if args.gradescope:
        from grader.protocol import write_atomic
        from grader.report import failure_results

        write_atomic(args.gradescope, json.dumps(failure_results(message, time.perf_counter() - started), indent=2) + "\n")
    return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    """``python -m grader grade``."""
    started, started_monotonic = time.perf_counter(), time.monotonic()
    for option in ("timeout", "budget"):
        value = getattr(args, option)
        if value is not None and not value > 0:
            return _give_up(f"--{option} must be > 0 seconds, got {value:g}", args, started)

    # Heavy imports (torch) only once the command line is known to be sound.
    from grader import report as reports
    from grader.grading import Budget, grade, select
    from grader.layout import DEFAULT_RUBRIC
    from grader.protocol import Status, one_line, write_json_report
    from grader.rubric import RubricError, load_rubric
    from grader.submission import SubmissionNotFound, load_submission

    try:
        rubric = load_rubric(args.rubric or DEFAULT_RUBRIC)
        if args.gpu_smoke:
            rubric = rubric.gpu_smoke()
        submission = load_submission(args.path)
        select(rubric.active(), args.only)
    except (RubricError, SubmissionNotFound, ValueError) as error:
        return _give_up(str(error), args, started)

    found = ", ".join(sorted(submission.files)) or "no student files"
    missing = f"; missing {', '.join(submission.missing())}" if submission.missing() else ""
    print(one_line(f"Grading {args.path} ({found}{missing}) with {rubric.path}"), flush=True)  # a student's folder name
    if submission.problem:
        print(one_line(f"  {submission.problem}"), flush=True)

    def on_result(report, result) -> None:
        print(reports.live_line(result), flush=True)
        if args.json:
            write_json_report(report, args.json)
        if args.gradescope:  # what is graded so far survives the run being stopped
            reports.write_gradescope(report, rubric, time.perf_counter() - started, args.gradescope)

    try:
        report = grade(submission, rubric, only=args.only, timeout=args.timeout, seed=args.seed, on_result=on_result,
                       budget=None if args.budget is None else Budget(args.budget, started_monotonic + args.budget))
    except KeyboardInterrupt:
        print("\ninterrupted: the report is incomplete", file=sys.stderr)
        return EXIT_USAGE
    print(reports.summary(report, rubric), flush=True)
    if args.json:
        write_json_report(report, args.json)
    if args.gradescope:
        reports.write_gradescope(report, rubric, time.perf_counter() - started, args.gradescope)
    if report.count(Status.ERROR):
        return EXIT_USAGE
    if args.require_full and any(r.status not in (Status.PASSED, Status.BLOCKED) for r in report.results):
        return EXIT_NOT_FULL
    return EXIT_OK
