"""``python -m grader.mutation COMMAND``: the mutation measure's command line.

    run      grade mutants (all, or --problem/--family/--ids/--sample) and print the score table
    list     the mutants, with their ids and descriptions, without grading them
    show ID  one mutant as a diff of the answer key
    ledger   check the ledger (format, stale ids) without grading
    report   the score table of a results JSON with the ledger as it is now (no grading)

``run`` exits 1 when a survivor is not in the ledger or a ledgered "equivalent" mutant was
killed, 2 when the measure could not run (the answer key fails a criterion, a bad filter).
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import signal
import sys
import time
from pathlib import Path

from grader.layout import DEFAULT_RUBRIC, PROVIDED_FOLDER, REPOSITORY
from grader.mutation import driver, report
from grader.mutation.generate import Generated, Mutant, generate
from grader.mutation.ledger import LEDGER, OPEN, Entry, LedgerError, check_ledger, load_ledger, render_entry
from grader.mutation.operators import FAMILIES
from grader.mutation.selection import rotation_key, sample, select

RESULTS = Path(__file__).resolve().parent / "results.json"  # a full run's
PARTIAL_RESULTS = REPOSITORY / "build" / "mutation" / "results.json"  # a filtered or sampled run's
DEFAULT_SEED = 29
EXIT_OK, EXIT_SURVIVORS, EXIT_USAGE = 0, 1, 2


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grader.mutation", description="Mutation analysis of the answer key.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in (("run", "grade mutants and print the score table"), ("list", "list the mutants, ungraded")):
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument("--problem", action="append", default=[], help="only this problem (2.1, or 2 for 2.x); may repeat")
        command.add_argument("--family", action="append", default=[], choices=FAMILIES, help="only this family; may repeat")
        command.add_argument("--ids", nargs="+", default=[], metavar="ID", help="only these mutants")
        command.add_argument("--sample", type=int, metavar="N", help="N mutants, spread over the problems (see --rotation)")
        command.add_argument("--rotation", help="the sample's key (default: $MUTATION_ROTATION or this ISO week)")
    run = commands.choices["run"]
    run.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    run.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"the checks' seed (default {DEFAULT_SEED})")
    run.add_argument("--out", type=Path, help=f"results JSON (default: {RESULTS.relative_to(REPOSITORY)} for a full run, "
                                              f"{PARTIAL_RESULTS.relative_to(REPOSITORY)} otherwise)")
    run.add_argument("--key-seconds", type=Path, metavar="RESULTS",
                     help="take the answer key's time per criterion from this results JSON instead of measuring it")
    run.add_argument("--ledger", type=Path, default=LEDGER, help="the survivors ledger")
    show = commands.add_parser("show", help="one mutant as a diff of the answer key")
    show.add_argument("id")
    ledger = commands.add_parser("ledger", help="check the ledger without grading")
    ledger.add_argument("--ledger", type=Path, default=LEDGER)
    rescore = commands.add_parser("report", help="rescore a results JSON with the ledger as it is now, and rewrite it")
    rescore.add_argument("results", type=Path, nargs="?", default=RESULTS)
    rescore.add_argument("--ledger", type=Path, default=LEDGER)
    return parser


def _chosen(args: argparse.Namespace, generated: Generated) -> tuple[list[Mutant], str | None]:
    mutants = select(generated.mutants, args.problem, args.family, args.ids)
    if args.sample is None:
        return mutants, None
    key = args.rotation or rotation_key()
    return sample(mutants, args.sample, key), key


def _print_progress(start: float, total: int):
    done = [0]

    def on_result(mutant: Mutant, result: dict) -> None:
        done[0] += 1
        if result["outcome"] != "killed":
            print(f"  {result['outcome']:8} {mutant.description}\n           {mutant.id}", flush=True)
        if done[0] % 50 == 0 or done[0] == total:
            print(f"[{done[0]}/{total} graded, {time.monotonic() - start:.0f} s]", flush=True)

    return on_result


def _report_ledger(mutants: list[Mutant], generated: Generated, ledger: dict[str, Entry], outcomes: dict[str, str],
                   full: bool) -> bool:
    """Print how the ledger and the run disagree; True when the run must fail."""
    check = check_ledger(ledger, [m.id for m in generated.mutants], outcomes)
    by_id = {m.id: m for m in mutants}
    if check.unledgered:
        print(f"\n{len(check.unledgered)} survivor(s) not in the ledger; add each as equivalent (with the reason no "
              "admitted input tells it apart) or open (with the check that would kill it):\n")
        for mutant_id in check.unledgered:
            m = by_id[mutant_id]
            print(render_entry(Entry(m.id, OPEN, m.problem, note="<the promise and the check that would kill it>",
                                     mutant=m.description)))
    for title, ids in (("ledgered as equivalent but killed (the reason is wrong: fix or remove the entry)", check.not_equivalent),
                       ("open entries now killed (closed: remove them from the ledger)", check.closed)):
        if ids:
            print(f"\n{len(ids)} {title}:\n  " + "\n  ".join(ids))
    if check.stale and full:
        print(f"\n{len(check.stale)} stale ledger entries (no longer generated; remove them):\n  " + "\n  ".join(check.stale))
    return check.failed


def _run_facts(args: argparse.Namespace, key: str | None, wall: float, results: dict[str, dict], generated: Generated,
               key_seconds: dict[str, float]) -> dict:
    """What a results JSON says about the run: its settings, its time and the machine's load."""
    return {"seed": args.seed, "jobs": args.jobs, "rotation": key,
            "filters": {"problem": args.problem, "family": args.family, "ids": args.ids, "sample": args.sample},
            "wall_seconds": round(wall, 1), "worker_seconds": round(sum(r["seconds"] for r in results.values()), 1),
            "load_average": [round(x, 1) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "discarded": {"identical": generated.identical, "not_compiling": generated.not_compiling},
            "key_seconds": {k: round(v, 3) for k, v in sorted(key_seconds.items())},
            "bounds": {k: driver.bound_of(v) for k, v in sorted(key_seconds.items())}}


def command_run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    generated = generate()
    mutants, key = _chosen(args, generated)
    ledger = load_ledger(args.ledger)
    full = not (args.problem or args.family or args.ids or args.sample is not None)
    known = json.loads(args.key_seconds.read_text()).get("key_seconds") if args.key_seconds else None
    print(f"{len(mutants)} of {len(generated.mutants)} mutants ({generated.identical} identical and "
          f"{generated.not_compiling} non-compiling candidates discarded)" + (f", sample key {key}" if key else "")
          + f"; {args.jobs} workers, seed {args.seed}", flush=True)
    results, key_seconds = driver.grade_mutants(mutants, str(DEFAULT_RUBRIC), args.seed, args.jobs,
                                                _print_progress(started, len(mutants)), known)
    outcomes = {i: r["outcome"] for i, r in results.items()}
    categories = {i: report.category(outcomes[i], ledger.get(i)) for i in outcomes}
    summary = report.summarise(mutants, categories)
    print("\n" + report.format_table(summary))
    failed = _report_ledger(mutants, generated, ledger, outcomes, full)
    wall = time.monotonic() - started
    out = args.out or (RESULTS if full else PARTIAL_RESULTS)
    run = _run_facts(args, key, wall, results, generated, key_seconds)
    document = report.results_document(mutants, results, categories, run)
    previous = json.loads(out.read_text()) if out.exists() else None
    for line in report.changes(previous, document):
        print(line)
    report.write_results(document, out)
    print(f"\n{len(mutants)} mutants in {wall / 60:.1f} min; results in {out}")
    return EXIT_SURVIVORS if failed else EXIT_OK


def command_list(args: argparse.Namespace) -> int:
    mutants, _ = _chosen(args, generate())
    for mutant in mutants:
        print(f"{mutant.id}\n    {mutant.family}: {mutant.description}")
    print(f"{len(mutants)} mutants")
    return EXIT_OK


def command_show(args: argparse.Namespace) -> int:
    mutant = next(m for m in select(generate().mutants, ids=[args.id]))
    original = (PROVIDED_FOLDER / mutant.file).read_text().splitlines(keepends=True)
    print(mutant.description)
    sys.stdout.writelines(difflib.unified_diff(original, mutant.source().splitlines(keepends=True),
                                               f"minitorch/{mutant.file}", f"mutant {mutant.id}"))
    return EXIT_OK


def command_ledger(args: argparse.Namespace) -> int:
    ledger = load_ledger(args.ledger)
    check = check_ledger(ledger, [m.id for m in generate().mutants], {})
    counts = {status: sum(e.status == status for e in ledger.values()) for status in ("equivalent", OPEN)}
    print(f"{args.ledger}: {len(ledger)} entries ({counts['equivalent']} equivalent, {counts[OPEN]} open)")
    if check.stale:
        print(f"{len(check.stale)} stale (no longer generated; remove them):\n  " + "\n  ".join(check.stale))
    return EXIT_OK


def command_report(args: argparse.Namespace) -> int:
    """After ledger edits: the table and the ledger's disagreements, from a run's outcomes."""
    document = json.loads(args.results.read_text())
    ledger, generated = load_ledger(args.ledger), generate()
    ran = [Mutant(m["id"], m["problem"], m["family"], m["operator"], "", m["description"], str) for m in document["mutants"]]
    results = {m["id"]: {k: v for k, v in m.items() if k not in ("id", "problem", "family", "operator", "description", "category")}
               for m in document["mutants"]}
    outcomes = {i: r["outcome"] for i, r in results.items()}
    categories = {i: report.category(outcomes[i], ledger.get(i)) for i in outcomes}
    print(report.format_table(report.summarise(ran, categories)))
    failed = _report_ledger(ran, generated, ledger, outcomes, full=not any(document.get("filters", {}).values()))
    run = {k: v for k, v in document.items() if k not in ("schema", "summary", "mutants")}
    report.write_results(report.results_document(ran, results, categories, run), args.results)
    return EXIT_SURVIVORS if failed else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = _arguments().parse_args(argv)
    # Stopped from outside (kill, a CI timeout): stop the workers too (see driver.grade_mutants).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_USAGE))
    commands = {"run": command_run, "list": command_list, "show": command_show, "ledger": command_ledger,
                "report": command_report}
    try:
        return commands[args.command](args)
    except (ValueError, LedgerError, driver.DriverError) as error:
        print(f"python -m grader.mutation {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
