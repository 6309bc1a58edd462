"""How long the similarity pass takes on a class: ``python -m benchmarks.similarity_scale``.

Builds a synthetic class of N students in a temporary folder, as ``batch`` sees one (a
folder per student with ``pipeline.py`` and ``tensor_parallel.py``), runs the same pass as
``python -m course batch`` and checks what it found.

Each student starts from the kit's stubs and fills every solution region with code written
independently of everyone else's: function bodies of the Python standard library, drawn
without replacement, as long as the answer key's solution of that region. Planted in the
class: ``--copies`` students who copied another student (names and comments changed, lines
re-spaced) and one who copied a known public solution (the answer key). The pass must find
exactly those pairs. It prints the wall-clock and the CPU seconds of the pass (one process:
on a busy machine the CPU figure is the one that says what it costs).
"""
from __future__ import annotations

import argparse
import ast
import builtins
import json
import keyword
import random
import re
import sys
import sysconfig
import tempfile
import textwrap
import time
from pathlib import Path

from course import similarity
from grader.submission import STUDENT_FILES

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
STUB_LINE = re.compile(r'^(?P<indent>[ \t]*)raise NotImplementedError\("Problem (?P<problem>\d+\.\d+):.*$')
SOLUTION = re.compile(r"# BEGIN SOLUTION (\d+\.\d+)\n(.*?)# END SOLUTION", re.S)


def library_bodies(count: int, minimum_lines: int = 4) -> list[str]:
    """``count`` function bodies (or all there are) of the standard library's modules,
    dedented, docstrings dropped."""
    bodies: list[str] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        if len(bodies) >= count:
            break
        try:
            source = path.read_text()
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body[1:] if ast.get_docstring(node) else node.body
                if body and body[-1].end_lineno - body[0].lineno + 1 >= minimum_lines:
                    bodies.append(textwrap.dedent("\n".join(lines[body[0].lineno - 1:body[-1].end_lineno])))
    return bodies


def solution_lengths() -> dict[str, list[int]]:
    """Lines of each solution region of the answer key, per student file, in order."""
    return {
        name: [body.count("\n") for _, body in SOLUTION.findall((REPO / "minitorch" / name).read_text())]
        for name in STUDENT_FILES
    }


def fill(stub: str, lengths: list[int], bodies: list[str]) -> str:
    """``stub`` with its n-th ``raise NotImplementedError`` replaced by library code of about
    ``lengths[n]`` lines (``bodies`` is consumed)."""
    out, region = [], 0
    for line in stub.splitlines():
        match = STUB_LINE.match(line)
        if not match:
            out.append(line)
            continue
        wanted, code = lengths[min(region, len(lengths) - 1)], []
        while len(code) < wanted:
            if not bodies:
                raise RuntimeError("the standard library ran out of function bodies for this many students")
            code += bodies.pop().splitlines()
        out += [match["indent"] + text if text else "" for text in code]
        region += 1
    return "\n".join(out) + "\n"


def disguise(text: str, rng: random.Random) -> str:
    """What a copier does: rename the names they see, rewrite the comments, re-space lines."""
    names = sorted({n for n in re.findall(r"\b[a-z_][a-z0-9_]{3,}\b", text)} - set(dir(builtins)) - set(keyword.kwlist))
    renamed = {name: f"{name}_{rng.randrange(100)}" for name in rng.sample(names, min(30, len(names)))}
    text = re.sub(r"\b[a-z_][a-z0-9_]{3,}\b", lambda m: renamed.get(m[0], m[0]), text)
    lines = [re.sub(r"#.*$", "# my own work", line) if rng.random() < 0.5 else line for line in text.splitlines()]
    return "\n\n".join(lines) + "\n"


def make_class(folder: Path, students: int, copies: int, seed: int) -> tuple[set[tuple[str, str]], Path]:
    """Write the class and a public-solutions folder; return the planted pairs and that folder."""
    rng = random.Random(seed)
    stubs, lengths = similarity.read_stubs(), solution_lengths()
    bodies = library_bodies(students * sum(map(len, lengths.values())) * 2)  # each filled region takes about two
    rng.shuffle(bodies)
    names = [f"student{index:03d}" for index in range(students)]
    copiers = dict(zip(names[-copies - 1:-1], names[:copies]))  # copier -> whom they copied
    public_copier = names[-1]
    planted = {(min(a, b), max(a, b)) for a, b in copiers.items()} | {(public_copier, "public:answer-key")}
    written: dict[str, dict[str, str]] = {}
    for name in names:
        if name in copiers:
            files = {f: disguise(text, rng) for f, text in written[copiers[name]].items()}
        elif name == public_copier:
            files = {f: disguise((REPO / "minitorch" / f).read_text(), rng) for f in STUDENT_FILES}
        else:
            files = {f: fill(stubs[f], lengths[f], bodies) for f in STUDENT_FILES}
        written[name] = files
        (folder / "class" / name).mkdir(parents=True)
        for file, text in files.items():
            (folder / "class" / name / file).write_text(text)
    public = folder / "public" / "answer-key"
    public.mkdir(parents=True)
    for file in STUDENT_FILES:
        (public / file).write_text((REPO / "minitorch" / file).read_text())
    return planted, folder / "public"


def measure(students: int, copies: int, seed: int = 0) -> dict:
    from course.discovery import discover

    with tempfile.TemporaryDirectory() as temporary:
        planted, public = make_class(Path(temporary), students, copies, seed)
        found, _ = discover(Path(temporary) / "class", Path(temporary) / "unpacked")
        entries = [(student.name, student.path) for student in found]
        start, cpu = time.monotonic(), time.process_time()
        result = similarity.run(entries, public_folder=public)
        seconds, cpu = time.monotonic() - start, time.process_time() - cpu
    found = {(p["a"], p["b"]) if p["b"].startswith("public:") else tuple(sorted((p["a"], p["b"]))) for p in result["pairs"]}
    return {
        "students": students, "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "planted": len(planted),
        "found": len(found & planted), "missed": sorted(map(list, planted - found)),
        "unexpected": sorted(map(list, found - planted)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.similarity_scale", description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--copies", type=int, default=5, help="students who copied another student")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.students < 2 * args.copies + 2:
        parser.error("--students must be at least 2 * --copies + 2")
    outcome = measure(args.students, args.copies, args.seed)
    print(json.dumps(outcome, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "similarity_scale.json").write_text(json.dumps(outcome, indent=1) + "\n")
    return 0 if not outcome["missed"] and not outcome["unexpected"] else 1


if __name__ == "__main__":
    sys.exit(main())
