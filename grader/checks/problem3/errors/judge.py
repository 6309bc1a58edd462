"""3.0-errors, parent side: every call the contract says raises ValueError raises ValueError,
before any communication (a rank that communicates first leaves the others waiting)."""
from __future__ import annotations

from grader.checks.judging import Fail, expect_cases
from grader.checks.problem3 import cases
from grader.checks.problem3.errors.observe import calls
from grader.checks.problem3.judge_tools import describe, phase_log, world_sizes
from grader.checks.threads import single_threaded


class _Names:
    """Stands in for the student's module: :func:`calls` only reads the names of the cases."""

    def __getattr__(self, name):
        return None


@single_threaded
def judge_errors(seed: int, params: dict, observation) -> None:
    for t, values in world_sizes(observation, params, "ValueError", cases.CONVENTION_SIZES).items():
        asked = list(calls(_Names(), t))
        for r, o in enumerate(values):
            for number, entry in enumerate(expect_cases(o["cases"], asked, "ValueError")):
                if entry["raised"] == "NotImplementedError":
                    raise Fail(f"not implemented yet (Problem 3.0): {entry['case']} still raises NotImplementedError")
                if entry["raised"] != "ValueError":
                    reason = ("4 heads do not divide 10 features" if ", 10, 4" in entry["case"] or "(10," in entry["case"]
                              else "the master tensors do not have nn.Linear's shapes" if "from a master" in entry["case"]
                              else f"a size {t} does not divide")
                    raise Fail(f"t={t}, rank {r}: {entry['case']} ({reason}) must raise ValueError; got {entry['raised']}")
                sent = phase_log(o["log"], f"call {number}")
                if sent:
                    raise Fail(f"t={t}, rank {r}: {entry['case']} raised ValueError only after communicating "
                               f"({describe(sent)}); check the sizes before any collective, so that every rank "
                               "raises and none waits for the others")
