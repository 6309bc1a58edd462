"""3.1-f-g, parent side: f is the identity forward and sums over ranks backward, g the
reverse, on every case; outputs have the input's dtype and require grad only when the input
does; each direction within its communication budget."""
from __future__ import annotations

from grader.checks.judging import Fail
from grader.checks.problem3 import cases
from grader.checks.problem3.judge_tools import close, describe, expect, expect_kind, moved, phase_log, world_sizes
from grader.checks.threads import single_threaded

NAMES = {"f": "copy_to_tensor_model_parallel_region", "g": "reduce_from_tensor_model_parallel_region"}
# Per op and direction: (how many all-reduces of x the contract allows, why).
BUDGETS = {("f", "forward"): (0, "f's forward is the identity"), ("f", "backward"): (1, "f's backward sums the gradient"),
           ("g", "forward"): (1, "g's forward sums the inputs"), ("g", "backward"): (0, "g's backward is the identity")}


@single_threaded
def judge_fg(seed: int, params: dict, observation) -> None:
    for t, values in world_sizes(observation, params, "f and g", cases.WORLD_SIZES).items():
        for r, o in enumerate(values):
            for label, data in cases.op_cases(seed, t):
                judge_f(f"t={t}, rank {r}, f on {label}", o[f"f {label}"], data, r, t)
                judge_g(f"t={t}, rank {r}, g on {label}", o[f"g {label}"], data, r, t)
                for (name, direction), (all_reduces, why) in BUDGETS.items():
                    numel = data["x"].numel()
                    judge_budget(f"t={t}, rank {r}, {name} on {label}", t, o["log"], f"{name} {label}.{direction}",
                                 direction, all_reduces * numel, why)
            for name in NAMES:
                expect_kind(f"t={t}, rank {r}: {name}'s output for an input that does not require grad",
                            o["no_grad"][name], needs_grad=False)


def judge_f(where: str, result, data: dict, r: int, t: int) -> None:
    grad_sum = sum(data["grad_r"])
    expect(f"{where}: forward of f (copy_to_tensor_model_parallel_region) must be the identity; output",
           result["out"], data["x"])
    expect_kind(f"{where}: f's output (its input requires grad)", result["kind"], needs_grad=True)
    if t > 1 and close(result["grad"], data["grad_r"][r]):
        raise Fail(f"{where}: backward of f must give the SUM over ranks of the output gradients: the input grad "
                   "equals this rank's own output grad")
    expect(f"{where}: backward of f must sum the gradient over ranks; input grad", result["grad"], grad_sum)


def judge_g(where: str, result, data: dict, r: int, t: int) -> None:
    x_sum = sum(data["x_r"])
    if t > 1 and close(result["out"], data["x_r"][r]):
        raise Fail(f"{where}: forward of g (reduce_from_tensor_model_parallel_region) must sum over ranks: the "
                   "output is only this rank's own input")
    expect(f"{where}: forward of g must sum the ranks' inputs; output", result["out"], x_sum)
    expect_kind(f"{where}: g's output (its input requires grad)", result["kind"], needs_grad=True)
    if t > 1 and close(result["grad"], sum(data["grad_r"])):
        raise Fail(f"{where}: backward of g must be the identity: the input grad is the sum of all ranks' output "
                   "grads (summed again)")
    expect(f"{where}: backward of g must be the identity; input grad", result["grad"], data["grad_r"][r])


def judge_budget(where: str, t: int, log: list, phase: str, direction: str, all_reduced: int, why: str) -> None:
    """At most the elements ``all_reduced`` elements of all-reduce move (ring algorithms)."""
    got = phase_log(log, phase)
    amount, unknown = moved(t, got)
    allowed, _ = moved(t, [{"kind": "all_reduce", "numel": all_reduced}])
    if unknown or amount > allowed * (1 + 1e-9):
        raise Fail(f"{where}: the {direction} may move at most {allowed:g} elements per rank ({why}); recorded "
                   f"{describe(got)}")
