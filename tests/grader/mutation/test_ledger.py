"""The survivors ledger (its format and how it is checked against a run), the score and the
CI sample's selection."""
from __future__ import annotations

import pytest

from grader.mutation.generate import Mutant
from grader.mutation.ledger import LEDGER, Entry, LedgerError, check_ledger, load_ledger, parse_ledger, render_ledger
from grader.mutation.report import Tally, category, changes, format_table, summarise
from grader.mutation.selection import sample, select

EQUIVALENT_ID = "2.2:Pipe.forward:drop-keyword:0.body.0.value.args.0:89b8d5"
OPEN_ID = "3.3:ParallelMLP.__init__:early-return:region:2255ae"
GOOD = f'''
["{EQUIVALENT_ID}"]
mutant = "2.2 Pipe.forward: drop 'non_blocking=...'"
status = "equivalent"
reason = "on the CPU non_blocking changes nothing"

["{OPEN_ID}"]
status = "open"
problem = "3.3"
note = "3.3-mlp: build the MLP with hidden_size 1"
'''


def test_a_ledger_is_read_with_each_entrys_status_and_reason_or_note():
    ledger = parse_ledger(GOOD)
    assert ledger[EQUIVALENT_ID] == Entry(EQUIVALENT_ID, "equivalent", "2.2", reason="on the CPU non_blocking changes nothing",
                                          mutant="2.2 Pipe.forward: drop 'non_blocking=...'")
    assert ledger[OPEN_ID].status == "open" and ledger[OPEN_ID].note.startswith("3.3-mlp")


def test_render_and_parse_agree():
    ledger = parse_ledger(GOOD)
    assert parse_ledger(render_ledger(ledger.values())) == ledger


@pytest.mark.parametrize("entry, complaint", [
    ('status = "equivalent"', "needs a non-empty reason"),
    ('status = "equivalent"\nreason = " "', "needs a non-empty reason"),
    ('status = "open"\nproblem = "3.3"', "needs a non-empty note"),
    ('status = "open"\nproblem = "3.4"\nnote = "x"', "is not the mutant's"),
    ('status = "killed"', "status must be"),
    ('status = "equivalent"\nreason = "x"\nnote = "y"', "unknown field"),
])
def test_a_malformed_entry_is_refused_naming_it(entry, complaint):
    with pytest.raises(LedgerError, match=complaint) as raised:
        parse_ledger(f'["{OPEN_ID}"]\n{entry}\n')
    assert OPEN_ID in str(raised.value)


def test_not_toml_is_refused():
    with pytest.raises(LedgerError, match="not valid TOML"):
        parse_ledger("[unclosed\n")


def test_the_committed_ledger_is_well_formed():
    load_ledger(LEDGER)


def test_the_check_finds_unledgered_survivors_stale_entries_closed_and_wrong_equivalents():
    ledger = parse_ledger(GOOD)
    check = check_ledger(ledger, generated=[EQUIVALENT_ID, "2.1:a:b:c:d", "2.1:e:f:g:h"],
                         outcomes={EQUIVALENT_ID: "killed", "2.1:a:b:c:d": "survived", "2.1:e:f:g:h": "killed"})
    assert check.unledgered == ["2.1:a:b:c:d"]
    assert check.stale == [OPEN_ID]
    assert check.not_equivalent == [EQUIVALENT_ID] and check.closed == []
    assert check.failed
    check = check_ledger(ledger, [EQUIVALENT_ID, OPEN_ID], {EQUIVALENT_ID: "survived", OPEN_ID: "killed"})
    assert check.closed == [OPEN_ID] and not check.failed and not check.unledgered


def _mutant(mutant_id: str, family: str = "standard") -> Mutant:
    return Mutant(mutant_id, mutant_id.split(":")[0], family, mutant_id.split(":")[2], "pipeline.py", mutant_id, lambda: "")


def test_the_score_leaves_equivalent_mutants_out_and_counts_errors_against_it():
    mutants = [_mutant(f"2.1:f:op:{i}:x") for i in range(5)] + [_mutant("2.4:f:op:0:x", "domain")]
    categories = dict(zip((m.id for m in mutants), ["killed", "killed", "equivalent", "survived", "error", "killed"]))
    summary = summarise(mutants, categories)
    assert summary["2.1"]["standard"] == Tally(generated=5, killed=2, equivalent=1, survived=1, error=1)
    assert summary["2.1"]["standard"].score == 0.5
    assert summary["overall"]["domain"].score == 1.0 and summary["2.1"]["domain"].score is None
    assert list(summary) == ["2.1", "2.4", "overall"]
    table = format_table(summary)
    assert " 50.0% <" in table and "100.0%" in table


def test_a_survivor_is_equivalent_only_when_the_ledger_says_so():
    assert category("survived", Entry("i", "equivalent", "2.1", reason="r")) == "equivalent"
    assert category("survived", Entry("i", "open", "2.1", note="n")) == "survived"
    assert category("survived", None) == "survived" and category("killed", None) == "killed"


def test_changes_since_the_previous_results_are_listed():
    before = {"mutants": [{"id": "a", "category": "survived"}, {"id": "b", "category": "killed"}]}
    after = {"mutants": [{"id": "a", "category": "killed"}, {"id": "c", "category": "killed"}]}
    assert changes(before, after) == ["a: survived -> killed", "(1 mutants not in the previous results, 1 of them not run now)"]


MUTANTS = [_mutant(f"{problem}:f:op:{i}:x") for problem in ("2.1", "2.4", "10.1") for i in range(6)]


def test_the_sample_is_fixed_for_a_key_and_spread_over_the_problems():
    first = sample(MUTANTS, 4, "2026-W49")
    assert first == sample(MUTANTS, 4, "2026-W49")
    assert [m.problem for m in first] == ["2.1", "2.4", "10.1", "2.1"]
    keys = [f"2026-W{week:02d}" for week in range(1, 40)]
    assert len({tuple(m.id for m in sample(MUTANTS, 3, key)) for key in keys}) > 1
    covered = {m.id for key in keys for m in sample(MUTANTS, 3, key)}
    assert covered == {m.id for m in MUTANTS}  # over a rotation, every mutant is drawn


def test_select_filters_and_refuses_what_matches_nothing():
    assert {m.problem for m in select(MUTANTS, problems=["2"])} == {"2.1", "2.4"}
    assert select(MUTANTS, ids=["2.4:f:op:3:x"]) == [MUTANTS[9]]
    assert select(MUTANTS, families=["domain"]) == []
    with pytest.raises(ValueError, match="no mutant of problem '9.9'"):
        select(MUTANTS, problems=["9.9"])
    with pytest.raises(ValueError, match="no mutant with id"):
        select(MUTANTS, ids=["2.1:gone"])
