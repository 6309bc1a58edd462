"""``python -m minitorch.hint`` (and ``make hint``): the next hint of a sub-problem, remembered
across runs; ``--again``, ``--list``, ``--reset``; a clear message for an unknown sub-problem and
when no hint is left. On hints of its own in a scratch folder, then once as a student runs it."""
import json
import subprocess

import pytest
from student_copy import fresh_kit

from kit.handout import IGNORED_NAMES
from minitorch import cli, hint


@pytest.fixture
def kit(tmp_path, monkeypatch):
    """Hints for 2.2 (three) and 3.1 (one) in a scratch kit; the command reads and remembers there."""
    for problem, texts in {"2.2": ["Read the docstrings.", "Use clock_cycles.", "Receive the whole wave."],
                           "3.1": ["Pair the ops up."]}.items():
        folder = tmp_path / "hints" / problem
        folder.mkdir(parents=True)
        for number, text in enumerate(texts, 1):
            (folder / f"{number}.md").write_text(text + "\n")
    monkeypatch.setattr(hint, "HINTS", tmp_path / "hints")
    monkeypatch.setattr(hint, "STATE", tmp_path / ".hints.json")
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        status = cli.run(hint.main, hint.PROGRAM, list(argv))
    except SystemExit as exit_:  # argparse: --help, usage errors
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_each_call_prints_the_next_hint_and_remembers_it(kit, capsys):
    status, out, _ = run(capsys, "2.2")
    assert status == 0 and out.startswith("Problem 2.2, hint 1 of 3\n") and "Read the docstrings." in out
    assert "2 more" in out and "Use clock_cycles" not in out
    assert json.loads((kit / ".hints.json").read_text()) == {"2.2": 1}
    status, out, _ = run(capsys, "2.2")
    assert out.startswith("Problem 2.2, hint 2 of 3\n") and "Use clock_cycles." in out and "Read the" not in out
    status, out, _ = run(capsys, "problem_2_2")  # the test markers' spelling names the same sub-problem
    assert out.startswith("Problem 2.2, hint 3 of 3\n") and "That was the last hint of 2.2" in out


def test_when_no_hint_is_left_it_says_so_and_how_to_see_them_again(kit, capsys):
    for _ in range(3):
        run(capsys, "2.2")
    status, out, _ = run(capsys, "2.2")
    assert status == 0
    assert out.startswith("You have seen all 3 hints of 2.2.") and "--again" in out and "--reset 2.2" in out
    assert "Receive the whole wave." not in out
    assert json.loads((kit / ".hints.json").read_text()) == {"2.2": 3}


def test_again_prints_the_hints_seen_without_counting_a_new_one(kit, capsys):
    assert "No hint of 2.2 shown yet" in run(capsys, "2.2", "--again")[1]
    run(capsys, "2.2")
    run(capsys, "2.2")
    status, out, _ = run(capsys, "2.2", "--again")
    assert status == 0 and "Read the docstrings." in out and "Use clock_cycles." in out
    assert "Receive the whole wave." not in out
    assert json.loads((kit / ".hints.json").read_text()) == {"2.2": 2}


def test_list_shows_how_many_of_each_were_seen(kit, capsys):
    run(capsys, "3.1")
    status, out, _ = run(capsys, "--list")
    assert status == 0
    assert out.splitlines()[:2] == ["2.2    0 of 3 hints shown", "3.1    1 of 1 hints shown"]


def test_reset_forgets_one_sub_problem_or_all(kit, capsys):
    run(capsys, "2.2")
    run(capsys, "3.1")
    assert run(capsys, "--reset", "2.2")[0] == 0
    assert json.loads((kit / ".hints.json").read_text()) == {"3.1": 1}
    assert "hint 1 of 3" in run(capsys, "2.2")[1]
    run(capsys, "--reset")
    assert not (kit / ".hints.json").exists()
    assert "hint 1 of 1" in run(capsys, "3.1")[1]


@pytest.mark.parametrize("argv", [["9.9"], ["2.3"], ["two"], ["9.9", "--again"], ["--reset", "9.9"]])
def test_an_unknown_sub_problem_names_those_that_have_hints(kit, capsys, argv):
    status, out, err = run(capsys, *argv)
    assert status == 2 and not out and "Traceback" not in err
    assert f"no hints for {argv[-1] if argv[0] == '--reset' else argv[0]!r}" in err
    assert "the sub-problems with hints are: 2.2, 3.1" in err
    assert not (kit / ".hints.json").exists()


@pytest.mark.parametrize("argv, message", [([], "name a sub-problem"), (["--list", "2.2"], "--list takes no problem"),
                                           (["--again"], "name a sub-problem")])
def test_a_call_that_names_no_sub_problem_says_what_to_give(kit, capsys, argv, message):
    status, _, err = run(capsys, *argv)
    assert status == 2 and message in err


def test_an_unreadable_record_counts_no_hint_as_shown(kit, capsys):
    (kit / ".hints.json").write_text("{not json")
    status, out, err = run(capsys, "2.2")
    assert status == 0 and "hint 1 of 3" in out and ".hints.json is unreadable" in err
    assert json.loads((kit / ".hints.json").read_text()) == {"2.2": 1}


def test_help_says_how_to_use_it(capsys):
    status, out, _ = run(capsys, "--help")
    assert status == 0
    for words in ("python -m minitorch.hint 2.2", "--again", "--list", "--reset", "make hint P=2.2"):
        assert words in out


def test_as_a_student_with_make_in_a_fresh_copy_of_the_kit(tmp_path):
    """The kit's own hints through its Makefile, before anything is installed."""
    folder = fresh_kit(tmp_path / "kit")

    def make_hint(*words: str) -> str:
        result = subprocess.run(["make", "--no-print-directory", "hint", *words], cwd=folder, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    first, second = make_hint("P=2.2"), make_hint("P=2.2")
    assert first.startswith("Problem 2.2, hint 1 of ") and second.startswith("Problem 2.2, hint 2 of ")
    assert first.split("\n", 3)[2] == (folder / "hints" / "2.2" / "1.md").read_text().split("\n")[0]
    assert "2.2    2 of " in make_hint()
    assert ".hints.json" in (folder / ".gitignore").read_text().split() and ".hints.json" in IGNORED_NAMES
