"""Problem 2.3's timed workload (HW5's), provided: residual MLP blocks in two stages.

The grader times it on two GPUs (2.3), ``make bench`` on CPU stage threads, and
``python -m minitorch.demos --gpu`` runs it on the CUDA GPUs a student has.
"""
from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from minitorch.timing import PairedTiming, time_paired

# Problem 2.3 as graded: 8 blocks of width 2048, 8192 rows in microbatches of 1024.
FULL = {"width": 2048, "blocks": 8, "rows": 8192, "split_size": 1024, "repeats": 5}
# The same code path, small: for one GPU, where a ratio would mean nothing.
SMOKE = {"width": 256, "blocks": 4, "rows": 1024, "split_size": 128, "repeats": 5}


class Block(nn.Module):
    """A residual MLP block ``x + 0.1 * gelu(linear(x))``."""

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.1 * F.gelu(self.linear(x))


def two_stages(width: int, blocks: int) -> list[nn.Module]:
    """``blocks`` Blocks of ``width``, cut into two stages of ``blocks // 2`` (on the CPU)."""
    return [nn.Sequential(*(Block(width) for _ in range(blocks // 2))) for _ in range(2)]


class StepMismatch(AssertionError):
    """The pipelined training step computed a different update than the sequential one."""


def time_training_step(pipe_class, devices: list[str], size: dict, seed: int) -> PairedTiming:
    """Problem 2.3's measurement: one training step (forward, MSE loss, backward, SGD) of
    ``pipe_class`` (the student's ``Pipe``) over :func:`two_stages` on ``devices``, against the
    same stages run one after the other, by :func:`minitorch.timing.time_paired`.

    Raises:
        StepMismatch: after a timed pair the two models' parameters differ.
    """
    torch.manual_seed(seed)
    stages = two_stages(size["width"], size["blocks"])
    baseline = [copy.deepcopy(stage).to(device) for stage, device in zip(stages, devices)]
    inputs = torch.randn(size["rows"], size["width"], device=devices[0])
    targets = torch.randn(size["rows"], size["width"], device=devices[1])
    baseline_sgd = torch.optim.SGD([p for stage in baseline for p in stage.parameters()], lr=1e-3)

    def baseline_step():
        F.mse_loss(baseline[1](baseline[0](inputs).to(devices[1])), targets).backward()
        baseline_sgd.step()
        baseline_sgd.zero_grad()

    with pipe_class(stages, devices, split_size=size["split_size"]) as pipe:
        pipe_sgd = torch.optim.SGD(list(pipe.parameters()), lr=1e-3)

        def pipe_step():
            F.mse_loss(pipe(inputs), targets).backward()
            pipe_sgd.step()
            pipe_sgd.zero_grad()

        def same_parameters():
            for ours, theirs in zip(pipe.parameters(), (p for stage in baseline for p in stage.parameters())):
                if not torch.allclose(ours, theirs, rtol=1e-4, atol=1e-5):
                    raise StepMismatch("after a timed pair the Pipe's parameters differ from the baseline's: "
                                       "the timed step must compute the same update")

        return time_paired(baseline_step, pipe_step, repeats=size["repeats"], check=same_parameters)
