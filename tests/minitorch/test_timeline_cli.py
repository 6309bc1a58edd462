"""``python -m minitorch.timeline`` as a command: piped into a reader that stops early."""
import subprocess
import sys

from grader.layout import REPOSITORY


def test_a_reader_that_stops_early_gets_no_traceback():
    # A timeline far wider than a pipe's buffer, read one line (as `| head -1` does).
    command = [sys.executable, "-m", "minitorch.timeline", "--schedule", "gpipe", "-K", "16", "-M", "64", "--width", "4000"]
    with subprocess.Popen(command, cwd=REPOSITORY, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        first = process.stdout.readline()
        process.stdout.close()  # the reader goes away
        stderr = process.stderr.read().decode()
        process.wait(timeout=60)
    assert first.startswith(b"gpipe, K = 16, M = 64")
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr[-2000:]
