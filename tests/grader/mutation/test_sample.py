"""CI's share of ``make mutation``: a fixed, rotating sample of the answer key's mutants, one per
problem, graded by the hidden checks; it fails when a sampled mutant survives and the ledger
does not say why. The rotation key is the ISO week (or ``$MUTATION_ROTATION``), so a failure is
reproduced with the key it prints."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from grader.layout import REPOSITORY
from grader.mutation.__main__ import RESULTS
from grader.mutation.generate import generate
from grader.mutation.ledger import check_ledger, load_ledger
from grader.mutation.selection import ROTATION_VARIABLE, rotation_key

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_rotating_sample_of_mutants_is_killed_or_ledgered(tmp_path):
    mutants = generate().mutants
    problems = sorted({m.problem for m in mutants})
    key, out = rotation_key(), tmp_path / "results.json"
    command = [sys.executable, "-m", "grader.mutation", "run", "--sample", str(len(problems)), "--rotation", key,
               "--out", str(out)]
    if RESULTS.exists():  # the answer key's time per criterion, as the last full run measured it
        command += ["--key-seconds", str(RESULTS)]
    completed = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=580)
    assert completed.returncode == 0, (
        f"{completed.stdout[-8000:]}\n{completed.stderr[-4000:]}\n"
        f"reproduce with: {ROTATION_VARIABLE}={key} make mutation SAMPLE={len(problems)}")
    ran = json.loads(out.read_text())["mutants"]
    assert sorted({m["problem"] for m in ran}) == problems
    stale = check_ledger(load_ledger(), [m.id for m in mutants], {}).stale
    if stale:
        warnings.warn(f"{len(stale)} stale entries in grader/mutation/ledger.toml (no longer generated): {stale[:5]}", stacklevel=1)
