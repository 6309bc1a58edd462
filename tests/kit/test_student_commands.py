"""Every command a student runs: ``--help`` works, and on the kit's stubs it says in one line
which part blocks it instead of printing a traceback.

Most cases run in this process on the kit's own stubbed student files (``handout/minitorch/
pipeline.py`` and ``tensor_parallel.py`` standing in for the answer key); one runs the real
``python -m`` in a fresh copy of the kit.
"""
import ast
import importlib
import importlib.util
import re
import subprocess
import sys

import pytest
from student_copy import KIT, borrow_environment, fresh_kit

import minitorch
from grader.layout import REPOSITORY
from minitorch import cli


def has_main_block(path) -> bool:
    """A top-level ``if __name__ == "__main__":`` (not one quoted in a docstring)."""
    return any(isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test)
               for node in ast.parse(path.read_text()).body)


# Every module of the kit with a command line: found by its __main__ block, so a new one is tested too.
COMMANDS = sorted(path.stem for path in (KIT / "minitorch").glob("*.py") if has_main_block(path))
STUB_LINE = re.compile(r"needs Problem (\d+\.\d+) \((\S+) in minitorch/(\w+\.py)\), which is not implemented yet")


def test_the_commands_are_found():
    assert {"demos", "timeline", "companion", "tp_comm", "cost_model"} <= set(COMMANDS)


@pytest.fixture
def stubs(monkeypatch):
    """The kit's stubbed student files in place of the answer key, for this test only."""
    loaded = {}
    for name in ("pipeline", "tensor_parallel"):
        spec = importlib.util.spec_from_file_location(f"minitorch.{name}", KIT / "minitorch" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, f"minitorch.{name}", module)
        spec.loader.exec_module(module)
        monkeypatch.setattr(minitorch, name, module, raising=False)
        loaded[name] = module
    return loaded


def run(command: str, argv: list[str]) -> int:
    module = importlib.import_module(f"minitorch.{command}")
    return cli.run(module.main, f"python -m minitorch.{command}", argv)


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        run(command, ["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert out.startswith(f"usage: python -m minitorch.{command}") and "--help" in out


@pytest.mark.parametrize("command, argv, problem, name", [
    ("demos", [], "2.1", "clock_cycles"),
    ("timeline", ["--width", "80"], "4.1", "one_f_one_b"),
    ("timeline", ["--schedule", "interleaved", "--width", "80"], "4.2", "interleaved_one_f_one_b"),
    ("cost_model", [], "5.1", "estimate"),
])
def test_a_stub_is_one_line_naming_what_blocks_it(stubs, capsys, command, argv, problem, name):
    status = run(command, argv)
    captured = capsys.readouterr()
    assert status == 1
    assert "Traceback" not in captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"python -m minitorch.{command}: "), captured.err
    assert STUB_LINE.search(lines[0]).groups() == (problem, name, "pipeline.py")


def test_demos_shows_what_works_then_the_next_stub(stubs, capsys):
    stubs["pipeline"].clock_cycles = _answer_key_clock_cycles()  # Problem 2.1 done, 2.2 not yet
    status = run("demos", ["-M", "2", "-K", "2"])
    captured = capsys.readouterr()
    assert status == 1
    assert "k = 2: [(1, 1)]" in captured.out  # the table from the working part
    assert STUB_LINE.search(captured.err).groups() == ("2.2", "Pipe.forward", "pipeline.py")


def _answer_key_clock_cycles():
    spec = importlib.util.spec_from_file_location("answer_key_pipeline", REPOSITORY / "minitorch" / "pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.clock_cycles


def test_companion_runs_every_section_it_can_and_names_the_stub_of_the_others(stubs, capsys):
    status = run("companion", ["1", "4", "5", "bubble"])
    out = capsys.readouterr().out
    assert status == 1 and "Traceback" not in out
    assert "lecture 1.1: GPT-3" in out and "lecture 5.6: activation memory" in out  # sections without stubs still print
    blocked = [line for line in out.splitlines() if "not implemented yet" in line]
    assert [line.split(":")[0] for line in blocked] == ["section 4", "section bubble"]
    assert all(STUB_LINE.search(line).groups() == ("4.1", "one_f_one_b", "pipeline.py") for line in blocked)


def test_companion_rejects_an_unknown_section(capsys):
    with pytest.raises(SystemExit) as exit_:
        run("companion", ["7"])
    assert exit_.value.code == 2 and "unknown section '7'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["tp_comm"])
def test_commands_without_student_code_run_on_the_stubs(stubs, capsys, command):
    assert run(command, []) == 0
    assert capsys.readouterr().out.strip()


def test_gpu_check_without_a_gpu_says_so(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert run("demos", ["--gpu"]) == 1
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_as_a_student_in_a_fresh_copy_of_the_kit(tmp_path):
    kit = fresh_kit(tmp_path / "kit")
    python = borrow_environment(kit)
    demo = subprocess.run([str(python), "-m", "minitorch.demos"], cwd=kit, capture_output=True, text=True, timeout=120)
    assert demo.returncode == 1 and "Traceback" not in demo.stderr, demo.stderr
    assert STUB_LINE.search(demo.stderr).groups() == ("2.1", "clock_cycles", "pipeline.py")
    helped = subprocess.run([str(python), "-m", "minitorch.companion", "--help"], cwd=kit, capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0 and "SECTION" in helped.stdout
