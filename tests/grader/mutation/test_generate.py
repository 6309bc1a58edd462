"""The mutant generator and its operators: each operator makes the change it names, ids survive
edits outside the region, and candidates that do not compile or change nothing are discarded."""
from __future__ import annotations

import ast
import textwrap

import pytest

from grader.layout import PROVIDED_FOLDER, STUDENT_FILES
from grader.mutation.generate import OPERATORS, generate
from grader.mutation.operators import DOMAIN, FAMILIES, STANDARD, Change, Operator

BY_NAME = {operator.name: operator for operator in OPERATORS}
SIGNATURE = "def f(n: int, x: torch.Tensor, items: list) -> torch.Tensor:"


def snippet(body: str, signature: str = SIGNATURE, header: str = "import torch") -> str:
    """A student file holding one region (problem 9.1) with ``body``, after a line above it."""
    return (f"{header}\n\nVALUE = 1\n\n\n{signature}\n    \"\"\"The contract.\"\"\"\n    # BEGIN SOLUTION 9.1\n"
            + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n    # END SOLUTION\n")


def region(source: str) -> str:
    """The region's code of a (mutated) file, dedented."""
    lines = source.splitlines()
    begin = next(i for i, line in enumerate(lines) if "BEGIN SOLUTION" in line)
    end = next(i for i, line in enumerate(lines) if "END SOLUTION" in line)
    return textwrap.dedent("\n".join(lines[begin + 1:end]))


def mutated_regions(body: str, operator: str, signature: str = SIGNATURE) -> set[str]:
    generated = generate({"snippet.py": snippet(body, signature)}, [BY_NAME[operator]])
    return {region(m.source()) for m in generated.mutants}


def code(text: str) -> str:
    """``text`` as ``ast.unparse`` writes it (the form a mutated region takes)."""
    return ast.unparse(ast.parse(textwrap.dedent(text)))


# (operator, region body, the mutated regions it must make: exactly these)
CASES = [
    ("comparison", "if n < 0:\n    raise ValueError('n')", ["if n <= 0:\n    raise ValueError('n')"]),
    ("comparison", "return x if items is None else n in items",
     ["return x if items is not None else n in items", "return x if items is None else n not in items"]),
    ("arithmetic", "return x + n * 2", ["return x - n * 2", "return x + n / 2"]),
    ("arithmetic", "n -= 1\nreturn -x", ["n += 1\nreturn -x", "n -= 1\nreturn x"]),
    ("constant", "return x[0]", ["return x[1]", "return x[-1]"]),
    ("constant", "return torch.zeros(n, requires_grad=True) + 0.5",
     ["return torch.zeros(n, requires_grad=False) + 0.5", "return torch.zeros(n, requires_grad=True) + 1.5"]),
    ("boolean", "if n and not items:\n    return x\nreturn -x",
     ["if n or not items:\n    return x\nreturn -x", "if n and items:\n    return x\nreturn -x"]),
    ("return-value", "return x", ["return None"]),
    ("memoise", "return x * n", [
        "_mutant_cache = globals().setdefault('_mutant_cache_f', {})\n_mutant_key = repr((n, x, items))\n"
        "if _mutant_key not in _mutant_cache:\n\n    def _mutant_compute(n, x, items):\n        return x * n\n"
        "    _mutant_cache[_mutant_key] = _mutant_compute(n, x, items)\nreturn _mutant_cache[_mutant_key]"]),
    ("early-return", "return x * n", ["if n == 1:\n    return x\nreturn x * n"]),
    ("delete-statement", "if n < 0:\n    raise ValueError('n')\ntorch.manual_seed(n)\nitems[0] = x\nreturn x",
     ["pass\ntorch.manual_seed(n)\nitems[0] = x\nreturn x", "if n < 0:\n    raise ValueError('n')\npass\nitems[0] = x\nreturn x",
      "if n < 0:\n    raise ValueError('n')\ntorch.manual_seed(n)\npass\nreturn x"]),
    ("unwrap", "with torch.no_grad():\n    y = x * 2\nreturn y", ["y = x * 2\nreturn y"]),
    ("unwrap", "try:\n    y = x * 2\nexcept BaseException:\n    raise\nreturn y", ["y = x * 2\nreturn y"]),
    ("narrow-except", "try:\n    y = x * 2\nexcept BaseException:\n    raise\nreturn y",
     ["try:\n    y = x * 2\nexcept Exception:\n    raise\nreturn y"]),
    ("hard-code-size", "return x.shape[0] + len(items) + x.size(1)",
     ["return 2 + len(items) + x.size(1)", "return x.shape[0] + 2 + x.size(1)", "return x.shape[0] + len(items) + 2"]),
    ("swap-arguments", "return torch.cat([x, x], max(n, 1)) + pow(n, 2)", ["return torch.cat([x, x], max(n, 1)) + pow(2, n)",
                                                                             "return torch.cat(max(n, 1), [x, x]) + pow(n, 2)"]),
    ("dtype", "return x * n", ["return (x * n).double()", "return (x * n).float()"]),
    ("container", "return [n, n]", ["return tuple([n, n])"]),
    ("in-place", "x = x + n\nreturn x * 2", ["x += n\nreturn x * 2", "x = x + n\nreturn x.mul_(2)"]),
    ("in-place", "return x.exp() + (x * 2).exp()", ["return x.exp_() + (x * 2).exp()", "return x.exp() + x.mul_(2).exp()"]),
    ("drop-call", "return x.contiguous().detach()", ["return x.detach()", "return x.contiguous()"]),
    ("add-detach", "return x * n", ["return (x * n).detach()"]),
    ("drop-keyword", "return torch.cat([x, x], dim=n)", ["return torch.cat([x, x])"]),
    ("confusable-call", "return torch.split(x, n)", ["return torch.chunk(x, n)"]),
]


@pytest.mark.parametrize("operator, body, expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_operator_makes_the_changes_it_names_and_no_other(operator, body, expected):
    assert mutated_regions(body, operator) == {code(e) for e in expected}


def test_operators_that_need_a_tensor_leave_ints_alone():
    body = "m = n + 1\nm = m * 2\nreturn m"
    for operator in ("in-place", "dtype", "add-detach"):
        assert mutated_regions(body, operator, "def f(n: int) -> int:") == set(), operator


def test_a_generator_is_made_a_list_and_eager_and_memoised_as_a_replay():
    body = "for i in range(n):\n    yield [i]"
    signature = "def f(n: int):"
    made = mutated_regions(body, "generator-to-list", signature)
    inner = "def _mutant_generator(n):\n    for i in range(n):\n        yield [i]\n"
    assert made == {code(inner + "return list(_mutant_generator(n))"), code(inner + "return iter(list(_mutant_generator(n)))")}
    (memoised,) = mutated_regions(body, "memoise", signature)
    assert "yield from _mutant_cache[_mutant_key]" in memoised and "_mutant_items.append(_mutant_item)" in memoised
    source = snippet(body, signature, header="")  # run below: no torch needed
    original: dict = {}
    exec(source, original)
    assert original["f"](2) is not original["f"](2) and list(original["f"](2))[0] is not list(original["f"](2))[0]
    memoising: dict = {}
    exec(generate({"snippet.py": source}, [BY_NAME["memoise"]]).mutants[0].source(), memoising)
    first, second = list(memoising["f"](2)), list(memoising["f"](2))
    assert first == second == [[0], [1]] and first[0] is second[0]  # the same objects handed out again


def test_every_mutant_has_a_stable_id_a_description_a_problem_and_a_family():
    (mutant,) = generate({"snippet.py": snippet("if n < 0:\n    raise ValueError('n')\nreturn x")},
                         [BY_NAME["comparison"]]).mutants
    assert mutant.id.startswith("9.1:f:comparison:0.test:") and len(mutant.id.rsplit(":", 1)[1]) == 6
    assert mutant.description == "9.1 f: '<' -> '<=' in \"if n < 0:\""
    assert (mutant.problem, mutant.family, mutant.operator, mutant.file) == ("9.1", STANDARD, "comparison", "snippet.py")


@pytest.fixture(scope="module")
def key_sources() -> dict[str, str]:
    return {name: (PROVIDED_FOLDER / name).read_text() for name in STUDENT_FILES}


@pytest.fixture(scope="module")
def key_mutants(key_sources):
    return generate(key_sources)


def test_ids_survive_a_line_added_above_a_region(key_sources, key_mutants):
    edited = {}
    for name, source in key_sources.items():
        lines = source.splitlines(keepends=True)
        second = [i for i, line in enumerate(lines) if "BEGIN SOLUTION" in line][1]
        def_line = max(i for i in range(second) if lines[i].lstrip().startswith("def "))
        lines.insert(def_line, "\n# a comment above a function\n")
        edited[name] = "# a line at the top\n" + "".join(lines)
    before = {m.id: m.description for m in key_mutants.mutants}
    assert {m.id: m.description for m in generate(edited).mutants} == before


def test_an_edit_inside_a_region_changes_only_that_regions_ids():
    source = snippet("if n < 0:\n    raise ValueError('n')\nreturn x")
    other = source.replace("if n < 0:", "if n < 1:")
    assert {m.id for m in generate({"s.py": source}).mutants} != {m.id for m in generate({"s.py": other}).mutants}


def test_a_mutant_that_does_not_compile_is_discarded():
    def awaits(node, context):
        if isinstance(node, ast.Return):
            yield Change(ast.Expr(ast.Await(node.value)), "await the result")  # await outside an async function

    generated = generate({"snippet.py": snippet("return x")}, [Operator("awaits", DOMAIN, awaits)])
    assert generated.mutants == [] and generated.not_compiling == 1 and generated.not_compiling_ids[0].startswith("9.1:f:awaits:")


def test_a_mutant_that_changes_nothing_is_discarded():
    def same(node, context):
        if isinstance(node, ast.Return):
            yield Change(ast.Return(node.value), "the same")

    generated = generate({"snippet.py": snippet("return x")}, [Operator("same", STANDARD, same)])
    assert generated.mutants == [] and generated.identical == 1


def test_a_mutant_changes_its_region_only_and_compiles():
    source = snippet("if n < 0:\n    raise ValueError('n')  # a comment\nreturn x")
    for mutant in generate({"snippet.py": source}).mutants:
        mutated = mutant.source()
        compile(mutated, "snippet.py", "exec")
        head, tail = source.split("# BEGIN SOLUTION 9.1\n")[0], source.split("    # END SOLUTION\n")[1]
        assert mutated.startswith(head) and mutated.endswith("    # END SOLUTION\n" + tail)


def test_the_answer_key_has_mutants_of_both_families_in_every_problem_with_a_region(key_mutants):
    generated = key_mutants
    problems = {m.problem for m in generated.mutants}
    assert {"2.1", "2.2", "2.4", "3.1", "3.6", "4.1", "4.3", "5.1", "5.2"} <= problems
    for problem in problems:
        families = {m.family for m in generated.mutants if m.problem == problem}
        assert families == set(FAMILIES), (problem, families)
    assert generated.not_compiling == 0
    assert len({m.id for m in generated.mutants}) == len(generated.mutants)
