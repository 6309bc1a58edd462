"""``python -m grader PATH ...``: grade one submission (``batch ...``: many; ``slurm ...``: on a cluster).

Exit status: 0 when grading ran to completion, whatever the score; 1 with
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m grader",
        description="Grade a submission criterion by criterion, each in an isolated child process.",
        epilog="`python -m grader batch FOLDER --csv FILE` grades a folder of submissions; "
               "`python -m grader slurm write FOLDER --csv FILE --submit` grades it on a Slurm cluster.",
    )
    parser.add_argument("path", metavar="PATH", help="a folder with pipeline.py and/or tensor_parallel.py, or a .zip of one")
    parser.add_argument("--json", metavar="FILE", help="write the report as JSON (rewritten after every criterion)")
    parser.add_argument("--gradescope", metavar="FILE", help="write Gradescope's results.json")
    parser.add_argument("--only", nargs="+", metavar="PROBLEM_OR_ID", help="grade only these problems (2.2, or 2 for all of 2.x) or criterion ids")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="per-criterion timeout, replacing the rubric's")
    parser.add_argument("--require-full", action="store_true", help="exit 1 unless every criterion that is not blocked passed")
    parser.add_argument("--rubric", metavar="FILE", help="use this rubric instead of grader/rubric.toml")
    parser.add_argument("--seed", type=int, help="reuse a run's seed (printed at the end) to reproduce it")
    parser.add_argument("--gpu-smoke", action="store_true",
                        help="run only the GPU criteria, on ONE GPU with a small workload: exercises the CUDA code paths, scores nothing")
    return parser


def _batch(argv: list[str]) -> int:
    try:
        batch = importlib.import_module("grader.batch")
    except ModuleNotFoundError as error:
        if error.name != "grader.batch":
            raise
        print("python -m grader batch: batch grading is not available yet (grader/batch.py is missing)", file=sys.stderr)
        return EXIT_USAGE
    return batch.main(argv)


def _give_up(message: str, args: argparse.Namespace, started: float) -> int:
    """Bad usage: say why, and still leave a Gradescope results.json when one was asked for."""
    print(f"python -m grader: {message}", file=sys.stderr)
    if args.gradescope:
        from grader.report import failure_results, write_atomic

        write_atomic(args.gradescope, json.dumps(failure_results(message, time.perf_counter() - started), indent=2) + "\n")
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "batch":
        return _batch(argv[1:])
    if argv and argv[0] == "slurm":
        from grader import cluster

        return cluster.main(argv[1:])
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    if args.timeout is not None and not args.timeout > 0:
        return _give_up(f"--timeout must be > 0 seconds, got {args.timeout:g}", args, started)

    # Heavy imports (torch) only once the command line is known to be sound.
    from grader import report as reports
    from grader.grading import grade, select
    from grader.rubric import DEFAULT_RUBRIC, RubricError, load_rubric
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
    print(f"Grading {args.path} ({found}{missing}) with {rubric.path}", flush=True)
    if submission.problem:
        print(f"  {submission.problem}", flush=True)

    def on_result(report, result) -> None:
        print(reports.live_line(result), flush=True)
        if args.json:
            reports.write_json(report, args.json)

    try:
        report = grade(submission, rubric, only=args.only, timeout=args.timeout, seed=args.seed, on_result=on_result)
    except KeyboardInterrupt:
        print("\ninterrupted: the report is incomplete", file=sys.stderr)
        return EXIT_USAGE
    print(reports.summary(report, rubric), flush=True)
    if args.json:
        reports.write_json(report, args.json)
    if args.gradescope:
        reports.write_gradescope(report, rubric, time.perf_counter() - started, args.gradescope)
    if report.count("error"):
        return EXIT_USAGE
    if args.require_full and any(r.status not in ("passed", "blocked") for r in report.results):
        return EXIT_NOT_FULL
    return EXIT_OK
