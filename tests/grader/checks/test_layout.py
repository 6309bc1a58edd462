"""The trust boundary inside grader/checks/: a criterion's child side (what the forkserver
preloads and every child holds) contains no judge, no expected value and no message; the parent
side (``judge.py``, ``judge_*.py``, ``expected*.py``, ``grader.checks.judging``) is never imported
by it. Checked on a fresh interpreter that imports exactly what the harness preloads."""
from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.layout import REPOSITORY
from grader.rubric import load_rubric

CRITERIA = load_rubric().criteria
SPLIT = [c for c in CRITERIA if "." in c.check.split(":")[0]]


def is_parent_side(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return module == "grader.checks.judging" or last.startswith(("judge", "expected"))


def preloaded_modules(preload: list[str] | None = None) -> list[str]:
    """The grader modules loaded by importing ``preload`` in a fresh interpreter (by default
    grader.child and every split check's child side together: more than any one child holds)."""
    preload = preload or ["grader.child", *sorted({c.observe_module for c in SPLIT})]
    script = (f"import importlib, json, sys\nfor name in {preload!r}: importlib.import_module(name)\n"
              "print(json.dumps(sorted(m for m in sys.modules if m == 'grader' or m.startswith('grader.'))))")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPOSITORY, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_childs_forkserver_preloads_no_check_module():
    """Each child imports its own criterion's child side: the forkserver holds torch and the
    child's code only, so no child inherits another criterion's cases or pieces."""
    from multiprocessing import forkserver

    from grader.harness import forkserver_context

    for module in {c.observe_module for c in SPLIT}:
        importlib.import_module(module)  # forkserver_context reads what the imported modules ask for
    try:
        forkserver_context(sorted({c.observe_module for c in SPLIT}))
        preloaded = forkserver._forkserver._preload_modules
        assert not [name for name in preloaded if name.startswith("grader.checks")], preloaded
    finally:
        forkserver_context([])


FOUR_ONE = [c for c in CRITERIA if c.problem == "4.1"]


@pytest.mark.parametrize("criterion", FOUR_ONE, ids=[c.id for c in FOUR_ONE])
def test_a_4_1_child_holds_not_the_graders_one_f_one_b(criterion):
    """The grader's own 1F1B builder is 4.1's answer: only the children of 4.2 and 4.4 (whose
    fallback needs it) load it, never a 4.1 child (the red-team round stole it from there)."""
    held = preloaded_modules(["grader.child", criterion.observe_module])
    assert "grader.checks.problem4.pieces" not in held, held


def test_a_child_holds_no_parent_side_module():
    held = preloaded_modules()
    assert "grader.child" in held
    assert [name for name in held if is_parent_side(name)] == []


def _source(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return ast.parse(Path(spec.origin).read_text())


def _strings(tree: ast.AST, shortest: int = 25) -> set[str]:
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and len(node.value) >= shortest}


@pytest.mark.parametrize("criterion", SPLIT, ids=[c.id for c in SPLIT])
def test_the_child_side_neither_judges_nor_words_a_failure(criterion):
    """The observe module defines no judge, never names Fail/Malformed, and holds none of the
    judge module's messages or expected-value tables (its longer string constants)."""
    child, parent = _source(criterion.observe_module), _source(criterion.judge_module)
    judges = [n.name for n in ast.walk(child) if isinstance(n, ast.FunctionDef) and n.name.startswith("judge")]
    assert judges == [], f"{criterion.observe_module} defines {judges}"
    named = {n.id for n in ast.walk(child) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(child) if isinstance(n, ast.Attribute)}
    assert not named & {"Fail", "Malformed"}, f"{criterion.observe_module} fails criteria itself"
    shared = _strings(child) & _strings(parent)
    assert not shared, f"{criterion.observe_module} holds the judge's text: {sorted(shared)[:3]}"


@pytest.mark.parametrize("criterion", CRITERIA, ids=[c.id for c in CRITERIA])
def test_every_check_is_split_at_the_trust_boundary(criterion):
    package = criterion.check.split(":")[0]
    assert "." in package, f"{criterion.id}: {criterion.check} is a one-module check (child and parent in one file)"


THREE = [c for c in CRITERIA if c.problem.startswith("3.") and c.problem != "3.3"]
# The grader's pieces that are a sub-problem's own answer (3.5's: the sequence-parallel paths of
# the linear layers and the LayerNorm). 3.3's children hold the grader's MLP and attention, which
# 3.3-layer's fallback binds (docs/security.md, known gaps).
OWN_ANSWERS = {"3.2": ("ColumnParallelLinear", "RowParallelLinear"), "3.4": ("VocabParallelEmbedding", "_CrossEntropy"),
               "3.5": ("ColumnParallelLinear", "RowParallelLinear", "ReplicatedLayerNorm")}
ANSWERS = ("ColumnParallelLinear", "RowParallelLinear", "ReplicatedLayerNorm", "layer_classes", "VocabParallelEmbedding",
           "_CrossEntropy")


@pytest.mark.parametrize("criterion", THREE, ids=[c.id for c in THREE])
def test_a_problem_3_child_holds_no_graders_piece_of_its_own_sub_problem(criterion):
    """The grader's Problem 3 pieces are the sub-problems' answers: a child loads only the
    pieces its fallback binds, so 3.2's child never holds the grader's linear layers, 3.4's no
    embedding or loss, 3.5's no sequence-parallel linear layer or LayerNorm."""
    script = (f"import importlib, sys\nimportlib.import_module('grader.child')\n"
              f"importlib.import_module({criterion.observe_module!r})\n"
              f"print(sorted({{answer for name, module in list(sys.modules.items())\n"
              f"             if name.startswith('grader.checks') for answer in {ANSWERS!r} if hasattr(module, answer)}}))")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPOSITORY, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    held = set(ast.literal_eval(done.stdout.strip()))
    assert not held & set(OWN_ANSWERS.get(criterion.problem, ())), held


def test_binding_the_graders_3_1_ops_loads_no_other_piece():
    """What a check binds comes from the piece modules its child side imported, nothing more."""
    script = ("import sys, types\nfrom grader.checks.problem3 import pieces, pieces_ops\n"
              "student = types.ModuleType('tensor_parallel')\n"
              "with pieces.bound(student, {'pieces': 'grader'}, ops=True):\n"
              "    bound = 'copy_to_tensor_model_parallel_region' in vars(student)\n"
              "print(bound, sorted(m.rsplit('.', 1)[-1] for m in sys.modules if m.startswith('grader.checks.problem3.pieces')))")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPOSITORY, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "['pieces',", "'pieces_ops']"]
