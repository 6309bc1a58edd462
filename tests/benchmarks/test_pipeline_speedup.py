"""`make bench` mechanics on a tiny workload (the speed figures themselves are only printed)."""
import argparse
import json

import torch

from benchmarks.pipeline_speedup import MICROBATCH_COUNTS, bench_forward, bench_training, main


def test_forward_and_training_tables_have_a_checked_row_per_candidate():
    args = argparse.Namespace(width=16, blocks=1, batch=32, repeats=1, device="cpu")
    inputs, targets = torch.randn(32, 16), torch.randn(32, 16)
    forward = bench_forward(args, inputs)
    training = bench_training(args, inputs, targets)
    assert [row["M"] for row in forward] == list(MICROBATCH_COUNTS)
    assert all(row["limit"] == 2 * row["M"] / (row["M"] + 1) and len(row["ratios"]) >= 1 for row in forward)
    names = {row["candidate"] for row in training}
    assert names == {"HW5 Pipe + autograd", "GPipe schedule", "1F1B schedule"}
    assert len(training) == 3 * len(MICROBATCH_COUNTS)


def test_results_folder_and_device_options(tmp_path):
    """What scripts/gpu_validate.sh runs with --device cuda:0, here on the CPU."""
    main(["--width", "16", "--blocks", "1", "--batch", "32", "--repeats", "1", "--device", "cpu",
          "--results", str(tmp_path / "bench"), "--no-plot"])
    written = json.loads((tmp_path / "bench" / "pipeline_speedup.json").read_text())
    assert written["config"]["device"] == "cpu" and written["environment"]["device"].endswith("CPUs")
    assert len(written["forward"]) == len(MICROBATCH_COUNTS) and not (tmp_path / "bench" / "pipeline_speedup.png").exists()
