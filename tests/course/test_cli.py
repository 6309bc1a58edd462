"""The course's command line (`python -m course`) beside the grader's (`python -m grader grade`):
class commands moved out of the grader, which says where they went."""
import subprocess
import sys

from course import cli as course_cli
from grader import cli as grader_cli
from grader.layout import REPOSITORY as REPO


def test_class_commands_live_in_the_course_and_grade_in_both():
    commands = course_cli.parser()._subparsers._group_actions[0].choices  # argparse keeps them here
    assert set(commands) == {"batch", "dashboard", "feedback", "import-gradescope", "slurm", "grade"}
    assert set(grader_cli.COMMANDS) == {"grade"}


def test_the_grader_says_where_a_class_command_went(capsys):
    for command in grader_cli.CLASS_COMMANDS:
        assert grader_cli.main([command, "submissions/"]) == grader_cli.EXIT_USAGE
        assert f"`python -m course {command} ...`" in capsys.readouterr().err


def test_python_m_course_runs():
    result = subprocess.run([sys.executable, "-m", "course", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "batch" in result.stdout and "slurm" in result.stdout
