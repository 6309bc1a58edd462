"""4.4's cases and the grader's recording stages, shared by both sides: the child trains them
with the student's ``train_step``, the parent rebuilds them for the sequential reference."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

WIDTH = 6
TIMEOUT = 10.0  # the StageWorkers' limit: a stuck step fails well inside the criterion's timeout


@dataclass(frozen=True)
class TrainCase:
    """``devices`` x ``chunks`` stages, ``microbatches`` M. ``container``: how the stages are
    passed; ``preset``: gradients already there (the step adds to them); ``then``: a second
    step on the same stages with this M (training twice, another size); ``rows``: the batch
    (default 2M + 1: microbatches of unequal size)."""

    devices: int
    chunks: int
    microbatches: int
    container: str = "list"
    preset: bool = False
    then: int | None = None
    rows: int | None = None

    def describe(self) -> str:
        words = [f"train_step on {self.devices} devices x {self.chunks} chunks, M = {self.microbatches}"]
        if self.then is not None:
            words.append(f"then again on the same stages with M = {self.then}")
        if self.container != "list":
            words.append(f"stages passed as a {self.container}")
        if self.preset:
            words.append("gradients already there before the step")
        if self.rows is not None:
            words.append(f"a batch of {self.rows} rows")
        return ", ".join(words)

    def sizes(self) -> list[int]:
        return [self.microbatches] + ([] if self.then is None else [self.then])


CASES = [  # v = 1 with M < K, M = K, M not a multiple of K; the smallest; every container; a step
    # again with another M and with the same M (the very same call: nothing kept from the first)
    TrainCase(2, 1, 4), TrainCase(3, 1, 5, container="tuple"), TrainCase(4, 1, 2, preset=True),
    TrainCase(2, 2, 4, container="ModuleList"), TrainCase(3, 2, 3), TrainCase(2, 3, 2, preset=True),
    TrainCase(1, 1, 1), TrainCase(1, 2, 3, then=3), TrainCase(2, 1, 3, then=5), TrainCase(2, 2, 2, then=4, preset=True),
    TrainCase(3, 1, 3, rows=3),  # batch = M: one row per microbatch
]
# (label, devices, number of stages, M): the step must raise (not return, not hang)
BAD = [("3 stages on 2 devices", 2, 3, 2), ("no stages", 2, 0, 2), ("M = 3 with 2 devices x 2 chunks", 2, 4, 3),
       ("M = 0", 2, 2, 0)]
# A stage that raises: (devices, chunks, M, failing stage, its failing microbatch)
FAILING = (2, 1, 3, 1, 1)


class StageFailure(Exception):
    """What the grader's failing stage raises (the step must hand it to its caller)."""


class RecordingStage(nn.Module):
    """``tanh(x @ weight + bias)`` that notes, on the grader's ``log``, every forward and
    the start of every backward (when the gradient of its output arrives), per device."""

    def __init__(self, generator: torch.Generator, stage: int, num_devices: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(WIDTH, WIDTH, generator=generator, dtype=torch.float64) / 2)
        self.bias = nn.Parameter(torch.randn(WIDTH, generator=generator, dtype=torch.float64) / 2)
        self.stage, self.device_index, self.log = stage, stage % num_devices, None
        self.fail_on_call: int | None = None
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.fail_on_call == self.calls:
            raise StageFailure(f"stage {self.stage} failed on purpose")
        output = torch.tanh(x @ self.weight + self.bias)
        if self.log is not None:
            self.log.note(self.device_index, self.stage, "F")
            if output.requires_grad:
                output.register_hook(lambda grad: self.log.note(self.device_index, self.stage, "B"))
        return output


@dataclass
class StepLog:
    """What ran on each device, in order, and its peak of held activations (1/v per chunk)."""

    num_devices: int
    num_chunks: int
    events: list = field(default_factory=list)
    held: list = field(default_factory=list)
    peaks: list = field(default_factory=list)

    def __post_init__(self):
        self.events = [[] for _ in range(self.num_devices)]
        self.held = [0] * self.num_devices
        self.peaks = [0.0] * self.num_devices

    def note(self, device: int, stage: int, kind: str) -> None:
        self.events[device].append([stage, kind])
        self.held[device] += 1 if kind == "F" else -1
        self.peaks[device] = max(self.peaks[device], self.held[device] / self.num_chunks)


def build(seed: int, devices: int, chunks: int, microbatches: int, rows: int | None = None):
    """The stages, inputs and targets of a training case (the parent rebuilds them)."""
    generator = torch.Generator().manual_seed(seed * 10 + devices * 100 + chunks * 10 + microbatches)
    stages = [RecordingStage(generator, s, devices) for s in range(devices * chunks)]
    batch = 2 * max(microbatches, 1) + 1 if rows is None else rows
    inputs = torch.randn(batch, WIDTH, generator=generator, dtype=torch.float64)
    targets = torch.randn(batch, WIDTH, generator=generator, dtype=torch.float64)
    return stages, inputs, targets


def preset(stages) -> None:
    """Gradients already there: every parameter's ``.grad`` = a fixed ramp."""
    for stage in stages:
        for parameter in stage.parameters():
            parameter.grad = torch.linspace(-1, 1, parameter.numel(), dtype=parameter.dtype).reshape(parameter.shape)


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((output - target) ** 2).mean()


def schedule_call(devices: int, chunks: int, microbatches: int) -> tuple[str, tuple]:
    """The schedule function a step must follow, and its arguments."""
    if chunks == 1:
        return "one_f_one_b", (devices, microbatches)
    return "interleaved_one_f_one_b", (devices, microbatches, chunks)
