"""Build the Gradescope autograder zip: ``python -m kit bundle [--out dist/autograder.zip]``.

The zip holds, at its root, ``setup.sh`` and ``run_autograder`` (from ``kit/gradescope/``,
LF line endings, executable), the tested pins (``requirements.txt``, ``constraints.txt``),
the grading engine (:func:`engine_files`: the engine, the rubric's checks and the grader
modules they import; never the kit builder, the course package (``course/``: running a
class), the tests or the grader's self-test check), and the PROVIDED files of
``minitorch/``. It never holds the answer key's student files. Gradescope unpacks it into ``/autograder/source``.
With ``--gpu-reports DIR`` it also holds the staff's GPU results (``gpu/submission_<id>.json``,
grader.gpu_results), which a Regrade All Submissions merges into each submission's score.
"""
from __future__ import annotations

import ast
import zipfile
from pathlib import Path

from grader import gpu_results
from grader.cli import COMMANDS
from grader.layout import DEFAULT_RUBRIC, REPOSITORY, provided_files
from grader.protocol import read_json_report
from grader.rubric import load_rubric

SCRIPTS = ("setup.sh", "run_autograder")
PINS = ("requirements.txt", "constraints.txt")
FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # same bytes for the same sources
# Where grading one submission starts (the command line and Gradescope's entry point); the
# bundle ships these, the rubric's checks, and every grader module they import.
ENGINE = ("grader/__init__.py", "grader/__main__.py", "grader/gradescope_run.py")


def _grader_imports(relative: str) -> set[str]:
    """The grader's own modules that ``relative`` imports (``grader.x`` and ``from grader.checks
    import recording`` alike), as files relative to the repository."""
    found = set()
    for node in ast.walk(ast.parse((REPOSITORY / relative).read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        for name in names:
            for candidate in (name.replace(".", "/") + ".py", name.replace(".", "/") + "/__init__.py"):
                if name.split(".")[0] == "grader" and (REPOSITORY / candidate).is_file():
                    found.add(candidate)
    return found


def engine_files() -> list[str]:
    """The grader's files the bundle ships, relative to the repository: the engine, the
    command modules and the rubric's checks, with every grader module they import."""
    commands = {module.replace(".", "/") + ".py" for module, _ in COMMANDS.values()}
    checks = {m.replace(".", "/") + ".py" for c in load_rubric(DEFAULT_RUBRIC).criteria for m in (c.observe_module, c.judge_module)}
    files, pending = set(), [*ENGINE, *commands, *checks]
    while pending:
        relative = pending.pop()
        if relative not in files:
            files.add(relative)
            pending.extend(_grader_imports(relative))
    packages = {(folder / "__init__.py").as_posix() for relative in files for folder in Path(relative).parents}
    packages = {relative for relative in packages if (REPOSITORY / relative).is_file()}
    return sorted({*files, *packages, DEFAULT_RUBRIC.relative_to(REPOSITORY).as_posix()})


def bundle_files() -> dict[str, Path]:
    """Archive name -> source path, for every file of the bundle."""
    files = {name: REPOSITORY / "kit" / "gradescope" / name for name in SCRIPTS}
    files.update({name: REPOSITORY / name for name in PINS})
    files.update({name: REPOSITORY / name for name in engine_files()})
    files.update({f"minitorch/{path.name}": path for path in provided_files()})
    return files


def gpu_report_files(folder: Path) -> dict[str, Path]:
    """Archive name -> path of each GPU report in ``folder`` (a batch's reports folder), named
    by the Gradescope submission whose export folder it graded (``gpu/submission_<id>.json``,
    see grader.gpu_results); the folder's other files (logs, the gradebook's rows) stay out.

    Raises:
        ValueError: a ``submission_<id>.json`` there is not a grader report, or there is none.
    """
    files = {}
    for path in sorted(folder.glob("submission_*.json")):
        if gpu_results.report_name(path.stem.removeprefix("submission_")) != path.name:
            continue  # not a submission of Gradescope's export
        if read_json_report(path) is None:
            raise ValueError(f"{path}: not a grader report")
        files[f"{gpu_results.FOLDER}/{path.name}"] = path
    if not files:
        raise ValueError(f"{folder}: no submission_<id>.json reports (grade Gradescope's export with --only 2.3 first)")
    return files


def build(out: Path, gpu_reports: Path | None = None) -> list[str]:
    """Write the zip to ``out`` (with ``gpu_reports``' GPU results for Gradescope's regrade);
    return the archive names."""
    out.parent.mkdir(parents=True, exist_ok=True)
    files = bundle_files() | (gpu_report_files(gpu_reports) if gpu_reports is not None else {})
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
