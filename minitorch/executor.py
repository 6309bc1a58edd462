"""Run one pipelined training step by a schedule, forward AND backward (provided).

The HW5 ``Pipe`` pipelines only the forward; ``loss.backward()`` then runs through
autograd, which on a CPU uses a single thread, so the backward is serial (lecture 3.4).
Here every stage runs its own microbatch forwards and backwards on its own
``StageWorkers`` thread, in the order a schedule gives (GPipe, 1F1B, ...)::

    stage 0 |F0 F1 F2 F3 ·· ·· ·· B0 ·· B1 ...|     F: forward of a microbatch
    stage 1 |·· F0 F1 ·· B0 F2 B1 F3 B2 ·· B3 |     B: its backward

At a stage boundary the activation is detached and marked ``requires_grad`` on the
receiving stage; its gradient travels back to the sending stage, which continues the
backward from there. The last stage computes one loss per microbatch, scaled by the
microbatch's share of the batch, so the accumulated gradients equal those of the mean
loss over the whole batch.
"""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from minitorch import schedules
from minitorch.runtime import StageWorkers

_POLL_SECONDS = 0.05


class _Aborted(Exception):
    """Another stage failed; this one stops waiting for it."""


class _Mailbox:
    """Tensors handed from one stage thread to another, keyed by microbatch."""

    def __init__(self, abort: threading.Event, timeout: float):
        self._items: dict[int, torch.Tensor] = {}
        self._ready = threading.Condition()
        self._abort = abort
        self._timeout = timeout

    def put(self, microbatch: int, tensor: torch.Tensor) -> None:
        with self._ready:
            self._items[microbatch] = tensor
            self._ready.notify_all()

    def take(self, microbatch: int, what: str) -> torch.Tensor:
        deadline = time.monotonic() + self._timeout
        with self._ready:
            while microbatch not in self._items:
                if self._abort.is_set():
                    raise _Aborted()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"waited {self._timeout:g} s for {what}: is the schedule valid?")
                self._ready.wait(_POLL_SECONDS)
            return self._items.pop(microbatch)


@dataclass
class StepReport:
    """What one pipelined step did.

    ``loss``: the batch loss (float). ``executed[s]``: the actions stage ``s`` ran, in
    order (``"F3"``, ``"B3"``). ``peak_live[s]``: the most microbatches whose activations
    stage ``s`` held at once (forward done, backward not yet).
    """

    loss: float
    executed: list[list[str]] = field(default_factory=list)
    peak_live: list[int] = field(default_factory=list)


def stage_plans(schedule: Sequence[Sequence[Any]], num_stages: int) -> list[list[tuple[str, int]]]:
    """``[("F", 0), ("F", 1), ("B", 0), ...]`` per stage, from a schedule in the one
    representation of :mod:`minitorch.schedules` (``Action`` rows or strings like ``"F3"``),
    checked by its validator and simulator (which names the device and step of a problem).

    Raises:
        ValueError: an invalid schedule, or one this executor cannot run: it runs one
            stage per device (no interleaving) and full backwards (no I/W split).
    """
    rows = schedules.validate(schedule)
    if len(rows) != num_stages:
        raise ValueError(f"{num_stages} stages but the schedule has {len(rows)} device rows")
    for device, row in enumerate(rows):
        for step, action in enumerate(row):
            if action.stage != device or action.kind not in ("F", "B"):
                raise ValueError(
                    f"device {device} step {step}: {action.kind}{action.microbatch} of stage {action.stage}: "
                    "the executor runs one stage per device, with forwards (F) and full backwards (B) only"
                )
    schedules.simulate(rows)  # an order no execution can follow is a deadlock: say so now
    return [[(action.kind, action.microbatch) for action in row] for row in rows]


def run_schedule(
    workers: StageWorkers,
    stages: Sequence[nn.Module],
    schedule: Sequence[Sequence[Any]],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> StepReport:
    """Forward and backward of one batch by ``schedule``; gradients accumulate in ``.grad``.

    Args:
        workers: one worker per stage; ``workers.devices[s]`` is stage ``s``'s device.
        stages: the stages, ``stages[s]`` already on ``workers.devices[s]``.
        schedule: ``schedule[s]`` is stage ``s``'s action list in the representation of
            :mod:`minitorch.schedules` (``Action`` or ``"F0"``, ``"B0"``), naming each of
            the M microbatches once as F and once as B (see :func:`stage_plans`).
        inputs: ``[batch, ...]``, split along dim 0 into M nearly equal microbatches
            (``torch.tensor_split``).
        targets: ``[batch, ...]``, split the same way.
        loss_fn: ``loss_fn(output, target)`` -> scalar mean loss of a microbatch.

    Returns:
        A :class:`StepReport`. The optimizer step is the caller's.

    Raises:
        ValueError: the schedule does not match the stages or the batch.
        The first exception a stage raised; TimeoutError if a stage waits too long.
    """
    if len(stages) != workers.num_stages:
        raise ValueError(f"{len(stages)} stages but {workers.num_stages} workers")
    plans = stage_plans(schedule, len(stages))
    num_microbatches = 1 + max(mb for plan in plans for _, mb in plan)
    if num_microbatches > inputs.shape[0]:
        raise ValueError(f"{num_microbatches} microbatches but only {inputs.shape[0]} rows")
    microbatch_inputs = torch.tensor_split(inputs, num_microbatches)
    microbatch_targets = torch.tensor_split(targets, num_microbatches)
    batch_rows = inputs.shape[0]

    abort = threading.Event()
    # Shorter than the caller's receive limit, so a stuck stage says what it waited for.
    wait_limit = 0.8 * workers.timeout
    activations = [_Mailbox(abort, wait_limit) for _ in stages]
    gradients = [_Mailbox(abort, wait_limit) for _ in stages]
    losses = [0.0] * num_microbatches
    report = StepReport(loss=0.0, executed=[[] for _ in stages], peak_live=[0] * len(stages))
    last = len(stages) - 1

    def program(s: int) -> None:
        device, live = workers.devices[s], {}
        try:
            for kind, mb in plans[s]:
                if kind == "F":
                    x = microbatch_inputs[mb] if s == 0 else activations[s].take(mb, f"microbatch {mb} from stage {s - 1}")
                    x = x.to(device)
                    if s > 0:
                        x = x.detach().requires_grad_()
                    out = stages[s](x)
                    if s == last:
                        share = microbatch_inputs[mb].shape[0] / batch_rows
                        out = loss_fn(out, microbatch_targets[mb].to(device)) * share
                        losses[mb] = out.item()
                    else:
                        activations[s + 1].put(mb, out.detach())
                    live[mb] = (x, out)
                    report.peak_live[s] = max(report.peak_live[s], len(live))
                else:
                    x, out = live.pop(mb)
                    if s == last:
                        out.backward()
                    else:
                        out.backward(gradients[s].take(mb, f"the gradient of microbatch {mb} from stage {s + 1}").to(device))
                    if s > 0:
                        gradients[s - 1].put(mb, x.grad)  # type: ignore[arg-type]  # x requires grad: set by backward
                report.executed[s].append(f"{kind}{mb}")
        except BaseException:
            abort.set()
            raise

    for s in range(len(stages)):
        workers.submit(s, functools.partial(program, s))
    errors = []
    for s in range(len(stages)):
        try:
            workers.receive(s)
        except BaseException as error:
            errors.append(error)
    first = next((e for e in errors if not isinstance(e, _Aborted)), None)
    if first is not None:
        raise first
    report.loss = sum(losses)
    return report


def sequential_step(
    stages: Sequence[nn.Module],
    devices: Sequence[str | torch.device],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> float:
    """The non-pipelined reference: the whole batch through every stage (stage ``s`` on
    ``devices[s]``), then one ``backward()``. Returns the loss."""
    x = inputs
    for stage, device in zip(stages, devices):
        x = stage(x.to(device))
    loss = loss_fn(x, targets.to(x.device))
    loss.backward()
    return loss.item()
