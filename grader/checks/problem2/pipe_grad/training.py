"""The training runs of 2.2-backward, shared by the child (through the student's ``Pipe``) and the
parent (through the same stages run in sequence): the same batches, losses and steps on both."""
from __future__ import annotations

import torch

from grader.checks.problem2.stages import WIDTH, build_stages, loss_weights, make_batch
from grader.checks.recording import student_tensor

BACKWARD_CASE = (3, 10, 3)  # stages, rows, split_size (microbatches of 3, 3, 3, 1)
SGD_STEPS, LEARNING_RATE = 3, 0.1
FROZEN_CASE = (2, 5, 2)  # every stage frozen: nothing to train, but x may still want its gradient


def _gradients(stages) -> list[list]:
    return [[None if p.grad is None else p.grad.detach().clone() for p in stage.parameters()] for stage in stages]


def _loss(model, x: torch.Tensor, weights: torch.Tensor):
    """``(model(x) * weights).sum()`` and the output; None for the loss when the output is not
    one row per input row (then the grader computes nothing with it)."""
    out = student_tensor(model(x), "Pipe forward")
    if tuple(out.shape) != tuple(x.shape):
        return None, out
    return (out * weights).sum(), out


def train(seed: int, model, stages, parameters) -> dict:
    """A backward, a second backward on the same batch (gradients add up), then SGD steps."""
    rows = BACKWARD_CASE[1]
    x = make_batch(seed, 0, rows).requires_grad_()
    weights = loss_weights(seed, 0, (rows, WIDTH))
    loss, out = _loss(model, x, weights)
    if loss is None:
        return {"shape": list(out.shape)}
    loss.backward()
    seen = {"output": out.detach().clone(), "output_requires_grad": bool(out.requires_grad),
            "input_grad": None if x.grad is None else x.grad.clone(), "grads": _gradients(stages)}
    loss, _ = _loss(model, x, weights)
    if loss is not None:
        loss.backward()
    seen["input_grad_twice"] = None if x.grad is None else x.grad.clone()
    seen["grads_twice"] = _gradients(stages)
    losses = []  # plain SGD written out (torch.optim's first use costs seconds of lazy imports)
    for step in range(1, SGD_STEPS + 1):
        for parameter in parameters:
            parameter.grad = None
        loss, _ = _loss(model, make_batch(seed, step, rows), loss_weights(seed, step, (rows, WIDTH)))
        if loss is None:
            break
        loss.backward()
        with torch.no_grad():
            for parameter in parameters:
                if parameter.grad is not None:
                    parameter -= LEARNING_RATE * parameter.grad
        losses.append(float(loss.detach()))
    seen["losses"] = losses
    seen["parameters"] = [[p.detach().clone() for p in stage.parameters()] for stage in stages]
    return seen


def frozen_stages(seed: int) -> list:
    count = FROZEN_CASE[0]
    return build_stages(seed, 900, count, kinds=["frozen"] * count)


def through_frozen(seed: int, model) -> dict:
    """Frozen stages: a batch without grad gives an output that needs none; one with grad gets its gradient."""
    rows = FROZEN_CASE[1]
    x = make_batch(seed, 900, rows)
    plain = student_tensor(model(x), "Pipe forward")
    switched = x.requires_grad  # the Pipe switched the caller's batch (2.2-input-unchanged's mistake)
    x = make_batch(seed, 901, rows).requires_grad_()
    loss, _ = _loss(model, x, loss_weights(seed, 901, (rows, WIDTH)))
    if loss is not None and loss.requires_grad:
        loss.backward()
    return {"plain_requires_grad": bool(plain.requires_grad), "input_switched": bool(switched),
            "input_grad": None if x.grad is None else x.grad.clone()}
