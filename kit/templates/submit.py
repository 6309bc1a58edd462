"""``make submit``: check your two files, say which problems are still stubs, run a quick
smoke test (the first public test of each problem), then pack the files into submission.zip,
with your written report (REPORT.md and the figures and numbers `make report` wrote in report/).

    python submit.py minitorch/pipeline.py minitorch/tensor_parallel.py [--no-smoke]

An old submission.zip is deleted first, so a check that fails never leaves an older zip
behind to be uploaded by mistake. Stubs and failing smoke tests do not stop the packing:
a problem that still raises NotImplementedError scores 0, the others still count.
"""
from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from minitorch.cli import STUB_MESSAGE  # the kit's stubs: NotImplementedError("Problem 3.4: name")

ZIP = Path("submission.zip")
REPORT = Path("REPORT.md")
REPORT_FOLDER = Path("report")  # what `make report` writes: figures and their numbers
REPORT_SUFFIXES = (".png", ".svg", ".json")
SMOKE_TIMEOUT = 120  # seconds for the whole smoke run; each test has 30 (pytest --timeout)


def compile_error(path: Path) -> str | None:
    """Why ``path`` cannot be submitted (missing, or a syntax error), or None."""
    if not path.is_file():
        return f"{path} is missing"
    try:
        compile(path.read_bytes(), str(path), "exec")
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None)
        return f"{path}{f':{line}' if line else ''}: {type(error).__name__}: {getattr(error, 'msg', error)}"
    return None


def stubs(path: Path) -> list[tuple[tuple[int, int], str]]:
    """The kit's stubs left in ``path``: ``((3, 4), "VocabParallelEmbedding.forward")`` for each
    ``raise NotImplementedError("Problem 3.4: VocabParallelEmbedding.forward")``."""
    found = []
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        call = node.exc if isinstance(node, ast.Raise) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "NotImplementedError"
                and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
            match = STUB_MESSAGE.fullmatch(call.args[0].value)
            if match:
                major, minor = match[1].split(".")
                found.append(((int(major), int(minor)), match[2]))
    return sorted(found)


def stub_report(files: list[Path]) -> str | None:
    """``Problems 3.4, 4.2 still raise NotImplementedError (...)``, or None when nothing is a stub."""
    per_file = {path: stubs(path) for path in files}
    problems = sorted({problem for found in per_file.values() for problem, _ in found})
    if not problems:
        return None
    word, verb = ("Problem", "raises") if len(problems) == 1 else ("Problems", "raise")
    lines = [f"{word} {', '.join(f'{major}.{minor}' for major, minor in problems)} still {verb} NotImplementedError "
             "(they score 0 until implemented):"]
    for path, found in per_file.items():
        if found:
            names = [name for _, name in found]
            more = f" and {len(names) - 4} more" if len(names) > 4 else ""
            lines.append(f"  {path}: {', '.join(names[:4])}{more}")
    return "\n".join(lines)


def smoke() -> str:
    """Run the first public test of each problem; return what pytest printed, or why it stopped."""
    command = [sys.executable, "-m", "pytest", "--smoke", "-q", "--tb=line", "-p", "no:cacheprovider", "--timeout=30"]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=SMOKE_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        return f"the smoke test did not finish within {SMOKE_TIMEOUT} s (a hang? `make test` shows which test)"
    return (run.stdout + run.stderr).rstrip()


def report_files() -> list[Path]:
    """REPORT.md and the figures and numbers in report/, those that exist."""
    found = [REPORT] if REPORT.is_file() else []
    if REPORT_FOLDER.is_dir():
        found += sorted(path for path in REPORT_FOLDER.iterdir() if path.is_file() and path.suffix in REPORT_SUFFIXES)
    return found


def report_note(files: list[Path]) -> str:
    """What of the written report goes into the zip, and what is missing, in one line."""
    figures = sum(path.suffix in (".png", ".svg") for path in files)
    packed = ([str(REPORT)] if REPORT in files else []) + ([f"{figures} figures from {REPORT_FOLDER}/"] if figures else [])
    missing = ([] if REPORT in files else [f"no {REPORT}"]) + ([] if figures else ["no figures: run `make report`"])
    said = f"packing {' and '.join(packed)}" if packed else "nothing to pack"
    return f"report: {said}" + (f" ({'; '.join(missing)})" if missing else "")


def pack(files: list[Path], report: list[Path]) -> None:
    with zipfile.ZipFile(ZIP, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, path.name)
        for path in report:  # REPORT.md at the top, report/<name> beside it: its image links still work
            archive.write(path, path.as_posix())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python submit.py", description=__doc__.strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path, help="the student files to pack")
    parser.add_argument("--no-smoke", action="store_true", help="skip the smoke test")
    args = parser.parse_args(argv)
    ZIP.unlink(missing_ok=True)  # whatever happens next, no stale zip is left to upload
    errors = [error for error in map(compile_error, args.files) if error]
    if errors:
        print("\n".join(f"make submit: {error}" for error in errors), file=sys.stderr)
        print(f"make submit: fix the error above first; no {ZIP} was written", file=sys.stderr)
        return 1
    report = stub_report(args.files)
    print(f"make submit: {report}" if report else "make submit: no stubs left")
    if not args.no_smoke:
        print("smoke test, the first public test of each problem (`make test` runs them all):")
        print("\n".join(f"  {line}" for line in smoke().splitlines()))
    written = report_files()
    print(f"make submit: {report_note(written)}")
    pack(args.files, written)
    print(f"packed {', '.join(path.name for path in args.files)}{' and the report' if written else ''} into {ZIP}: "
          "upload this file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
