"""Hints, one at a time (provided). Each sub-problem has a few, from a nudge to nearly the answer;
try first, then ask for the next one. How many of each you have seen is remembered in
.hints.json beside this kit's README (delete it, or use --reset, to start over).

    python -m minitorch.hint 2.2            the next hint of Problem 2.2
    python -m minitorch.hint 2.2 --again    the hints of 2.2 you have seen, again
    python -m minitorch.hint --list         every sub-problem with hints: how many you have seen
    python -m minitorch.hint --reset 2.2    forget the hints of 2.2 you have seen (--reset: of all)

The same from make: `make hint P=2.2`, and `make hint` for the list.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from minitorch import cli

KIT = Path(__file__).resolve().parents[1]
HINTS = KIT / "hints"  # hints/2.2/1.md, 2.md, ... (the kit's build writes them)
STATE = KIT / ".hints.json"  # {"2.2": 2}: how many hints of each problem have been shown
PROGRAM = "python -m minitorch.hint"
_PROBLEM = re.compile(r"^(?:problem_?)?(\d+)[._](\d+)$", re.IGNORECASE)


class HintError(Exception):
    """Something the student asked for that has no answer; the message says what there is."""


def available(hints: Path = HINTS) -> dict[str, list[Path]]:
    """Every sub-problem with hints, in order (``2.1`` before ``2.10``), with its hint files in order."""
    found = {}
    for folder in hints.iterdir() if hints.is_dir() else []:
        files = sorted((p for p in folder.glob("*.md") if p.stem.isdigit()), key=lambda p: int(p.stem))
        if _PROBLEM.match(folder.name) and files:
            found[folder.name] = files
    return dict(sorted(found.items(), key=lambda item: tuple(int(n) for n in item[0].split("."))))


def problem_name(text: str, known: dict[str, list[Path]]) -> str:
    """``2.2`` from ``2.2`` (or ``2_2``, ``problem_2_2``, the test markers' spelling)."""
    match = _PROBLEM.match(text.strip())
    name = f"{match[1]}.{match[2]}" if match else text
    if name not in known:
        choices = ", ".join(known) or "none (no hints folder beside this kit's README)"
        raise HintError(f"no hints for {text!r}; the sub-problems with hints are: {choices}")
    return name


def read_state(state: Path = STATE) -> dict[str, int]:
    """How many hints of each problem were shown; a missing or unreadable file counts as none."""
    try:
        shown = json.loads(state.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        print(f"{PROGRAM}: {state.name} is unreadable ({error}); counting no hint as shown", file=sys.stderr)
        return {}
    if not isinstance(shown, dict):
        return {}
    return {k: v for k, v in shown.items() if isinstance(k, str) and isinstance(v, int) and v > 0}


def write_state(shown: dict[str, int], state: Path = STATE) -> None:
    """Replace ``state`` at once (a second command never reads half a file)."""
    with tempfile.NamedTemporaryFile("w", dir=state.parent, prefix=".hints-", suffix=".tmp", delete=False) as handle:
        json.dump(dict(sorted(shown.items())), handle, indent=1)
    os.replace(handle.name, state)


def _shown_text(problem: str, number: int, files: list[Path]) -> str:
    title = f"Problem {problem}, hint {number} of {len(files)}"
    return f"{title}\n{'-' * len(title)}\n{files[number - 1].read_text().strip()}\n"


def next_hint(problem: str, hints: Path = HINTS, state: Path = STATE) -> str:
    """The next hint of ``problem`` not shown yet, now counted as shown; or what to do when none is left."""
    known = available(hints)
    problem = problem_name(problem, known)
    files, shown = known[problem], read_state(state)
    seen = min(shown.get(problem, 0), len(files))
    if seen == len(files):
        return (f"You have seen all {len(files)} hints of {problem}. `{PROGRAM} {problem} --again` prints them "
                f"again; `{PROGRAM} --reset {problem}` starts over.\n")
    shown[problem] = seen + 1
    write_state(shown, state)
    left = len(files) - seen - 1
    after = (f"({left} more: run `{PROGRAM} {problem}` again when you need the next one.)" if left
             else f"(That was the last hint of {problem}.)")
    return _shown_text(problem, seen + 1, files) + "\n" + after + "\n"


def again(problem: str, hints: Path = HINTS, state: Path = STATE) -> str:
    """The hints of ``problem`` shown so far, in order (nothing new is counted)."""
    known = available(hints)
    problem = problem_name(problem, known)
    files = known[problem]
    seen = min(read_state(state).get(problem, 0), len(files))
    if not seen:
        return f"No hint of {problem} shown yet; `{PROGRAM} {problem}` shows the first.\n"
    return "\n".join(_shown_text(problem, number, files) for number in range(1, seen + 1))


def listing(hints: Path = HINTS, state: Path = STATE) -> str:
    """One line per sub-problem with hints: how many have been shown."""
    known, shown = available(hints), read_state(state)
    if not known:
        return f"No hints found: {PROGRAM} reads them from {hints}, which the kit's build writes.\n"
    lines = [f"{problem:<6} {min(shown.get(problem, 0), len(files))} of {len(files)} hints shown"
             for problem, files in known.items()]
    return "\n".join(lines) + f"\n`{PROGRAM} N.M` prints the next hint of N.M.\n"


def reset(problem: str | None, hints: Path = HINTS, state: Path = STATE) -> str:
    """Forget the hints shown of ``problem``, or of every problem when it is None."""
    if problem is None:
        state.unlink(missing_ok=True)
        return "Every hint counts as not shown again.\n"
    problem = problem_name(problem, available(hints))
    shown = read_state(state)
    shown.pop(problem, None)
    write_state(shown, state)
    return f"The hints of {problem} count as not shown again.\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("hint", __doc__)
    parser.add_argument("problem", nargs="?", help="a sub-problem, e.g. 2.2")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--again", action="store_true", help="print the hints of PROBLEM already shown")
    action.add_argument("--list", action="store_true", help="every sub-problem with hints, and how many were shown")
    action.add_argument("--reset", action="store_true", help="forget the hints shown (of PROBLEM, or of all)")
    args = parser.parse_args(argv)
    if args.list and args.problem:
        parser.error("--list takes no problem")
    if not (args.list or args.reset or args.problem):
        parser.error("name a sub-problem (e.g. 2.2), or use --list")
    try:
        if args.list:
            text = listing(HINTS, STATE)
        elif args.reset:
            text = reset(args.problem, HINTS, STATE)
        elif args.again:
            text = again(args.problem, HINTS, STATE)
        else:
            text = next_hint(args.problem, HINTS, STATE)
    except HintError as error:
        parser.error(str(error))
    except OSError as error:  # e.g. a kit folder that cannot be written: say so, not a traceback
        parser.exit(1, f"{PROGRAM}: cannot read the hints or record them ({error})\n")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main, PROGRAM))
