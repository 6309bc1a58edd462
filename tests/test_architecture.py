"""The arrows between the repository's roles point one way (see docs/architecture.md, "Layout").

An ``ast`` walk over every ``import`` statement, module level and inside functions:
- no cycle among ``minitorch/`` modules;
- no provided module imports a student file, except the command-line entry points that
  exist to run the student's code, and those only inside functions (never at import);
- ``grader/`` imports nothing from ``kit/`` or ``course/`` (except the mutation measure,
  ``grader/mutation/``, which grades nothing and which nothing that grades imports);
  ``minitorch/`` imports none of them;
- ``course/`` (running a class) uses the grader, never the kit builder, and its modules form no
  cycle (shared pieces have a public home, :mod:`course.outcomes`; nothing imports another
  module's private name).
"""
from __future__ import annotations

import ast
from pathlib import Path

from grader.layout import PACKAGE, REPOSITORY, STUDENT_FILES

STUDENT_MODULES = {f"{PACKAGE}.{name[:-3]}" for name in STUDENT_FILES}
# Provided modules whose job is to run the student's code from the command line.
ENTRY_POINTS = {"minitorch.demos", "minitorch.timeline", "minitorch.companion", "minitorch.measure",
                "minitorch.cost_model"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPOSITORY).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, bool]]:
    """``(imported module, at module level?)`` for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in top_level))
            found += [(f"{node.module}.{alias.name}", id(node) in top_level) for alias in node.names]
    return found


def graph(folder: str) -> dict[str, list[tuple[str, bool]]]:
    modules = {module_name(p): p for p in sorted((REPOSITORY / folder).rglob("*.py"))}
    return {name: [(m, top) for m, top in imports(path) if m in modules] for name, path in modules.items()}


def find_cycle(edges: dict[str, list[str]]) -> list[str] | None:
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = "open"
        for target in edges.get(node, []):
            if state.get(target) == "open":
                return trail[trail.index(target):] + [target] if target in trail else [node, target]
            if target not in state:
                cycle = visit(target, trail + [target])
                if cycle:
                    return cycle
        state[node] = "done"
        return None

    for start in edges:
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return None


def lazy_run_of_student_code(name: str, module: str, top_level: bool) -> bool:
    """An entry point importing a student file inside a function, to run it: not a cycle (the
    student file may use the entry point's data types, e.g. pipeline.py's cost_model.Estimate)."""
    return name in ENTRY_POINTS and module in STUDENT_MODULES and not top_level


def test_no_cycle_among_minitorch_modules():
    edges = {name: sorted({m for m, top in found if m != name and not lazy_run_of_student_code(name, m, top)})
             for name, found in graph("minitorch").items()}
    assert find_cycle(edges) is None, f"import cycle: {' -> '.join(find_cycle(edges) or [])}"


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": []}) is None


def test_provided_modules_do_not_import_student_files():
    offenders = []
    for name, found in graph("minitorch").items():
        if name in STUDENT_MODULES:
            continue
        for module, top_level in found:
            if module in STUDENT_MODULES and (name not in ENTRY_POINTS or top_level):
                offenders.append(f"{name} imports {module}{' at module level' if top_level else ''}")
    assert not offenders, offenders


# The mutation measure (make mutation) mutates the answer key's solution regions as the kit's
# own parser finds them; it grades nothing and nothing that grades imports it.
MUTATION = REPOSITORY / "grader" / "mutation"


def test_grader_and_minitorch_never_import_the_kit_builder():
    for folder in ("grader", "minitorch", "course"):
        for path in sorted((REPOSITORY / folder).rglob("*.py")):
            if MUTATION in path.parents:
                continue
            kit = [m for m, _ in imports(path) if m == "kit" or m.startswith("kit.")]
            assert not kit, f"{path.relative_to(REPOSITORY)} imports {kit}"


def test_nothing_that_grades_imports_the_mutation_measure():
    """So it never reaches the Gradescope bundle, which ships what grading imports."""
    for path in sorted((REPOSITORY / "grader").rglob("*.py")):
        if MUTATION not in path.parents:
            mutation = [m for m, _ in imports(path) if m.startswith("grader.mutation")]
            assert not mutation, f"{path.relative_to(REPOSITORY)} imports {mutation}"


def test_minitorch_never_imports_the_grader():
    for path in sorted((REPOSITORY / "minitorch").rglob("*.py")):
        grader = [m for m, _ in imports(path) if m == "grader" or m.startswith("grader.")]
        assert not grader, f"{path.relative_to(REPOSITORY)} imports {grader}"


def test_the_grader_never_imports_the_course():
    for folder in ("grader", "minitorch", "kit"):
        for path in sorted((REPOSITORY / folder).rglob("*.py")):
            course = [m for m, _ in imports(path) if m == "course" or m.startswith("course.")]
            assert not course, f"{path.relative_to(REPOSITORY)} imports {course}"


def test_no_cycle_among_course_modules_and_no_private_imports():
    found = graph("course")
    edges = {name: sorted({m for m, _ in imports_ if m != name and m in found}) for name, imports_ in found.items()}
    assert find_cycle(edges) is None, f"import cycle: {' -> '.join(find_cycle(edges) or [])}"
    private = [f"{path.name} imports {m}" for path in sorted((REPOSITORY / "course").rglob("*.py"))
               for m, _ in imports(path) if m.startswith("course.") and m.rsplit(".", 1)[-1].startswith("_")
               and not m.endswith("__")]
    assert not private, private
