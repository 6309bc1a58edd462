"""What the grader says about a child that ended without a result: stopped at the size limit
on its files (printing too much, or writing another file too big), or killed by signals the
grader did not send, once run again (the same signal twice, or two different ones). The
outcomes are built here; tests/catalogue/ (hostile-big-file, hostile-print-flood,
hostile-kills-itself) and test_isolation.py produce them with real children."""
from __future__ import annotations

import signal

import pytest

from grader.grading import judge
from grader.harness import Outcome
from grader.protocol import Kind, Status

LIMIT_MB = 16


def message(kind: Kind, exitcode: int | None, output_bytes: int = 0, first_signal: str | None = None) -> str:
    outcome = Outcome(kind, {}, 1.0, exitcode, "", output_bytes, first_signal=first_signal)
    status, text = judge(None, 0, outcome, None, 60.0, LIMIT_MB)
    assert status == Status.FAILED, (status, text)
    return text


def test_printing_past_the_limit_says_it_printed_too_much():
    text = message(Kind.FLOOD, -signal.SIGXFSZ, output_bytes=LIMIT_MB * 1024 * 1024)
    assert "printed more than the 16 MB output limit" in text and "printed 16.0 MB" in text, text


@pytest.mark.parametrize("printed, shown", [(0, "printed 0 bytes"), (3000, "printed 3 KB")])
def test_a_file_written_past_the_limit_is_named_as_such(printed, shown):
    text = message(Kind.FLOOD, -signal.SIGXFSZ, output_bytes=printed)
    assert text.startswith("wrote a file past the 16 MB file-size limit and was stopped"), text
    assert "printed more than" not in text and shown in text, text


def test_killed_once_says_nothing_of_a_second_run():
    text = message(Kind.EXITED, -signal.SIGKILL)
    assert "was killed by SIGKILL, a signal the grader did not send" in text, text
    assert "twice" not in text and "again" not in text, text


def test_killed_twice_by_the_same_signal_says_so():
    text = message(Kind.EXITED, -signal.SIGKILL, first_signal="SIGKILL")
    assert text.startswith("was killed by SIGKILL, a signal the grader did not send"), text
    assert "it was run again and killed by SIGKILL again before reporting a result" in text, text


def test_killed_by_two_different_signals_names_both_in_order():
    text = message(Kind.EXITED, -signal.SIGTERM, first_signal="SIGKILL")
    assert "again before" not in text, text
    assert text.startswith("was killed by SIGKILL, run again, and then killed by SIGTERM, a signal the grader did not send"), text


def test_a_crash_after_a_foreign_kill_names_the_crash():
    text = message(Kind.EXITED, -signal.SIGSEGV, first_signal="SIGKILL")
    assert text.startswith("was killed by SIGKILL, run again, and then killed by SIGSEGV (a crash in native code?)"), text
