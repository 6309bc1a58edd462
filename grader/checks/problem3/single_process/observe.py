"""3.1-single-process, child side: the 3.1 ops' ranks of 3.1-f-g and 3.1-scatter-gather, run
in this process without a process group (t = 1)."""
from __future__ import annotations

from grader.checks.problem3 import ranks
from grader.checks.problem3.fg.observe import rank_fg
from grader.checks.problem3.scatter_gather.observe import rank_scatter_gather

PARTS = {"fg": rank_fg, "scatter_gather": rank_scatter_gather}


def observe_single_process(seed: int, params: dict):
    """Runs the 3.1 ops in this process, without a process group (t = 1)."""
    return {name: ranks.observe(rank_fn, seed, {**params, "world_sizes": [1]}, (1,)) for name, rank_fn in PARTS.items()}
