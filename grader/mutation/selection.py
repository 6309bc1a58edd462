"""Which mutants a run grades: filters (problem, family, ids) and a deterministic sample.

The sample is stratified: it takes mutants from each problem in turn, and within a problem in
the order of ``sha1(rotation key + id)``, so a given key always draws the same mutants (a failure
is reproducible with that key) and another key draws others. The default key is the ISO week:
CI samples other mutants every week and covers every problem in each run.
"""
from __future__ import annotations

import datetime
import hashlib
import itertools
import os
from collections.abc import Sequence

from grader.mutation.generate import Mutant

ROTATION_VARIABLE = "MUTATION_ROTATION"


def rotation_key() -> str:
    """``$MUTATION_ROTATION``, else this ISO week (``2026-W49``)."""
    year, week, _ = datetime.date.today().isocalendar()
    return os.environ.get(ROTATION_VARIABLE) or f"{year}-W{week:02d}"


def select(mutants: Sequence[Mutant], problems: Sequence[str] = (), families: Sequence[str] = (),
           ids: Sequence[str] = ()) -> list[Mutant]:
    """The mutants of these problems (``2.1``, or ``2`` for every 2.x), families and ids (every
    one where a filter is empty).

    Raises:
        ValueError: a filter that matches no generated mutant (a typo, or a stale id).
    """
    known_problems = {m.problem for m in mutants}
    for problem in problems:
        if not any(p == problem or p.split(".")[0] == problem for p in known_problems):
            raise ValueError(f"no mutant of problem {problem!r} (problems: {', '.join(sorted(known_problems))})")
    missing = set(ids) - {m.id for m in mutants}
    if missing:
        raise ValueError(f"no mutant with id {sorted(missing)[0]!r} (see `python -m grader.mutation list`)")
    return [m for m in mutants
            if (not problems or any(m.problem == p or m.problem.split(".")[0] == p for p in problems))
            and (not families or m.family in families) and (not ids or m.id in ids)]


def sample(mutants: Sequence[Mutant], size: int, key: str) -> list[Mutant]:
    """``size`` mutants, taken from each problem in turn (problems in order), each problem's in
    the order its rotation ``key`` gives them."""
    by_problem: dict[str, list[Mutant]] = {}
    for mutant in mutants:
        by_problem.setdefault(mutant.problem, []).append(mutant)
    orders = [sorted(group, key=lambda m: hashlib.sha1(f"{key}\n{m.id}".encode()).hexdigest())
              for _, group in sorted(by_problem.items(), key=lambda item: tuple(map(int, item[0].split("."))))]
    chosen = [m for m in itertools.chain.from_iterable(itertools.zip_longest(*orders)) if m is not None]
    return chosen[:size]
