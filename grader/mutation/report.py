"""The mutation score: per problem and overall, per family, as a table and as JSON.

Each mutant that ran ends in one category: ``killed`` (a criterion failed or timed out),
``equivalent`` (it survived and the ledger argues no admitted input tells it apart), ``survived``
(every other survivor: open in the ledger, or not in it yet) or ``error`` (the grader broke on
it: a loud grader error, counted against the score). The score is
``killed / (generated - equivalent)``; the goal is at least :data:`GOAL` in every problem, for
both families.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from grader.mutation.generate import Mutant
from grader.mutation.ledger import EQUIVALENT, Entry
from grader.mutation.operators import FAMILIES

GOAL = 0.95
SCHEMA = 1
CATEGORIES = ("killed", "equivalent", "survived", "error")


def category(outcome: str, entry: Entry | None) -> str:
    if outcome == "survived" and entry is not None and entry.status == EQUIVALENT:
        return "equivalent"
    return outcome


@dataclass
class Tally:
    generated: int = 0
    killed: int = 0
    equivalent: int = 0
    survived: int = 0
    error: int = 0

    def add(self, kind: str) -> None:
        self.generated += 1
        setattr(self, kind, getattr(self, kind) + 1)

    @property
    def score(self) -> float | None:
        judged = self.generated - self.equivalent
        return self.killed / judged if judged else None

    def as_dict(self) -> dict:
        return {"generated": self.generated, "killed": self.killed, "equivalent": self.equivalent,
                "survived": self.survived, "error": self.error,
                "score": None if self.score is None else round(self.score, 4)}


def _problem_key(problem: str) -> tuple[int, ...]:
    return tuple(int(part) for part in problem.split("."))


def summarise(mutants: Sequence[Mutant], categories: Mapping[str, str]) -> dict[str, dict[str, Tally]]:
    """``{problem or "overall": {family: Tally}}`` over the mutants that ran."""
    table: dict[str, dict[str, Tally]] = {}
    for mutant in mutants:
        if mutant.id in categories:
            for row in (mutant.problem, "overall"):
                table.setdefault(row, {f: Tally() for f in FAMILIES})[mutant.family].add(categories[mutant.id])
    return dict(sorted(table.items(), key=lambda item: (item[0] == "overall", _problem_key(item[0]) if item[0] != "overall" else ())))


CELL = 29  # characters of one family's columns


def _cell(tally: Tally) -> str:
    if not tally.generated:
        return f"{'-':>5}{'':{CELL - 5}}"
    score = tally.score
    shown = "n/a" if score is None else f"{100 * score:.1f}%"
    mark = "" if score is None or score >= GOAL else " <"
    return f"{tally.generated:5d}{tally.killed:5d}{tally.equivalent:5d}{tally.survived + tally.error:5d} {shown:>6}{mark:2}"


def format_table(summary: Mapping[str, Mapping[str, Tally]]) -> str:
    """The score table: per problem and overall, each family's generated, killed, equivalent,
    survived (errors included) and score; ``<`` marks a score under the goal."""
    columns = f"{'gen':>5}{'kill':>5}{'equi':>5}{'surv':>5} {'score':>6}  "
    lines = [f"{'':8}" + "".join(f" |{family:^{CELL}}" for family in FAMILIES),
             f"{'problem':8}" + "".join(f" |{columns}" for _ in FAMILIES)]
    lines.append("-" * len(lines[-1]))
    for row, tallies in summary.items():
        lines.append(f"{row:8}" + "".join(f" |{_cell(tallies[f])}" for f in FAMILIES))
    lines.append(f"score = killed / (generated - equivalent); survived counts grader errors too; "
                 f"< marks a score under the goal, {100 * GOAL:.0f}% in every problem for both families")
    return "\n".join(lines)


def results_document(mutants: Sequence[Mutant], results: Mapping[str, dict], categories: Mapping[str, str],
                     run: Mapping[str, object]) -> dict:
    """The JSON a later run diffs against: the run's settings, the summary and every mutant."""
    summary = summarise(mutants, categories)
    return {
        "schema": SCHEMA, **run,
        "summary": {row: {f: t.as_dict() for f, t in tallies.items()} for row, tallies in summary.items()},
        "mutants": [
            {"id": m.id, "problem": m.problem, "family": m.family, "operator": m.operator,
             "description": m.description, "category": categories[m.id], **results[m.id]}
            for m in sorted(mutants, key=lambda m: m.id) if m.id in results
        ],
    }


def write_results(document: dict, path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")


def changes(previous: dict | None, current: dict) -> list[str]:
    """What changed since ``previous`` (a results document) for the mutants both ran:
    ``id: survived -> killed``; mutants new or gone are counted."""
    if not previous:
        return []
    before = {m["id"]: m["category"] for m in previous.get("mutants", [])}
    after = {m["id"]: m["category"] for m in current["mutants"]}
    lines = [f"{i}: {before[i]} -> {after[i]}" for i in sorted(set(before) & set(after)) if before[i] != after[i]]
    new, gone = len(set(after) - set(before)), len(set(before) - set(after))
    if new or gone:
        lines.append(f"({new} mutants not in the previous results, {gone} of them not run now)")
    return lines
