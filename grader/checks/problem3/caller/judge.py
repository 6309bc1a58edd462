"""3.0-caller-unchanged, parent side: nothing the caller handed over changes (values, dict
keys, requires_grad, the gradient handed to a backward), no parameter shares memory with a
master tensor, and a second backward through the same graph gives the same gradient. A part
that raised is its own criterion's failure, not this one's."""
from __future__ import annotations

from grader.checks.judging import Fail
from grader.checks.problem3 import cases
from grader.checks.problem3.judge_tools import world_sizes
from grader.checks.threads import single_threaded


@single_threaded
def judge_caller_unchanged(seed: int, params: dict, observation) -> None:
    ran, stubs = 0, []
    for t, values in world_sizes(observation, params, "the caller's tensors", cases.CONVENTION_SIZES).items():
        for r, o in enumerate(values):
            for part, result in o.items():
                if "raised" in result:
                    if result["raised"] == "NotImplementedError":
                        stubs.append(str(result["message"]) or "a stub")
                    continue
                ran += 1
                judge_part(f"t={t}, rank {r}: {part}", result)
    if not ran and stubs:
        raise Fail(f"not implemented yet (Problem 3.0): every part it watches still raises NotImplementedError "
                   f"(first: {stubs[0]})")
    if not ran:
        raise Fail("no op, layer, loss or model of Problem 3 ran (each raised); nothing to check")


def judge_part(where: str, result) -> None:
    if result.get("input_changed"):
        raise Fail(f"{where} changed its input in place; the caller's tensor must be left as it was (the caller may "
                   "still use it)")
    if result.get("grad_changed"):
        raise Fail(f"{where}: its backward changed the gradient autograd handed it, in place; that tensor is not yours "
                   "(other functions may use it)")
    if result.get("aliased"):
        raise Fail(f"{where}: parameter(s) {', '.join(result['aliased'])} share memory with the master tensors they "
                   "were built from; a training step would change the caller's tensors")
    if result.get("changed"):
        raise Fail(f"{where} changed the caller's {', '.join(result['changed'])} in place (checked after forward, "
                   "backward and one SGD step); leave them as they were")
    if result.get("second_backward"):
        raise Fail(f"{where}: a second backward through the same graph (retain_graph=True) {result['second_backward']}"
                   "; the backward must leave what the forward saved for it as it was (autograd may run it again)")
