"""``python -m kit build | check | bundle``: a thin command line over kit.handout and kit.bundle."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.layout import REPOSITORY


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kit", description="Build the student kit and the Gradescope bundle.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in (("build", "write the student kit (its old content is replaced)"),
                            ("check", "fail when the committed kit differs from a fresh generation")):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--out", type=Path, default=REPOSITORY / "handout", help="the kit folder (default: handout)")
    bundle = commands.add_parser("bundle", help="build the Gradescope autograder zip")
    bundle.add_argument("--out", type=Path, default=REPOSITORY / "dist" / "autograder.zip")
    bundle.add_argument("--gpu-reports", type=Path, metavar="DIR",
                        help="the GPU reports of Gradescope's submission export (submission_<id>.json): a Regrade All "
                             "Submissions then counts them (docs/gradescope.md)")
    return parser


def _bundle(out: Path, gpu_reports: Path | None) -> int:
    from kit import bundle

    try:
        names = bundle.build(out, gpu_reports)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    gpu = sum(name.startswith("gpu/") for name in names)
    print(f"wrote {out} ({len(names)} files{f', {gpu} GPU reports' if gpu else ''}); "
          "upload it as the Gradescope autograder (Ubuntu base image)")
    return 0


def _kit(command: str, out: Path) -> int:
    from kit import handout, writeup

    try:
        if command == "build":
            print(f"wrote {len(handout.build(out))} files to {out}")
            return 0
        found = handout.differences(out)
    except (handout.HandoutError, writeup.WriteupError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if found:
        print(f"{out} differs from a fresh generation (run `make handout` and commit the result):")
        print("\n".join(f"  {line}" for line in found))
        return 1
    print(f"{out} is up to date")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return _bundle(args.out, args.gpu_reports) if args.command == "bundle" else _kit(args.command, args.out)


if __name__ == "__main__":
    sys.exit(main())
