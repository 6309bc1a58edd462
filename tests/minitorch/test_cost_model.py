"""The (t, p, d) cost model against lecture section 6 (Narayanan et al. 2021's two models)."""
import pytest

from minitorch import cost_model
from minitorch.cost_model import GPT3_175B, MEGATRON_1T, Cluster, estimate


def test_parameter_counts():
    assert MEGATRON_1T.parameters == pytest.approx(1.008e12, rel=1e-3)
    assert GPT3_175B.parameters == pytest.approx(174.6e9, rel=1e-3)


def test_picks_t_8_for_the_1t_model():
    best = cost_model.best_plan(MEGATRON_1T, Cluster(gpus=3072), batch=3072)
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
    plans = [estimate(GPT3_175B, cluster, 1536, 8, p) for p in (4, 8, 16, 32)]
    fitting = [e for e in plans if e.fits]
    assert [e.p for e in fitting] == [8, 16, 32]  # three configurations fit
    assert fitting[0].bubble == pytest.approx(0.073, abs=0.0005)
    assert fitting[-1].bubble == pytest.approx(0.081, abs=0.0005)
    for e in fitting:  # bubble = (n/t - d)/B
        assert e.bubble == pytest.approx((1024 / 8 - e.d) / 1536, rel=1e-12)
    steps = [e.step_s for e in fitting]
    assert max(steps) / min(steps) < 1.0035  # lecture: "within 0.3%"; this model: 0.32%


@pytest.mark.parametrize("t, p", [(3, 8), (8, 5), (8, 3)])
def test_invalid_plans_raise(t, p):
    with pytest.raises(ValueError):
        estimate(GPT3_175B, Cluster(gpus=1024), 1536, t, p)
