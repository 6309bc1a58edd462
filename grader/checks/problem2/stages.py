"""The grader's own pipeline stages and batches, shared by the two sides of every 2.2 check.

The child runs them through the student's ``Pipe``; the parent rebuilds the same stages and
batches from the seed and runs them in sequence with plain PyTorch. Nothing here judges.
"""
from __future__ import annotations

import threading
import time

import torch
from torch import nn

WIDTH = 6  # column 0 carries the row number through every stage; 5 features are mixed
DTYPE = torch.float64
HOLD_LIMIT = 5.0  # seconds a held stage waits at most for its release


class GraderStageError(Exception):
    """The exception a grader stage raises on purpose."""


class GraderInterrupt(BaseException):
    """A stage's exception that is not an ``Exception`` (as KeyboardInterrupt is not)."""


FAILURES = {"Exception": GraderStageError, "BaseException": GraderInterrupt}


class GraderStage(nn.Module):
    """``[row number | tanh(linear(features))]`` on the rows of a batch of any rank >= 2 (flattened
    to WIDTH features per row): column 0 passes through, so any stage can tell which rows (and so
    which microbatch) it was given. On a 1-D batch (one number per row), ``tanh(w x + b)``.

    ``parameters``: "trained" (weight and bias are parameters), "frozen" (parameters that do not
    require grad) or "buffers" (a stage without parameters). Every call appends ``(first row,
    rows)`` to ``given`` and, after its output is made, a record to ``log`` (a list shared by the
    stages of one pipe). ``sleep`` seconds are slept first (releasing the GIL); on the microbatch
    ``hold_on`` it waits, once, until the event ``hold`` is set (HOLD_LIMIT seconds at most); ``fail_on`` names a microbatch (the one holding row
    ``fail_on * split_size``) on which the stage raises ``FAILURES[fail_with]``.
    """

    def __init__(self, index: int, generator: torch.Generator, log: list | None = None,
                 dtype: torch.dtype = DTYPE, parameters: str = "trained"):
        super().__init__()
        features = WIDTH - 1
        weight = torch.randn(features, features, generator=generator, dtype=DTYPE).to(dtype) / features**0.5
        bias = torch.randn(features, generator=generator, dtype=DTYPE).to(dtype) / 4
        if parameters == "buffers":
            self.register_buffer("weight", weight)
            self.register_buffer("bias", bias)
        else:
            self.weight = nn.Parameter(weight, requires_grad=parameters == "trained")
            self.bias = nn.Parameter(bias, requires_grad=parameters == "trained")
        self.index = index
        self.log = log
        self.sleep = 0.0
        self.hold: threading.Event | None = None
        self.hold_on: int | None = None
        self.fail_on: int | None = None
        self.fail_with = "Exception"
        self.split_size = 1
        self.raised: list[BaseException] = []  # every exception it raised (stray calls may raise several)
        self.given: list[tuple[int, int]] = []

    def _holds(self, microbatch: int | None, first: int, rows: int) -> bool:
        return microbatch is not None and first <= microbatch * self.split_size < first + rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = int(x.shape[0])
        flat = x.reshape(rows, -1) if x.dim() > 1 else x
        first = int(flat[0, 0].item()) if rows and x.dim() > 1 else -1
        if self.sleep:
            time.sleep(self.sleep)
        hold = self.hold
        if hold is not None and self._holds(self.hold_on, first, rows):
            self.hold = None  # once: the same microbatch sent again runs at once
            hold.wait(HOLD_LIMIT)
        self.given.append((first, rows))
        if self._holds(self.fail_on, first, rows):
            error = FAILURES[self.fail_with](f"stage {self.index} refuses microbatch {self.fail_on}")
            self.raised.append(error)
            raise error
        if x.dim() == 1:
            out = torch.tanh(x * self.weight[0, 0] + self.bias[0])
        else:
            mixed = torch.tanh(torch.nn.functional.linear(flat[:, 1:], self.weight, self.bias))
            out = torch.cat([flat[:, :1], mixed], dim=1).reshape(x.shape)
        if self.log is not None:
            self.log.append({
                "stage": self.index, "rows": rows, "first": first, "thread": threading.get_ident(),
                "grad_enabled": torch.is_grad_enabled(), "inference": torch.is_inference_mode_enabled(),
                "graph": out.grad_fn is not None,
            })
        return out


def build_stages(seed: int, tag: int, count: int, log: list | None = None, dtype: torch.dtype = DTYPE,
                 kinds: list[str] | None = None) -> list[GraderStage]:
    """``count`` stages whose weights depend only on (seed, tag), not on the global RNG."""
    generator = torch.Generator().manual_seed(seed * 1009 + tag)
    kinds = kinds or ["trained"] * count
    return [GraderStage(j, generator, log, dtype, kinds[j]) for j in range(count)]


def make_batch(seed: int, tag: int, rows: int) -> torch.Tensor:
    """``rows`` distinct rows: column 0 is the row number, the rest random."""
    generator = torch.Generator().manual_seed(seed * 7919 + tag)
    batch = torch.randn(rows, WIDTH, generator=generator, dtype=DTYPE)
    batch[:, 0] = torch.arange(rows, dtype=DTYPE)
    return batch


def case_input(seed: int, tag: int, rows: int, case: dict) -> torch.Tensor:
    """The batch of one call: ``make_batch``'s rows in the case's rank (``shape``: the dimensions
    after the rows, ``[]`` for a 1-D batch), dtype and layout (``"transposed"``: rows and last dimension
    swapped in memory, so not contiguous)."""
    batch = make_batch(seed, tag, rows)
    shape = case.get("shape", [WIDTH])
    x = batch[:, 1].contiguous() if not shape else batch.reshape(rows, *shape)
    x = x.to(getattr(torch, case.get("dtype", "float64")))
    return x.transpose(0, -1).contiguous().transpose(0, -1) if case.get("layout") == "transposed" else x


def case_stages(seed: int, tag: int, case: dict, log: list | None = None) -> list[GraderStage]:
    """The stages of a case: ``case["stages"]`` of them, in its dtype and of its ``kinds``."""
    return build_stages(seed, tag, case["stages"], log, getattr(torch, case.get("dtype", "float64")), case.get("kinds"))


def loss_weights(seed: int, tag: int, shape: tuple[int, ...], dtype: torch.dtype = DTYPE) -> torch.Tensor:
    """The weights of a training step's loss ``(out * weights).sum()``."""
    generator = torch.Generator().manual_seed(seed * 104729 + tag)
    return torch.randn(shape, generator=generator, dtype=DTYPE).to(dtype)
