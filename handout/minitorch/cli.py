"""What the kit's command-line modules share (provided): ``--help``, the terminal's width,
and one friendly line, instead of a traceback, when a part they run is still a stub.

    python -m minitorch.demos | timeline | companion | tp_comm | cost_model   [--help]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import traceback
from collections.abc import Callable, Sequence

# What every stub of the kit raises: NotImplementedError(stub_message("2.1", "clock_cycles")).
# kit/handout.py writes it; the public tests' summary, these commands, `make submit` and the
# grader read it back with STUB_MESSAGE (groups: the problem, the function).
STUB_MESSAGE = re.compile(r"Problem (\d+\.\d+): ([\w.]+)")


def stub_message(problem: str, name: str) -> str:
    return f"Problem {problem}: {name}"


def parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """A parser for ``python -m minitorch.<module>``, its help text the module's docstring."""
    return argparse.ArgumentParser(prog=f"python -m minitorch.{module}", description=(doc or "").strip(),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS`` when set; 100 when the output is not a terminal)."""
    return shutil.get_terminal_size((100, 24)).columns


def blocked_by(error: NotImplementedError) -> str:
    """What a stub's error says is missing: ``Problem 2.1 (clock_cycles in minitorch/pipeline.py)``."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" in minitorch/{os.path.basename(frames[-1].filename)}" if frames else ""
    match = STUB_MESSAGE.search(str(error))
    if match:
        return f"Problem {match[1]} ({match[2]}{where})"
    return f"code that raises NotImplementedError({str(error)!r}){where}"


def stub_line(program: str, error: NotImplementedError) -> str:
    return f"{program}: needs {blocked_by(error)}, which is not implemented yet; implement it and run this again"


def run(main: Callable[[Sequence[str] | None], int | None], program: str, argv: Sequence[str] | None = None) -> int:
    """``main(argv)``'s exit status; a stub it reaches becomes one line on stderr and status 1."""
    try:
        return main(argv) or 0
    except NotImplementedError as error:
        print(stub_line(program, error), file=sys.stderr)
        return 1
