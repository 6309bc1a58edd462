"""CPU pipeline speedups: Pipe forward and full training steps vs sequential (``make bench``).

Two stages of MLP blocks, one stage thread each. PyTorch's intra-op threads are set to 1
so every thread computes on one core: the sequential baseline then uses one core and a
two-stage pipeline can use both, which is the effect this homework is about (with more
intra-op threads the baseline itself would already use both cores).

Prints two tables, writes ``benchmarks/results/pipeline_speedup.json`` and a PNG plot
(speedup vs M, with the 2M/(M+1) limit of a two-stage forward drawn). ``--device cuda:0``
puts both stages on one GPU instead (scripts/gpu_validate.sh: it exercises the executor and
the timing protocol on CUDA; with both stages on one device the ratios show overlap only).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from minitorch.executor import run_schedule, sequential_step
from minitorch.pipeline import Pipe, one_f_one_b
from minitorch.runtime import StageWorkers
from minitorch.schedules import gpipe
from minitorch.timing import time_paired
from minitorch.workload import two_stages

RESULTS = Path(__file__).parent / "results"
NUM_STAGES = 2
MICROBATCH_COUNTS = (1, 2, 4, 8, 16)


def make_stages(width: int, blocks_per_stage: int, seed: int = 0, device: str = "cpu") -> list[nn.Module]:
    torch.manual_seed(seed)
    return [stage.to(device) for stage in two_stages(width, NUM_STAGES * blocks_per_stage)]


def sequential_forward(stages, x):
    for stage in stages:
        x = stage(x)
    return x


def parameters_close(first, second) -> None:
    for a, b in zip((p for s in first for p in s.parameters()), (p for s in second for p in s.parameters())):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def bench_forward(args, inputs):
    stages = make_stages(args.width, args.blocks, device=args.device)
    rows = []
    for num_microbatches in MICROBATCH_COUNTS:
        split_size = -(-args.batch // num_microbatches)
        with Pipe(stages, [args.device] * NUM_STAGES, split_size=split_size) as pipe, torch.no_grad():
            outputs = {}

            def check():
                torch.testing.assert_close(outputs["pipe"], outputs["sequential"], rtol=1e-4, atol=1e-5)

            timing = time_paired(
                lambda: outputs.__setitem__("sequential", sequential_forward(stages, inputs)),
                lambda: outputs.__setitem__("pipe", pipe(inputs)),
                repeats=args.repeats,
                check=check,
            )
        rows.append({"M": num_microbatches, "limit": 2 * num_microbatches / (num_microbatches + 1), **timing.to_json()})
        print_row("forward, Pipe", num_microbatches, timing)
    return rows


class TrainingCandidate:
    """One way of doing a training step, on its own copy of the stages and optimizer."""

    def __init__(self, name, stages, lr=0.01):
        self.name = name
        self.stages = stages
        self.optimizer = torch.optim.SGD([p for s in stages for p in s.parameters()], lr=lr)

    def finish(self):
        self.optimizer.step()
        self.optimizer.zero_grad()


def bench_training(args, inputs, targets):
    rows = []
    for num_microbatches in MICROBATCH_COUNTS:
        split_size = -(-args.batch // num_microbatches)
        stages = make_stages(args.width, args.blocks, device=args.device)
        devices = [args.device] * NUM_STAGES
        baseline = TrainingCandidate("sequential", copy.deepcopy(stages))

        def baseline_step():
            sequential_step(baseline.stages, devices, inputs, targets, F.mse_loss)
            baseline.finish()

        with StageWorkers(devices) as workers, Pipe(copy.deepcopy(stages), devices, split_size=split_size) as pipe:
            hw5 = TrainingCandidate("HW5 Pipe + autograd", list(pipe.stages))

            def hw5_step():
                F.mse_loss(pipe(inputs), targets).backward()
                hw5.finish()

            candidates = [(hw5, hw5_step)]
            for name, generator in (("GPipe schedule", gpipe), ("1F1B schedule", one_f_one_b)):
                candidate = TrainingCandidate(name, copy.deepcopy(stages))
                schedule = generator(NUM_STAGES, num_microbatches)

                def step(candidate=candidate, schedule=schedule):
                    run_schedule(workers, candidate.stages, schedule, inputs, targets, F.mse_loss)
                    candidate.finish()

                candidates.append((candidate, step))
            for candidate, step in candidates:
                # Each pair advances both models one step on the same batch: they must agree.
                baseline.stages = copy.deepcopy(candidate.stages)
                baseline.optimizer = torch.optim.SGD([p for s in baseline.stages for p in s.parameters()], lr=0.01)
                timing = time_paired(
                    baseline_step,
                    step,
                    repeats=args.repeats,
                    warmup=0,
                    check=lambda c=candidate: parameters_close(baseline.stages, c.stages),
                )
                rows.append({"M": num_microbatches, "candidate": candidate.name, **timing.to_json()})
                print_row(f"step, {candidate.name}", num_microbatches, timing)
    return rows


def print_row(what, num_microbatches, timing):
    flag = "" if timing.conclusive else "  (inconclusive: ratios spread widely)"
    print(
        f"{what:<30} M={num_microbatches:<3} speedup {timing.median_ratio:5.2f}x "
        f"[{min(timing.ratios):.2f}-{max(timing.ratios):.2f}] "
        f"baseline {1000 * sorted(timing.baseline_seconds)[len(timing.ratios) // 2]:7.1f} ms{flag}",
        flush=True,
    )


def plot(forward_rows, training_rows, path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    counts = [row["M"] for row in forward_rows]
    axes[0].plot(counts, [row["median_ratio"] for row in forward_rows], "o-", label="Pipe forward (measured)")
    axes[0].plot(counts, [row["limit"] for row in forward_rows], "k--", label="limit 2M/(M+1)")
    axes[0].set_title("Forward, 2 stages on 2 CPU threads")
    for name in dict.fromkeys(row["candidate"] for row in training_rows):
        rows = [row for row in training_rows if row["candidate"] == name]
        axes[1].plot([r["M"] for r in rows], [r["median_ratio"] for r in rows], "o-", label=name)
    axes[1].set_title("Training step (forward + backward + SGD)")
    for axis in axes:
        axis.set_xscale("log", base=2)
        axis.set_xlabel("microbatches M")
        axis.set_ylabel("speedup vs sequential")
        axis.axhline(1.0, color="grey", linewidth=0.8)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--blocks", type=int, default=2, help="MLP blocks per stage")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu", help="the device of both stages, e.g. cuda:0 (default cpu)")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"where to write the results (default {RESULTS})")
    parser.add_argument("--no-plot", action="store_true", help="write no PNG (needs no matplotlib)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    inputs = torch.randn(args.batch, args.width, device=args.device)
    targets = torch.randn(args.batch, args.width, device=args.device)
    where = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else f"{os.cpu_count()} CPUs"
    print(f"{NUM_STAGES} stages x {args.blocks} blocks of width {args.width}, batch {args.batch}, "
          f"{where} ({args.device}), torch {torch.__version__}, intra-op threads 1; "
          f"median of {args.repeats} paired ratios [min-max]")
    forward_rows = bench_forward(args, inputs)
    training_rows = bench_training(args, inputs, targets)
    args.results.mkdir(parents=True, exist_ok=True)
    report = {
        "config": {**vars(args), "results": str(args.results)},
        "environment": {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
                        "device": where},
        "forward": forward_rows,
        "training_step": training_rows,
    }
    (args.results / "pipeline_speedup.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {args.results / 'pipeline_speedup.json'}")
    if not args.no_plot:
        plot(forward_rows, training_rows, args.results / "pipeline_speedup.png")
        print(f"wrote {args.results / 'pipeline_speedup.png'}")


if __name__ == "__main__":
    main()
