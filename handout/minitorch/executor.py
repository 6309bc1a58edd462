"""Run one pipelined training step by a schedule, forward AND backward (provided).

The HW5 ``Pipe`` pipelines only the forward; ``loss.backward()`` then runs through
autograd, which on a CPU uses a single thread, so the backward is serial (lecture 3.4).
Here every device runs its own microbatch forwards and backwards on its own
``StageWorkers`` thread, in the order a schedule gives (GPipe, 1F1B, interleaved 1F1B;
Problem 4.4 drives it with your own schedules)::

    device 0 |F0 F1 F2 F3 ·· ·· ·· B0 ·· B1 ...|     F: forward of a microbatch
    device 1 |·· F0 F1 ·· B0 F2 B1 F3 B2 ·· B3 |     B: its backward

With ``v`` chunks per device there are ``K * v`` stages and stage ``s`` runs on device
``s % K`` (:func:`minitorch.schedules.device_of`), as in the simulator.

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

    ``loss``: the batch loss (float). ``executed[d]``: the actions device ``d`` ran, in
    order, as :func:`minitorch.schedules.format_action` writes them (``"F3"``, ``"B3"``;
    ``"1F3"`` for chunk 1 when there are several chunks). ``peak_live[d]``: the most
    microbatches whose activations device ``d`` held at once (forward done, backward not
    yet), each chunk counting ``1/v``: the simulator's ``Timeline.peak_in_flight``.
    """

    loss: float
    executed: list[list[str]] = field(default_factory=list)
    peak_live: list[float] = field(default_factory=list)


def stage_plans(schedule: Sequence[Sequence[Any]], num_devices: int) -> list[list[tuple[int, str, int]]]:
    """``[(stage, "F", 0), (stage, "F", 1), (stage, "B", 0), ...]`` per device, from a schedule
    in the one representation of :mod:`minitorch.schedules` (``Action`` rows or strings like
    ``"F3"`` / ``"1F3"``), checked by its validator and simulator (which names the device and
    step of a problem).

    Raises:
        ValueError: an invalid schedule, or one this executor cannot run: it runs forwards
            (F) and full backwards (B) only (no I/W split).
    """
    rows = schedules.validate(schedule)
    if len(rows) != num_devices:
        raise ValueError(f"{num_devices} devices but the schedule has {len(rows)} device rows")
    for device, row in enumerate(rows):
        for step, action in enumerate(row):
            if action.kind not in ("F", "B"):
                raise ValueError(
                    f"device {device} step {step}: {action.kind}{action.microbatch} of stage {action.stage}: "
                    "the executor runs forwards (F) and full backwards (B) only"
                )
    schedules.simulate(rows)  # an order no execution can follow is a deadlock: say so now
    return [[(action.stage, action.kind, action.microbatch) for action in row] for row in rows]


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
        workers: one worker per device; ``workers.devices[d]`` is device ``d``.
        stages: the ``K * v`` stages (``K = workers.num_stages`` devices, ``v`` chunks
            each), ``stages[s]`` already on ``workers.devices[s % K]``.
        schedule: ``schedule[d]`` is device ``d``'s action list in the representation of
            :mod:`minitorch.schedules` (``Action``, or ``"F0"``, ``"B0"``, ``"1F0"``),
            naming each of the M microbatches once as F and once as B on every stage
            (see :func:`stage_plans`).
        inputs: ``[batch, ...]``, split along dim 0 into M nearly equal microbatches
            (``torch.tensor_split``).
        targets: ``[batch, ...]``, split the same way.
        loss_fn: ``loss_fn(output, target)`` -> scalar mean loss of a microbatch.

    Returns:
        A :class:`StepReport`. The optimizer step is the caller's.

    Raises:
        ValueError: the schedule does not match the stages or the batch.
        The first exception a stage raised; TimeoutError if a device waits too long
        (``0.8 * workers.timeout`` for one activation or gradient).
    """
    num_devices = workers.num_stages
    if not stages or len(stages) % num_devices:
        raise ValueError(f"{len(stages)} stages cannot be spread evenly over {num_devices} devices")
    num_chunks = len(stages) // num_devices
    plans = stage_plans(schedule, num_devices)
    if 1 + max(stage for plan in plans for stage, _, _ in plan) != len(stages):
        raise ValueError(f"{len(stages)} stages but the schedule names stages 0..{max(s for p in plans for s, _, _ in p)}")
    num_microbatches = 1 + max(mb for plan in plans for _, _, mb in plan)
    if num_microbatches > inputs.shape[0]:
        raise ValueError(f"{num_microbatches} microbatches but only {inputs.shape[0]} rows")
    microbatch_inputs = torch.tensor_split(inputs, num_microbatches)
    microbatch_targets = torch.tensor_split(targets, num_microbatches)
    batch_rows = inputs.shape[0]

    abort = threading.Event()
    # Shorter than the caller's receive limit, so a stuck device says what it waited for.
    wait_limit = 0.8 * workers.timeout
    activations = [_Mailbox(abort, wait_limit) for _ in stages]  # activations[s]: inputs of stage s
    gradients = [_Mailbox(abort, wait_limit) for _ in stages]  # gradients[s]: grads of stage s's output
    losses = [0.0] * num_microbatches
    report = StepReport(loss=0.0, executed=[[] for _ in range(num_devices)], peak_live=[0] * num_devices)
    last = len(stages) - 1

    def forward(s: int, mb: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
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
        return x, out

    def backward(s: int, mb: int, x: torch.Tensor, out: torch.Tensor, device: torch.device | str) -> None:
        if s == last:
            out.backward()
        else:
            out.backward(gradients[s].take(mb, f"the gradient of microbatch {mb} from stage {s + 1}").to(device))
        if s > 0:
            gradients[s - 1].put(mb, x.grad)  # type: ignore[arg-type]  # x requires grad: set by backward

    def program(d: int) -> None:
        device, live = workers.devices[d], {}
        try:
            for s, kind, mb in plans[d]:
                if kind == "F":
                    live[s, mb] = forward(s, mb, device)
                    report.peak_live[d] = max(report.peak_live[d], len(live) / num_chunks)
                else:
                    backward(s, mb, *live.pop((s, mb)), device)
                action = schedules.Action(s, kind, mb)
                report.executed[d].append(schedules.format_action(action, num_devices, num_chunks))
        except BaseException:
            abort.set()
            raise

    for d in range(num_devices):
        workers.submit(d, functools.partial(program, d))
    errors = []
    for d in range(num_devices):
        try:
            workers.receive(d)
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
