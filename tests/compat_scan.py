"""Run by the OLDEST supported Python (tests/test_install.py): does every module of this
repository compile under it, and does every import name a module it has?

``python3.10 tests/compat_scan.py ROOT THIRD_PARTY...`` compiles each ``.py`` file under ROOT
(in memory: no .pyc is written) and checks every ``import`` against this interpreter's standard
library (``sys.stdlib_module_names``), the repository's own modules and the installed
requirements named on the command line (torch is not installed for every Python here, so
imports are checked by name, not executed). An import inside ``try: ... except ImportError`` or
under an ``if sys.version_info ...`` test is a deliberate fallback and is allowed. Prints one
line per problem and exits 1 if there is any. Uses only the standard library.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

SKIPPED_FOLDERS = {".venv", ".git", "__pycache__", "build", "dist", ".pytest_cache", ".hypothesis"}
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if not SKIPPED_FOLDERS.intersection(p.relative_to(root).parts))


def local_names(root: Path, files: list[Path]) -> set[str]:
    """Top-level names the repository provides: its packages, and modules that tests import
    from their own folder (pytest puts it on sys.path)."""
    names = {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    return names | {p.stem for p in files}


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside ``try`` with an ImportError handler, or under ``if sys.version_info ...``."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Try) and child in parent.body:
            for handler in parent.handlers:
                caught = handler.type
                names = {n.id for n in ast.walk(caught) if isinstance(n, ast.Name)} if caught else {"BaseException"}
                if names & IMPORT_ERRORS:
                    return True
        if isinstance(parent, ast.If) and "version_info" in ast.unparse(parent.test):
            return True
        child, parent = parent, parents.get(parent)
    return False


def imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, top-level module name) of every absolute import that is not a guarded fallback."""
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if not _guarded(node, parents):
            found += [(node.lineno, name.split(".")[0]) for name in names]
    return found


def scan(root: Path, third_party: set[str]) -> list[str]:
    files = python_files(root)
    known = set(sys.stdlib_module_names) | local_names(root, files) | third_party
    problems = []
    for path in files:
        relative = path.relative_to(root)
        source = path.read_text(encoding="utf-8")
        try:
            tree = compile(source, str(relative), "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            compile(tree, str(relative), "exec", dont_inherit=True)
        except SyntaxError as error:
            problems.append(f"{relative}:{error.lineno}: does not compile: {error.msg}")
            continue
        for line, name in imported_names(tree):
            if name not in known:
                problems.append(f"{relative}:{line}: imports {name!r}, which is neither in Python {sys.version_info.major}."
                                f"{sys.version_info.minor}'s standard library nor a requirement (a newer module? guard it "
                                "with try/except ImportError, like grader/rubric.py's tomllib)")
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve()
    problems = scan(root, set(argv[1:]))
    for problem in problems:
        print(problem)
    print(f"{len(python_files(root))} files checked under Python {sys.version.split()[0]}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
