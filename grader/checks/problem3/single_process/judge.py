"""3.1-single-process, parent side: without a process group every 3.1 op is the identity in
both directions (judged as 3.1-f-g and 3.1-scatter-gather judge t = 1)."""
from __future__ import annotations

from grader.checks.judging import Fail
from grader.checks.problem3.fg.judge import judge_fg
from grader.checks.problem3.scatter_gather.judge import judge_scatter_gather
from grader.checks.threads import single_threaded

PARTS = (("fg", "f and g", judge_fg), ("scatter_gather", "the scatter/gather ops", judge_scatter_gather))


@single_threaded
def judge_single_process(seed: int, params: dict, observation) -> None:
    for name, what, judge in PARTS:
        try:
            judge(seed, {**params, "world_sizes": [1]}, observation[name])
        except Fail as failure:
            raise Fail(f"{what}, in one process without a process group (t = 1): {failure}") from None
