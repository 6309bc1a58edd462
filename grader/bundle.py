"""Build the Gradescope autograder zip: ``python -m grader.bundle [--out dist/autograder.zip]``.

The zip holds, at its root, ``setup.sh`` and ``run_autograder`` (from ``grader/gradescope/``,
LF line endings, executable), the tested pins (``requirements.txt``, ``constraints.txt``), the
``grader`` package with its rubric, and the PROVIDED files of ``minitorch/``. It never holds
the answer key's student files. Gradescope unpacks it into ``/autograder/source``.
"""
from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STUDENT_FILES = ("pipeline.py", "tensor_parallel.py")
SCRIPTS = ("setup.sh", "run_autograder")
FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # same bytes for the same sources


def bundle_files() -> dict[str, Path]:
    """Archive name -> source path, for every file of the bundle."""
    files = {name: REPO / "grader" / "gradescope" / name for name in SCRIPTS}
    for name in ("requirements.txt", "constraints.txt"):
        files[name] = REPO / name
    for path in sorted((REPO / "grader").rglob("*")):
        relative = path.relative_to(REPO)
        if path.is_file() and "__pycache__" not in relative.parts and path.suffix in (".py", ".toml"):
            files[relative.as_posix()] = path
    for path in sorted((REPO / "minitorch").glob("*.py")):
        if path.name not in STUDENT_FILES:
            files[f"minitorch/{path.name}"] = path
    return files


def build(out: Path) -> list[str]:
    """Write the zip to ``out``; return the archive names."""
    out.parent.mkdir(parents=True, exist_ok=True)
    files = bundle_files()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in files.items():
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            data = path.read_bytes()
            if name in SCRIPTS:
                data = data.replace(b"\r\n", b"\n")
                info.external_attr = 0o100755 << 16
            else:
                info.external_attr = 0o100644 << 16
            archive.writestr(info, data)
    return list(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.bundle", description="Build the Gradescope zip.")
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "autograder.zip")
    args = parser.parse_args(argv)
    names = build(args.out)
    print(f"wrote {args.out} ({len(names)} files); upload it as the Gradescope autograder (Ubuntu base image)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
