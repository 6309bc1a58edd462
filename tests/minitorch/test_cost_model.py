"""The (t, p, d) cost model against lecture section 6 (Narayanan et al. 2021's two models).

``minitorch.cost_model`` is provided (data, presets, tables, the command line); the estimate and
the search are Problem 5's, in ``minitorch.pipeline`` (here: the answer key).
"""
import ast
import dataclasses

import pytest

from minitorch import cli, cost_model, pipeline
from minitorch.cost_model import ANCHOR, GPT3_175B, MEGATRON_1T, Cluster
from minitorch.pipeline import best_plan, estimate


def test_parameter_counts():
    assert MEGATRON_1T.parameters == pytest.approx(1.008e12, rel=1e-3)
    assert GPT3_175B.parameters == pytest.approx(174.6e9, rel=1e-3)
    assert ANCHOR.parameters == pytest.approx(21.4e9, rel=1e-2)  # GPT-shaped layers; the lecture's model has 27.8e9


def test_cost_model_never_imports_a_student_file_at_module_level():
    tree = ast.parse(open(cost_model.__file__).read())
    imported = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not [line for line in imported if "pipeline" in line or "tensor_parallel" in line], imported


def test_picks_t_8_for_the_1t_model():
    best = best_plan(MEGATRON_1T, Cluster(gpus=3072), batch=3072)
    assert best.t == 8
    assert best.p in (32, 64, 128)


def test_1t_memory_and_throughput():
    cluster = Cluster(gpus=3072)
    p32 = estimate(MEGATRON_1T, cluster, 3072, t=8, p=32)
    assert p32.memory_bytes / 1e9 == pytest.approx(78, abs=1.0)  # lecture: about 78 GB
    assert p32.fits
    p64 = estimate(MEGATRON_1T, cluster, 3072, t=8, p=64)
    assert p64.state_bytes / 1e9 == pytest.approx(31, abs=1.0)  # t*p = 512: about 31 GB of training state
    assert p64.achieved_flops / 1e12 == pytest.approx(197, abs=2)  # the model's optimistic 197 TFLOP/s
    steps = [estimate(MEGATRON_1T, cluster, 3072, 8, p).step_s for p in (32, 64, 128)]
    assert max(steps) / min(steps) < 1.01  # p between 32 and 128 hardly matters
    t16 = estimate(MEGATRON_1T, cluster, 3072, t=16, p=32)
    assert t16.tensor_parallel_s > 10 * p32.tensor_parallel_s  # t = 16 leaves the node: all-reduce over IB


def test_gpt3_on_1024_gpus_bubbles_7_3_to_8_1_percent():
    cluster = Cluster(gpus=1024)
    plans = cost_model.estimates(GPT3_175B, cluster, 1536, [(8, p) for p in (4, 8, 16, 32)])
    fitting = [e for e in plans if e.fits]
    assert [e.p for e in fitting] == [8, 16, 32]  # three configurations fit
    assert fitting[0].bubble == pytest.approx(0.073, abs=0.0005)
    assert fitting[-1].bubble == pytest.approx(0.081, abs=0.0005)
    for e in fitting:  # bubble = (n/t - d)/B
        assert e.bubble == pytest.approx((1024 / 8 - e.d) / 1536, rel=1e-12)
    steps = [e.step_s for e in fitting]
    assert max(steps) / min(steps) < 1.0035  # lecture: "within 0.3%"; this model: 0.32%


def test_estimates_leave_out_invalid_plans():
    rows = cost_model.estimates(GPT3_175B, Cluster(gpus=1024), 1536, [(3, 8), (8, 5), (8, 8)])
    assert [(e.t, e.p) for e in rows] == [(8, 8)]


@pytest.mark.parametrize("t, p", [(3, 8), (8, 5), (8, 3)])
def test_invalid_plans_raise(t, p):
    with pytest.raises(ValueError):
        estimate(GPT3_175B, Cluster(gpus=1024), 1536, t, p)


def test_the_anchor_model_from_8_to_64_gpus():
    """Q8's numbers: on one node nothing but p = 8 fits without t; on 64 GPUs d takes over."""
    on_one_node = best_plan(ANCHOR, cost_model.anchor_cluster(8), 64)
    on_eight_nodes = best_plan(ANCHOR, cost_model.anchor_cluster(64), 64)
    assert on_one_node.t * on_one_node.p == 8 and on_one_node.d == 1
    assert on_eight_nodes.d > 1 and on_eight_nodes.t <= 8


def test_the_command_line_prints_tables(capsys):
    assert cost_model.main([]) == 0
    out = capsys.readouterr().out
    assert "fastest that fits: t = 8" in out and "Megatron 1T" in out
    assert cost_model.main(["--model", "anchor", "--gpus", "64", "--batch", "128"]) == 0
    assert "lecture anchor on 64 GPUs" in capsys.readouterr().out


def test_no_plan_fits_is_one_line():
    assert "no plan fits" in cost_model.format_best(GPT3_175B, dataclasses.replace(Cluster(gpus=8), memory_bytes=1e9), 8)


def test_on_a_stub_the_command_line_says_which_one(monkeypatch, capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError(cli.stub_message("5.1", "estimate"))

    monkeypatch.setattr(pipeline, "estimate", stub)
    assert cli.run(cost_model.main, "python -m minitorch.cost_model", []) == 1
    err = capsys.readouterr().err
    assert "needs Problem 5.1 (estimate in minitorch/" in err and "Traceback" not in err
