"""The survivors ledger, ``grader/mutation/ledger.toml``: one entry per surviving mutant id.

``status = "equivalent"`` with a one-line ``reason``: no input the contract admits tells the
mutant from the answer key (argued, not assumed). ``status = "open"`` with its ``problem`` and a
``note`` naming the promise and the check that would kill it; the goal is no open entry (a
check that kills the mutant closes it: the entry is then removed). ``mutant`` repeats the
mutant's description for the reader (optional)::

    ["2.2:Pipe.forward:drop-keyword:0.body.0.value.args.0:89b8d5"]
    mutant = "2.2 Pipe.forward: drop 'non_blocking=...' from microbatch.to(...) in ..."
    status = "equivalent"
    reason = "on the CPU non_blocking changes nothing, and every check runs on the CPU"
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grader.tomlcompat import tomllib

LEDGER = Path(__file__).resolve().parent / "ledger.toml"
EQUIVALENT, OPEN = "equivalent", "open"
KEYS = {EQUIVALENT: {"status", "reason", "mutant"}, OPEN: {"status", "problem", "note", "mutant"}}
HEADER = """\
# The survivors ledger of `make mutation` (grader/mutation/README.md says how to read and edit it).
# One entry per surviving mutant id: status "equivalent" with a one-line reason (no input the
# contract admits tells it from the answer key), or status "open" with its problem and a note
# naming the promise and the check that would kill it. A check that kills an open mutant closes
# it: remove the entry. The goal is no open entry.
"""


class LedgerError(ValueError):
    """The ledger file is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Entry:
    id: str
    status: str
    problem: str
    reason: str = ""
    note: str = ""
    mutant: str = ""


def problem_of(mutant_id: str) -> str:
    """``2.1`` of ``2.1:clock_cycles:...``."""
    return mutant_id.split(":", 1)[0]


def _entry(mutant_id: str, table: object, where: str) -> Entry:
    if not isinstance(table, dict):
        raise LedgerError(f"{where}: [{mutant_id!r}] must be a table")
    status = table.get("status")
    if status not in KEYS:
        raise LedgerError(f"{where}: [{mutant_id!r}] status must be {EQUIVALENT!r} or {OPEN!r}, got {status!r}")
    unknown = set(table) - KEYS[status]
    if unknown:
        raise LedgerError(f"{where}: [{mutant_id!r}] unknown field(s) {sorted(unknown)} for status {status!r}")
    needed = "reason" if status == EQUIVALENT else "note"
    if not isinstance(table.get(needed), str) or not table[needed].strip():
        raise LedgerError(f"{where}: [{mutant_id!r}] a {status} entry needs a non-empty {needed}")
    problem = table.get("problem", problem_of(mutant_id))
    if status == OPEN and problem != problem_of(mutant_id):
        raise LedgerError(f"{where}: [{mutant_id!r}] problem {problem!r} is not the mutant's ({problem_of(mutant_id)!r})")
    return Entry(mutant_id, status, problem, table.get("reason", ""), table.get("note", ""), table.get("mutant", ""))


def parse_ledger(text: str, where: str = "ledger.toml") -> dict[str, Entry]:
    """The entries of a ledger's text.

    Raises:
        LedgerError: not TOML, or an entry without a valid status and its reason or note.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise LedgerError(f"{where}: not valid TOML: {error}") from None
    return {mutant_id: _entry(mutant_id, table, where) for mutant_id, table in data.items()}


def load_ledger(path: Path = LEDGER) -> dict[str, Entry]:
    return parse_ledger(path.read_text(), path.name) if path.exists() else {}


def render_entry(entry: Entry) -> str:
    """The entry as TOML (strings written as JSON strings, which TOML reads alike)."""
    lines = [f"[{json.dumps(entry.id)}]"]
    if entry.mutant:
        lines.append(f"mutant = {json.dumps(entry.mutant, ensure_ascii=False)}")
    lines.append(f"status = {json.dumps(entry.status)}")
    if entry.status == OPEN:
        lines += [f"problem = {json.dumps(entry.problem)}", f"note = {json.dumps(entry.note, ensure_ascii=False)}"]
    else:
        lines.append(f"reason = {json.dumps(entry.reason, ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def render_ledger(entries: Iterable[Entry]) -> str:
    """A whole ledger, entries by problem then id."""
    ordered = sorted(entries, key=lambda e: (tuple(int(p) for p in e.problem.split(".")), e.id))
    return HEADER + "".join("\n" + render_entry(e) for e in ordered)


@dataclass
class LedgerCheck:
    """How a run's outcomes and the ledger disagree."""

    unledgered: list[str] = field(default_factory=list)  # survived, and the ledger says nothing
    stale: list[str] = field(default_factory=list)  # ledgered ids the generator no longer makes
    closed: list[str] = field(default_factory=list)  # open entries whose mutant is now killed: remove them
    not_equivalent: list[str] = field(default_factory=list)  # "equivalent" entries whose mutant was killed

    @property
    def failed(self) -> bool:
        return bool(self.unledgered or self.not_equivalent)


def check_ledger(ledger: Mapping[str, Entry], generated: Iterable[str], outcomes: Mapping[str, str]) -> LedgerCheck:
    """Compare the ledger with the generated mutant ids and a run's outcomes (id -> killed,
    survived or error; the ids that ran)."""
    check = LedgerCheck()
    check.stale = sorted(set(ledger) - set(generated))
    for mutant_id, outcome in sorted(outcomes.items()):
        entry = ledger.get(mutant_id)
        if outcome == "survived" and entry is None:
            check.unledgered.append(mutant_id)
        elif outcome == "killed" and entry is not None:
            (check.not_equivalent if entry.status == EQUIVALENT else check.closed).append(mutant_id)
    return check
