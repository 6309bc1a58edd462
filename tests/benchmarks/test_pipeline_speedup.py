"""`make bench` mechanics on a tiny workload (the speed figures themselves are only printed)."""
import argparse

import torch

from benchmarks.pipeline_speedup import MICROBATCH_COUNTS, bench_forward, bench_training


def test_forward_and_training_tables_have_a_checked_row_per_candidate():
    args = argparse.Namespace(width=16, blocks=1, batch=32, repeats=1)
    inputs, targets = torch.randn(32, 16), torch.randn(32, 16)
    forward = bench_forward(args, inputs)
    training = bench_training(args, inputs, targets)
    assert [row["M"] for row in forward] == list(MICROBATCH_COUNTS)
    assert all(row["limit"] == 2 * row["M"] / (row["M"] + 1) and len(row["ratios"]) >= 1 for row in forward)
    names = {row["candidate"] for row in training}
    assert names == {"HW5 Pipe + autograd", "GPipe schedule", "1F1B schedule"}
    assert len(training) == 3 * len(MICROBATCH_COUNTS)
