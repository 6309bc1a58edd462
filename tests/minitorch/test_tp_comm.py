"""The communication numbers of lecture 5.5-5.6 and exercises 7 and 9, from minitorch.tp_comm.

Each expected value is the figure printed in the lecture; the tolerance is half a unit of the
lecture's last printed digit (or the stated "about" for exercise 9's ratio).
"""
import subprocess
import sys

import pytest

from minitorch.tp_comm import (
    activation_bytes_per_layer,
    all_gather_bytes,
    all_reduce_bytes,
    comm_to_compute,
    layer_comm,
    mlp_shards,
    output_layer_comm,
    reduce_scatter_bytes,
)

MICROBATCH = 8 * 2048  # lecture 5.5: one microbatch of 8 x 2048 tokens


@pytest.mark.parametrize("vocab, gather_gb, ratio", [(50257, 1.44, 4188), (128256, 3.68, 10688)])
def test_output_layer_matches_lecture(vocab, gather_gb, ratio):
    c = output_layer_comm(vocab, t=8, tokens=MICROBATCH)
    assert c.gather_logits_bytes / 1e9 == pytest.approx(gather_gb, abs=0.005)
    assert c.fused_loss_bytes / 1e6 == pytest.approx(0.34, abs=0.005)
    assert c.ratio == pytest.approx(ratio, abs=0.5)


def test_exercise_9_matches_answer():
    c = output_layer_comm(64000, t=8, tokens=4 * 4096)
    assert c.gather_logits_bytes / 1e9 == pytest.approx(1.83, abs=0.01)   # lecture: 1.83 GB
    assert c.fused_loss_bytes / 1e6 == pytest.approx(0.34, abs=0.005)     # lecture: 0.34 MB
    assert c.ratio == pytest.approx(5300, rel=0.01)                       # lecture: about 5300x


def test_exercise_7_matches_answer():
    assert mlp_shards(1024, 4096, t=4, tokens=2048) == {
        "A_i": (1024, 1024), "B_i": (1024, 1024), "all_reduce_numel": 2_097_152}


def test_all_reduce_is_reduce_scatter_plus_all_gather():
    for t in (1, 2, 8):
        assert all_reduce_bytes(1000, t, 2) == pytest.approx(
            reduce_scatter_bytes(1000, t, 2) + all_gather_bytes(1000, t, 2), rel=1e-12)


def test_layer_has_four_activation_all_reduces_and_sequence_parallel_moves_the_same_bytes():
    b, s, h = 2, 16, 32
    for t in (2, 4, 8):
        plain, sp = layer_comm(b, s, h, t), layer_comm(b, s, h, t, sequence_parallel=True)
        assert [c[:2] for c in plain.collectives] == [("forward", "all_reduce")] * 2 + [
            ("backward", "all_reduce")] * 2
        assert all(numel == b * s * h for _, _, numel in plain.collectives + sp.collectives)
        assert sp.bytes == pytest.approx(plain.bytes, rel=1e-12)


def test_comm_to_compute_ratio_does_not_depend_on_batch_or_sequence():
    base = comm_to_compute(1, 2048, 12288, 8, 312e12, 300e9)
    assert comm_to_compute(16, 4096, 12288, 8, 312e12, 300e9) == pytest.approx(base, rel=1e-12)
    assert comm_to_compute(1, 2048, 2 * 12288, 8, 312e12, 300e9) == pytest.approx(base / 2, rel=1e-12)


def test_sequence_parallelism_splits_the_10sbh_that_tensor_parallelism_leaves():
    s, b, h, a = 2048, 1, 12288, 96
    unsplit = activation_bytes_per_layer(s, b, h, a)
    assert activation_bytes_per_layer(s, b, h, a, t=1, sequence_parallel=True) == pytest.approx(unsplit)
    tp8 = activation_bytes_per_layer(s, b, h, a, t=8)
    sp8 = activation_bytes_per_layer(s, b, h, a, t=8, sequence_parallel=True)
    assert tp8 - unsplit / 8 == pytest.approx(10 * s * b * h * (1 - 1 / 8))
    assert sp8 == pytest.approx(unsplit / 8)


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="t must be >= 1"):
        output_layer_comm(100, t=0, tokens=10)
    with pytest.raises(ValueError, match="divisible"):
        mlp_shards(1024, 4095, t=4, tokens=1)


def test_demo_prints_the_lecture_numbers():
    out = subprocess.run([sys.executable, "-m", "minitorch.tp_comm"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    for figure in ("1.44 GB", "3.68 GB", "0.34 MB", "4,188x", "10,688x"):
        assert figure in out
