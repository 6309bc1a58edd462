"""Small printed demos of the homework's ideas, run on YOUR code (provided).

``python -m minitorch.demos`` prints the clock-cycle table of lecture section 2.2 (your
Problem 2.1) and the submit/receive order of your ``Pipe`` (lecture section 3.1, Problem 2.2). ``python -m minitorch.demos --gpu``
runs Problem 2.3's code path on the CUDA GPUs this machine has, as the grader does: paired
training steps of your ``Pipe`` and of the same stages in sequence, their parameters
compared after every pair; with two GPUs the speedup is the one 2.3 grades.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from minitorch import cli, runtime, workload


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
    print(f"\nmax |Pipe - sequential| = {difference:.1e}  (equal up to rounding: the Pipe multiplies 2-row "
          "microbatches, the sequential run one batch; a CPU may round the two shapes differently)")


def gpu_demo() -> int:
    """Problem 2.3's code path on this machine's CUDA GPUs, as the grader runs it; 1 without one."""
    from minitorch.pipeline import Pipe

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        print("python -m minitorch.demos --gpu: needs a CUDA GPU, and PyTorch sees none here "
              "(Problem 2.3 is graded on a machine with two)")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    devices = ["cuda:0", "cuda:1"] if count >= 2 else ["cuda:0", "cuda:0"]
    size = workload.FULL if count >= 2 else workload.SMOKE
    print(f"{count} CUDA GPU(s): {', '.join(torch.cuda.get_device_name(i) for i in range(count))}")
    print(f"training steps of your Pipe with stages on {devices[0]} and {devices[1]} ({size['rows']} rows "
          f"of width {size['width']}, microbatches of {size['split_size']}) against the stages in sequence:")
    try:
        timing = workload.time_training_step(Pipe, devices, size, seed=0)
    except workload.StepMismatch as error:
        print(f"  wrong: {error}")
        return 1
    ratios = ", ".join(f"{r:.2f}" for r in timing.ratios)
    print(f"  same parameters after every step; speedup {timing.median_ratio:.2f}x (paired ratios {ratios})")
    if count < 2:
        print("  (one GPU holds both stages: this checks the CUDA code path; the speedup needs two GPUs)")
    elif not timing.conclusive:
        print("  (inconclusive: the ratios spread widely; is something else using the GPUs?)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("demos", __doc__)
    parser.add_argument("-M", type=int, default=3, help="microbatches (default 3)")
    parser.add_argument("-K", type=int, default=3, help="stages (default 3)")
    parser.add_argument("--gpu", action="store_true", help="run Problem 2.3's code path on this machine's CUDA GPUs")
    args = parser.parse_args(argv)
    if args.M < 1 or args.K < 1:
        parser.error(f"-M and -K must be >= 1, got {args.M} and {args.K}")
    if args.gpu:
        return gpu_demo()
    pipeline_demo(args.M, args.K)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run(main, "python -m minitorch.demos"))
