"""Helper of scripts/gpu_validate.sh: write its three submissions, and judge each result.

    python scripts/gpu_validate_report.py --make-submissions KEY STUBS WRONG
    python scripts/gpu_validate_report.py RESULT.json all-passed|all-failed-no-error|benchmark

The second form prints one line for the Markdown table and exits 1 when the expectation
does not hold (a missing or unreadable result included).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.layout import STUDENT_FILES  # noqa: E402 - after the repository is importable
from grader.tomlcompat import tomllib  # noqa: E402
from kit.handout import strip_solutions  # noqa: E402

WRONG_PIPE = REPO / "tests" / "catalogue" / "transfer-on-calling-thread.toml"


def make_submissions(key: Path, stubs: Path, wrong: Path) -> None:
    entry = tomllib.loads(WRONG_PIPE.read_text())
    for folder in (key, stubs, wrong):
        folder.mkdir(parents=True, exist_ok=True)
    for name in STUDENT_FILES:
        source = (REPO / "minitorch" / name).read_text()
        (key / name).write_text(source)
        (stubs / name).write_text(strip_solutions(source, name))
        if name == entry["file"]:
            for edit in entry["replace"]:
                assert source.count(edit["old"]) == 1, f"{WRONG_PIPE.name}: the edit no longer applies"
                source = source.replace(edit["old"], edit["new"])
        (wrong / name).write_text(source)


def _timing(criterion: dict) -> str:
    timing = criterion.get("details", {}).get("timing")
    if not isinstance(timing, dict):
        return ""
    ratios = ", ".join(f"{r:.2f}" for r in timing.get("ratios", []))
    settled = "" if timing.get("conclusive") else ", inconclusive"
    return f" ({criterion['id']}: median {timing.get('median_ratio', 0):.2f}x of [{ratios}]{settled})"


def judge_report(path: Path, expect: str) -> tuple[bool, str]:
    report = json.loads(path.read_text())
    statuses = [(c["id"], c["status"]) for c in report["criteria"]]
    summary = ", ".join(f"{cid} {status}" for cid, status in statuses) or "no criteria"
    line = f"{report['score']:g}/{report['max_score']:g}: {summary}" + "".join(_timing(c) for c in report["criteria"])
    if expect == "all-passed":
        return bool(statuses) and all(status == "passed" for _, status in statuses), line
    return bool(statuses) and report["score"] == 0 and all(status == "failed" for _, status in statuses), line


def judge_benchmark(path: Path) -> tuple[bool, str]:
    result = json.loads(path.read_text())
    forward = {row["M"]: row for row in result["forward"]}
    step = {(row["candidate"], row["M"]): row for row in result["training_step"]}
    cells = [f"forward M=8 {forward[8]['median_ratio']:.2f}x"]
    for name in ("HW5 Pipe + autograd", "GPipe schedule", "1F1B schedule"):
        cells.append(f"{name} M=8 {step[(name, 8)]['median_ratio']:.2f}x")
    baseline_ms = 1000 * sorted(forward[8]["baseline_seconds"])[len(forward[8]["baseline_seconds"]) // 2]
    return True, f"{result['environment']['device']}: " + ", ".join(cells) + f"; sequential forward {baseline_ms:.1f} ms"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--make-submissions"] and len(argv) == 4:
        make_submissions(*map(Path, argv[1:]))
        return 0
    if len(argv) != 2 or argv[1] not in ("all-passed", "all-failed-no-error", "benchmark"):
        print(__doc__, file=sys.stderr)
        return 2
    path, expect = Path(argv[0]), argv[1]
    try:
        ok, line = judge_benchmark(path) if expect == "benchmark" else judge_report(path, expect)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
        ok, line = False, f"no usable result in {path.name} ({type(error).__name__}: {error}); see its .log"
    print(line if ok else f"**NOT AS EXPECTED**: {line}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
