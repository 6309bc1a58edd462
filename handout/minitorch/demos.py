"""Small printed demos of the homework's ideas (provided).

``python -m minitorch.demos`` prints the clock-cycle table of lecture section 2.2 and
the submit/receive order of section 3.1, using YOUR ``clock_cycles`` and ``Pipe``.
"""
from __future__ import annotations

import torch
from torch import nn

from minitorch import runtime


def format_clock_cycles(num_microbatches: int, num_stages: int, clock_cycles) -> str:
    """The waves of ``clock_cycles(M, K)``, one line per wave: ``k = 1: [(1, 0), (0, 1)]``."""
    lines = [f"clock_cycles({num_microbatches}, {num_stages}):"]
    for wave_index, wave in enumerate(clock_cycles(num_microbatches, num_stages)):
        lines.append(f"  k = {wave_index}: {wave}")
    return "\n".join(lines)


def format_call_order(events: list[runtime.WorkerEvent], waves: list[list[tuple[int, int]]]) -> str:
    """Group recorded submit/receive events by wave: ``wave 2: submit(0) ... receive(2)``."""
    calls = [f"{e.kind}({e.stage})" for e in events if e.kind in ("submit", "receive")]
    lines, position = [], 0
    for wave_index, wave in enumerate(waves):
        size = 2 * len(wave)
        lines.append(f"wave {wave_index}: " + "  ".join(calls[position : position + size]))
        position += size
    if position < len(calls):
        lines.append("after the last wave: " + "  ".join(calls[position:]))
    return "\n".join(lines)


def pipeline_demo(num_microbatches: int = 3, num_stages: int = 3) -> None:
    """Print the clock-cycle table and the Pipe's call order for M microbatches, K stages."""
    from minitorch.pipeline import Pipe, clock_cycles

    print(format_clock_cycles(num_microbatches, num_stages, clock_cycles))
    print()
    torch.manual_seed(0)
    stages = [nn.Linear(4, 4) for _ in range(num_stages)]
    events: list[runtime.WorkerEvent] = []
    batch = torch.randn(2 * num_microbatches, 4)
    with Pipe(stages, split_size=2) as pipe, runtime.observe(events.append):
        output = pipe(batch)
    print(f"Pipe with {num_stages} stages on a batch of {batch.shape[0]} rows, split_size=2:")
    print(format_call_order(events, list(clock_cycles(num_microbatches, num_stages))))
    expected = batch
    for stage in stages:
        expected = stage(expected)
    difference = (output - expected).abs().max().item()
    print(f"\nmax |Pipe - sequential| = {difference:.1e}")


if __name__ == "__main__":
    pipeline_demo()
