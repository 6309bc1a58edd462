"""Pipeline parallelism: the GPipe schedule and a threaded Pipe (student file).

You implement the regions marked ``# TODO: Implement for Problem N.M.``; everything
else is given. Run the public tests of one problem with ``pytest -m problem_2_1``.

The GPipe forward with M = 3 microbatches on K = 3 stages, one clock cycle ("wave")
per column; ``(i, j)`` is microbatch i on stage j::

    wave     0       1       2       3       4
    stage 0  (0,0)   (1,0)   (2,0)
    stage 1          (0,1)   (1,1)   (2,1)
    stage 2                  (0,2)   (1,2)   (2,2)
"""
from __future__ import annotations

from typing import Iterator, Sequence

import torch
from torch import nn

from minitorch.runtime import DEFAULT_TIMEOUT, StageWorkers


def clock_cycles(num_microbatches: int, num_stages: int) -> Iterator[list[tuple[int, int]]]:
    """Yield the GPipe forward schedule, one wave (clock cycle) at a time.

    Microbatch ``i`` can run on stage ``j`` once it has left stage ``j - 1`` and stage
    ``j`` has finished microbatch ``i - 1``, so its earliest clock cycle is ``i + j``.
    Wave ``k`` is the list of every valid pair ``(i, j)`` (microbatch, stage) with
    ``i + j == k``, ordered by increasing stage ``j``. There are
    ``num_microbatches + num_stages - 1`` waves; ``num_microbatches == 0`` yields none.

    >>> list(clock_cycles(3, 3))
    [[(0, 0)], [(1, 0), (0, 1)], [(2, 0), (1, 1), (0, 2)], [(2, 1), (1, 2)], [(2, 2)]]

    Note the order inside a pair: (microbatch, stage). (The lecture slides' F_{a,b} is
    stage a, microbatch b: the other way round.)

    This is a generator function: calling it never raises; the checks below run when
    iteration starts.

    Raises:
        ValueError: ``num_microbatches < 0`` or ``num_stages < 1`` (on first ``next``).
    """
    # BEGIN SOLUTION 2.1
    if num_microbatches < 0:
        raise ValueError(f"num_microbatches must be >= 0, got {num_microbatches}")
    if num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")
    if num_microbatches == 0:
        return
    for wave in range(num_microbatches + num_stages - 1):
        first_stage = max(0, wave - num_microbatches + 1)
        last_stage = min(wave, num_stages - 1)
        yield [(wave - stage, stage) for stage in range(first_stage, last_stage + 1)]
    # END SOLUTION


def _run_stage(stage: nn.Module, microbatch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Move ``microbatch`` to ``device`` and run ``stage`` on it (called on a stage thread)."""
    return stage(microbatch.to(device, non_blocking=True))


class Pipe(nn.Module):
    """Run a sequence of stages as a GPipe pipeline over microbatches.

    ``Pipe(stages, devices, split_size)(x)`` computes the same values as
    ``stages[-1](...stages[1](stages[0](x)))``, but splits ``x`` into microbatches and
    lets every stage work on a different microbatch at the same time, one worker thread
    per stage (:class:`minitorch.runtime.StageWorkers`).

    Args:
        stages: the pipeline stages, a non-empty sequence of ``nn.Module``. Stage ``j``
            is moved to ``devices[j]``; they are kept as ``self.stages``
            (an ``nn.ModuleList``) so ``pipe.parameters()`` sees every stage's.
        devices: one device per stage, e.g. ``["cuda:0", "cuda:1"]``; ``None`` means
            ``"cpu"`` for every stage.
        split_size: rows per microbatch (>= 1). The last microbatch may be smaller; a
            ``split_size`` larger than the batch gives a single microbatch.
        timeout: seconds a stage may take before ``TimeoutError`` (see StageWorkers).

    Raises:
        ValueError: no stages, a stage that is not an ``nn.Module``, ``len(devices) !=
            len(stages)``, or ``split_size`` not an int >= 1.

    Use ``close()`` (or ``with Pipe(...) as pipe:``) to stop the worker threads.
    """

    def __init__(
        self,
        stages: Sequence[nn.Module],
        devices: Sequence[str | torch.device] | None = None,
        split_size: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ):
        super().__init__()
        stages = list(stages)
        if not stages:
            raise ValueError("Pipe needs at least one stage, got none")
        for index, stage in enumerate(stages):
            if not isinstance(stage, nn.Module):
                raise ValueError(f"stage {index} must be an nn.Module, got {type(stage).__name__}")
        devices = ["cpu"] * len(stages) if devices is None else list(devices)
        if len(devices) != len(stages):
            raise ValueError(f"need one device per stage: {len(stages)} stages, {len(devices)} devices")
        if isinstance(split_size, bool) or not isinstance(split_size, int) or split_size < 1:
            raise ValueError(f"split_size must be an int >= 1 (rows per microbatch), got {split_size!r}")
        self.devices = [torch.device(d) for d in devices]
        self.stages = nn.ModuleList(stage.to(device) for stage, device in zip(stages, self.devices))
        self.split_size = split_size
        self.workers = StageWorkers(self.devices, timeout=timeout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the pipeline on a batch.

        Args:
            x: a tensor of shape ``[batch, ...]`` (any device). It is split along
               dimension 0 into microbatches of ``split_size`` rows.

        Returns:
            ``stages[-1](...stages[0](x))``: the microbatch outputs concatenated along
            dimension 0 in the original row order, on ``devices[-1]``. Nothing is
            detached: ``backward()`` reaches every stage's parameters and ``x``.

        How: for each wave of ``clock_cycles(num_microbatches, num_stages)`` (call it by
        that name), first ``self.workers.submit(j, ...)`` every ``(i, j)`` of the wave,
        then ``self.workers.receive(j)`` them in the same order; the output of
        microbatch i on stage j is the input of (i, j + 1) in the next wave::

            wave 2:  submit(0) submit(1) submit(2) receive(0) receive(1) receive(2)

        Each submitted callable does the whole stage step itself, including moving its
        microbatch to the stage's device: a ``.to(device)`` in this (calling) thread
        makes every stage wait for the copy.

        Raises:
            The exception a stage raised, unchanged (same object). The rest of that wave
            is still received first, so the Pipe can be called again afterwards.
        """
        # BEGIN SOLUTION 2.2
        microbatches = list(torch.split(x, self.split_size))
        for wave in clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                self.workers.submit(
                    j,
                    lambda stage=self.stages[j], batch=microbatches[i], device=self.devices[j]: _run_stage(
                        stage, batch, device
                    ),
                )
            first_error = None
            for i, j in wave:
                try:
                    microbatches[i] = self.workers.receive(j)
                except BaseException as error:
                    # Keep receiving: a result left queued would be read by the next call.
                    if first_error is None:
                        first_error = error
            if first_error is not None:
                raise first_error
        return torch.cat(microbatches)
        # END SOLUTION

    def close(self) -> None:
        """Stop the stage threads (idempotent). The Pipe cannot run afterwards."""
        self.workers.close()

    def __enter__(self) -> "Pipe":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


if __name__ == "__main__":
    from minitorch.demos import pipeline_demo

    pipeline_demo()
