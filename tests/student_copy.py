"""A fresh copy of the student kit, as a student gets it, for tests that run its commands.

``borrow_environment`` gives the copy a real ``.venv`` whose packages are this project's
(through a ``.pth`` file), stamped as installed: ``make test`` and ``make submit`` then run
exactly as in a student's folder, without downloading anything.
"""
from __future__ import annotations

import shutil
import site
import subprocess
import sys
from pathlib import Path

from grader.layout import REPOSITORY
from kit.handout import IGNORED_NAMES

KIT = REPOSITORY / "handout"


def fresh_kit(destination: Path) -> Path:
    """``handout/`` copied to ``destination`` without anything a previous run left there."""
    shutil.copytree(KIT, destination, ignore=shutil.ignore_patterns(*IGNORED_NAMES))
    return destination


def borrow_environment(kit: Path) -> Path:
    """Create ``kit/.venv`` on this interpreter's packages; return its python."""
    venv = kit / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    Path(target, "borrowed-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    # The stamps the kit's Makefile reads (kit/templates/venv.mk: one per Python, and the report's),
    # newer than the requirements: make installs nothing and never probes the torch index.
    version = "{}.{}".format(*sys.version_info[:2])
    for stamp in (f".installed-python{version}", f".installed-report-python{version}"):
        (venv / stamp).touch()
    return python


def student_files_from_answer_key(kit: Path, names: tuple[str, ...] = ("pipeline.py", "tensor_parallel.py")) -> None:
    """Put the answer key's student files into ``kit`` (a student who solved everything)."""
    for name in names:
        shutil.copyfile(REPOSITORY / "minitorch" / name, kit / "minitorch" / name)
