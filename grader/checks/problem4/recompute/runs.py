"""One recomputation case run and recorded, shared by both sides: the plain run (the child's is
the bit-level reference, the parent's checks it) and what is recorded of the student's."""
from __future__ import annotations

import torch

from grader.checks.problem4.recompute.cases import RecomputeCase
from grader.checks.problem4.recompute.layers import (
    given_input,
    loss_weights,
    parameters,
    plain_forward,
    preset_gradients,
)
from grader.checks.recording import student_tensor


def clone(tensor):
    return None if tensor is None else student_tensor(tensor, "a gradient").detach().clone()


def plain_run(layers, x, rng_seed: int, case: RecomputeCase) -> dict:
    """The reference: the layers one after the other on ``given_input(x, case)``, differentiated
    as ``case`` says."""
    if case.accumulate:
        preset_gradients(layers, x)
    torch.manual_seed(rng_seed)
    given = given_input(x, case)
    return finish(layers, given, plain_forward(layers, given), case)


def finish(layers, x, output, case: RecomputeCase, earlier=None) -> dict:
    """Record a run whose forward just returned ``output``: its value, whether it requires
    grad, the RNG state, then (when it requires grad) the gradients of ``sum(weights *
    output)`` for x and every parameter, by ``.backward()`` or, for ``case.via_grad``, by
    ``torch.autograd.grad`` (then also which tensors have a ``.grad`` afterwards). An output
    that is ``earlier`` (the tensor an earlier call returned, its graph spent) is recorded as
    handed out again, and not differentiated."""
    again = earlier is not None and output is earlier
    output = student_tensor(output, "checkpoint_sequential")
    record = {"output": output.detach().clone(), "requires_grad": output.requires_grad, "handed_out_again": again,
              "x_requires_grad": x.requires_grad, "rng_after_forward": torch.get_rng_state()}
    tensors = [x, *parameters(layers)]
    grads: list = [None] * len(tensors)
    if output.requires_grad and not again:
        loss = (output * loss_weights(output)).sum()
        if case.via_grad:
            wanted = [index for index, tensor in enumerate(tensors) if tensor.requires_grad]
            found = torch.autograd.grad(loss, [tensors[index] for index in wanted], allow_unused=True)
            for index, grad in zip(wanted, found):
                grads[index] = grad
        else:
            loss.backward()
            grads = [tensor.grad for tensor in tensors]
    record["grads"] = [clone(grad) for grad in grads]
    record["has_grad"] = [tensor.grad is not None for tensor in tensors]
    record["rng_after_backward"] = torch.get_rng_state()
    return record
