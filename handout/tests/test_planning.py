"""Public tests for Problem 5 (planning a 3D-parallel run: ``estimate`` and ``best_plan``).

Run one part with ``pytest -m problem_5_1`` (or ``problem_5_2``). The numbers come from the
lecture (section 6: Narayanan et al. 2021's 1T model and GPT-3); the rest are properties the
contract promises for every model, cluster and plan. ``best_plan`` is judged against your own
``estimate`` (whatever it says) or with a made-up ``estimate`` in its module, so a mistake in 5.1
fails 5.1's tests, not 5.2's. On the starter kit every test here fails with NotImplementedError.
``@pytest.mark.criterion(...)`` names the grader's criteria whose kind of mistake a test catches.
"""
import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitorch import pipeline
from minitorch.cost_model import GPT3_175B, MEGATRON_1T, Cluster, Estimate, Model
from minitorch.pipeline import best_plan, estimate

ONE_T = Cluster(gpus=3072)  # lecture 6.2: the 1T model on 3072 A100s, batch 3072


def valid(model: Model, cluster: Cluster, batch: int, t: int, p: int, microbatch: int) -> bool:
    """The contract's valid plan."""
    if cluster.gpus % (t * p) or model.layers % p or model.heads % t:
        return False
    return batch % (cluster.gpus // (t * p) * microbatch) == 0


@st.composite
def plans(draw):
    """A model, a cluster and a valid plan of them: (model, cluster, batch, t, p, microbatch)."""
    heads = draw(st.sampled_from([4, 6, 8, 12, 16]))
    model = Model("drawn", layers=draw(st.sampled_from([2, 4, 6, 8, 12, 24])), hidden=heads * draw(st.sampled_from([32, 64])),
                  heads=heads, seq_len=draw(st.sampled_from([256, 1024, 2048])), vocab=draw(st.integers(1000, 60000)))
    per_node = draw(st.sampled_from([2, 4, 8]))
    cluster = Cluster(gpus=per_node * draw(st.sampled_from([1, 2, 3, 4])), gpus_per_node=per_node,
                      memory_bytes=draw(st.floats(8e9, 80e9)), ib_bytes_per_s=draw(st.floats(10e9, 50e9)))
    choices = [(t, p) for t in range(1, cluster.gpus + 1) for p in range(1, model.layers + 1)
               if cluster.gpus % (t * p) == 0 and model.layers % p == 0 and model.heads % t == 0]
    t, p = draw(st.sampled_from(choices))
    microbatch = draw(st.sampled_from([1, 2]))
    batch = cluster.gpus // (t * p) * microbatch * draw(st.integers(1, 12))
    return model, cluster, batch, t, p, microbatch


def call(model, cluster, batch, t, p, microbatch):
    return f"estimate({model}, {cluster}, batch={batch}, t={t}, p={p}, microbatch={microbatch})"


def raises_value_error(function, text, why):
    """Fail unless ``function()`` raises ValueError at the call, saying what it did instead."""
    try:
        result = function()
    except ValueError:
        return
    except Exception as error:  # noqa: BLE001 - reported: the convention is ValueError
        pytest.fail(f"contract (Raises): {text} raised {type(error).__name__}: {error}; expected ValueError ({why})")
    pytest.fail(f"contract (Raises): {text} returned {result!r:.200}; expected ValueError ({why})")


# ---------------------------------------------------------------- Problem 5.1


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-memory")
def test_1t_model_memory_matches_the_lecture():
    p32 = estimate(MEGATRON_1T, ONE_T, 3072, t=8, p=32)
    assert p32.memory_bytes / 1e9 == pytest.approx(78, abs=1.0), (
        f"lecture 6.2: the 1T model at t = 8, p = 32 takes about 78 GB per GPU; your estimate gives "
        f"{p32.memory_bytes / 1e9:.4g} GB ({p32.state_bytes / 1e9:.4g} GB of state, {p32.activation_bytes / 1e9:.4g} GB "
        "of activations)")
    assert p32.fits, f"the 1T model at t = 8, p = 32: {p32.memory_bytes / 1e9:.4g} GB fits in 80 GB; fits is {p32.fits!r}"
    p64 = estimate(MEGATRON_1T, ONE_T, 3072, t=8, p=64)
    assert p64.state_bytes / 1e9 == pytest.approx(31, abs=1.0), (
        f"lecture 6.2: t p = 512 leaves about 31 GB of training state per GPU; your estimate gives "
        f"{p64.state_bytes / 1e9:.4g} GB")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-memory")
@given(plans())
def test_activation_memory_grows_with_microbatches_in_flight_up_to_p(plan):
    model, cluster, batch, t, p, microbatch = plan
    replicas = cluster.gpus // (t * p)
    by_count = {m: estimate(model, cluster, replicas * microbatch * m, t, p, microbatch).activation_bytes
                for m in range(1, p + 3)}
    assert by_count[1] > 0, f"{call(*plan)}: a step keeps some activations (activation_bytes = {by_count[1]})"
    for m in range(2, p + 3):
        grows = m <= p
        assert (by_count[m] > by_count[m - 1]) == grows, (
            f"{call(*plan)} with m = {m - 1} and {m} microbatches per pipeline: activation_bytes {by_count[m - 1]:.6g} "
            f"then {by_count[m]:.6g}; under 1F1B the first stage holds more microbatches only while m <= p")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-memory")
@given(plans())
def test_training_state_is_split_over_the_model_parallel_group(plan):
    model, cluster, batch, t, p, microbatch = plan
    whole = estimate(model, Cluster(gpus=1), 1, 1, 1, 1).state_bytes
    mine = estimate(*plan).state_bytes
    assert mine * t * p == pytest.approx(whole, rel=1e-6), (
        f"{call(*plan)}: state_bytes = {mine:.6g}; the t p = {t * p} GPUs of one model replica share the "
        f"{whole:.6g} bytes of one GPU's training state")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-memory")
def test_gpt3_fits_from_p_8():
    cluster = Cluster(gpus=1024)
    fits = {p: estimate(GPT3_175B, cluster, 1536, 8, p).fits for p in (4, 8, 16, 32)}
    assert fits == {4: False, 8: True, 16: True, 32: True}, (
        f"lecture 6.3: GPT-3 on 1024 GPUs, batch 1536, t = 8 fits in 80 GB at p = 8, 16 and 32, not at p = 4; "
        f"your estimate's fits by p: {fits}")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-compute-bubble")
def test_gpt3_bubble_from_7_3_to_8_1_percent():
    cluster = Cluster(gpus=1024)
    by_p = {p: estimate(GPT3_175B, cluster, 1536, 8, p) for p in (8, 16, 32)}
    case = "GPT-3 on 1024 GPUs, batch 1536, t = 8"
    assert by_p[8].bubble == pytest.approx(0.073, abs=0.0005), (
        f"lecture 6.3: {case}, p = 8: bubble 7.3% (over ideal compute); your estimate gives {by_p[8].bubble:.4%}")
    assert by_p[32].bubble == pytest.approx(0.081, abs=0.0005), (
        f"lecture 6.3: {case}, p = 32: bubble 8.1%; your estimate gives {by_p[32].bubble:.4%}")
    for p, e in by_p.items():
        expected = (1024 / 8 - e.d) / 1536
        assert e.bubble == pytest.approx(expected, rel=1e-9), (
            f"{case}, p = {p}: bubble {e.bubble:.6g}; lecture 6.3's (n/t - d)/B = {expected:.6g} with d = {e.d}")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-compute-bubble", "5.1-communication")
def test_1t_model_runs_at_197_tflops_per_gpu():
    p64 = estimate(MEGATRON_1T, ONE_T, 3072, t=8, p=64)
    assert p64.achieved_flops / 1e12 == pytest.approx(197, abs=2), (
        f"lecture 6.2: the 1T model at t = 8, p = 64 runs at the model's optimistic 197 TFLOP/s per GPU; your estimate "
        f"gives {p64.achieved_flops / 1e12:.4g}")
    steps = {p: estimate(MEGATRON_1T, ONE_T, 3072, 8, p).step_s for p in (32, 64, 128)}
    assert max(steps.values()) / min(steps.values()) < 1.01, (
        f"lecture 6.2: for the 1T model at t = 8, p between 32 and 128 hardly matters (within 1%); your step times "
        f"by p: { {p: round(s, 4) for p, s in steps.items()} }")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-compute-bubble")
@given(plans())
def test_replicas_and_microbatches_split_the_cluster_and_the_batch(plan):
    model, cluster, batch, t, p, microbatch = plan
    e = estimate(*plan)
    assert (e.t, e.p, e.d) == (t, p, cluster.gpus // (t * p)), (
        f"{call(*plan)}: (t, p, d) = {(e.t, e.p, e.d)}; expected {(t, p, cluster.gpus // (t * p))}")
    assert e.microbatches * e.d * microbatch == batch, (
        f"{call(*plan)}: {e.microbatches} microbatches of {microbatch} in each of d = {e.d} pipelines do not make the batch")
    assert e.memory_limit == cluster.memory_bytes, (
        f"{call(*plan)}: memory_limit = {e.memory_limit!r}; expected the cluster's memory_bytes {cluster.memory_bytes!r}")
    assert e.compute_s > 0 and e.flops_per_gpu > 0, (
        f"{call(*plan)}: compute_s = {e.compute_s!r}, flops_per_gpu = {e.flops_per_gpu!r}; a step computes something")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-communication")
def test_tensor_parallelism_across_nodes_goes_over_infiniband():
    inside = estimate(MEGATRON_1T, ONE_T, 3072, t=8, p=32)
    across = estimate(MEGATRON_1T, ONE_T, 3072, t=16, p=32)
    assert across.tensor_parallel_s > 10 * inside.tensor_parallel_s, (
        f"lecture 6.2: the 1T model at p = 32 on 8-GPU nodes: t = 16 leaves the node (InfiniBand), t = 8 does not "
        f"(NVLink), so t = 16's tensor-parallel time is over 10 times t = 8's; yours: {across.tensor_parallel_s:.4g} s "
        f"and {inside.tensor_parallel_s:.4g} s")
    big_nodes = dataclasses.replace(ONE_T, gpus_per_node=16)
    within = estimate(MEGATRON_1T, big_nodes, 3072, t=16, p=32)
    assert across.tensor_parallel_s / within.tensor_parallel_s == pytest.approx(
        ONE_T.nvlink_bytes_per_s / ONE_T.ib_bytes_per_s, rel=1e-6), (
        f"the 1T model at t = 16, p = 32: tensor_parallel_s {across.tensor_parallel_s:.6g} s on 8-GPU nodes, "
        f"{within.tensor_parallel_s:.6g} s on 16-GPU nodes; the same all-reduces over InfiniBand instead of NVLink "
        f"take NVLink / InfiniBand = {ONE_T.nvlink_bytes_per_s / ONE_T.ib_bytes_per_s:g} times as long")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-communication")
@given(plans())
def test_each_kind_of_communication_exists_exactly_when_its_dimension_does(plan):
    model, cluster, batch, t, p, microbatch = plan
    e = estimate(*plan)
    for term, size, name in [(e.tensor_parallel_s, t, "t"), (e.pipeline_s, p, "p"), (e.data_parallel_s, e.d, "d")]:
        assert (term > 0) == (size > 1), (
            f"{call(*plan)}: {name} = {size}, and its communication time is {term!r}; expected "
            + ("more than 0" if size > 1 else "0 (a dimension of size 1 sends nothing)"))


def valid_estimates(model, cluster, batch, microbatch=1):
    """Your ``estimate`` of every valid plan, or a failure naming the plan it raised for."""
    estimates = []
    for t in range(1, cluster.gpus + 1):
        for p in range(1, model.layers + 1):
            if valid(model, cluster, batch, t, p, microbatch):
                try:
                    estimates.append(estimate(model, cluster, batch, t, p, microbatch))
                except ValueError as error:
                    pytest.fail(f"{call(model, cluster, batch, t, p, microbatch)} raised ValueError ({error}) for a "
                                "valid plan (Problem 5.1)")
    return estimates


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-communication", "5.1-memory")
def test_the_1t_models_fastest_fitting_plan_keeps_t_in_the_node():
    fitting = [e for e in valid_estimates(MEGATRON_1T, ONE_T, 3072) if e.fits]
    assert fitting, "lecture 6.2: plans of the 1T model fit on 3072 GPUs of 80 GB (t = 8, p = 32 takes about 78 GB); " \
                    "your estimate says none does"
    fastest = min(fitting, key=lambda e: e.step_s)
    assert fastest.t == 8 and fastest.p in (32, 64, 128), (
        f"lecture 6.2: the fastest plan of the 1T model that fits has t = 8 (one node) and p from 32 to 128; by your "
        f"estimate it is t = {fastest.t}, p = {fastest.p} ({fastest.step_s:.4g} s)")


# ---------------------------------------------------------------- Problem 5.2


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-best-plan")
def test_best_plan_for_the_1t_model_is_the_fastest_fitting_plan_by_your_estimate():
    # judged by your own estimate, whatever it says: a mistake in 5.1 does not fail this test
    estimates = valid_estimates(MEGATRON_1T, ONE_T, 3072)
    fitting = [e for e in estimates if e.fits]
    best = best_plan(MEGATRON_1T, ONE_T, batch=3072)
    case = f"best_plan(the 1T model, 3072 GPUs, batch=3072), among {len(estimates)} valid plans"
    if not fitting:
        assert best is None, f"{case}: your estimate says none fits, so expected None; got {best!r:.200}"
        return
    want = min(fitting, key=lambda e: e.step_s)
    expected = f"t = {want.t}, p = {want.p} ({want.step_s:.6g} s)"
    assert best is not None, f"{case}: returned None; by your estimate {len(fitting)} fit, the fastest {expected}"
    assert best.fits and best.step_s <= want.step_s * (1 + 1e-9), (
        f"{case}: returned t = {best.t}, p = {best.p} ({best.step_s:.6g} s, fits: {best.fits}); the fastest plan "
        f"that fits by your estimate is {expected}")


def made_up_estimate(seed: int):
    """An ``estimate`` with the contract's validity and made-up, seeded times and memory."""
    def fake(model, cluster, batch, t, p, microbatch=1):
        if not valid(model, cluster, batch, t, p, microbatch):
            raise ValueError("not a valid plan")
        rng = random.Random(f"{seed} {t} {p}")
        return Estimate(t=t, p=p, d=cluster.gpus // (t * p), microbatches=1, compute_s=rng.uniform(1, 2), bubble_s=0.0,
                        tensor_parallel_s=0.0, pipeline_s=0.0, data_parallel_s=0.0, state_bytes=rng.uniform(0, 2),
                        activation_bytes=0.0, flops_per_gpu=1.0, memory_limit=cluster.memory_bytes)

    return fake


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-best-plan")
@given(seed=st.integers(0, 10**6), heads=st.sampled_from([6, 12, 24]), layers=st.sampled_from([6, 12, 24]),
       gpus=st.sampled_from([6, 12, 24, 48]), limit=st.floats(0.2, 2.0))
def test_best_plan_is_the_fastest_fitting_plan_estimate_gives(seed, heads, layers, gpus, limit):
    fake = made_up_estimate(seed)
    model = Model("made up", layers=layers, hidden=heads * 8, heads=heads, seq_len=64, vocab=100)
    cluster = Cluster(gpus=gpus, gpus_per_node=6, memory_bytes=limit)
    candidates = [fake(model, cluster, gpus, t, p) for t in range(1, gpus + 1) for p in range(1, layers + 1)
                  if valid(model, cluster, gpus, t, p, 1)]
    fitting = [e for e in candidates if e.fits]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "estimate", fake)
        got = best_plan(model, cluster, gpus)
    case = f"best_plan with a made-up estimate (seed {seed}) for {model}, {cluster}, batch {gpus}"
    if not fitting:
        assert got is None, f"{case}: no plan fits, expected None, got {got!r:.200}"
        return
    want = min(fitting, key=lambda e: e.step_s)
    assert got is not None, f"{case}: returned None, expected t = {want.t}, p = {want.p}"
    assert (got.t, got.p) == (want.t, want.p), (
        f"{case}: returned t = {got.t}, p = {got.p} ({got.step_s:.4f} s, fits: {got.fits}); the fastest of the "
        f"{len(fitting)} fitting plans among {len(candidates)} valid ones is t = {want.t}, p = {want.p} ({want.step_s:.4f} s)")


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-best-plan")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_plan_is_none_when_nothing_fits_or_nothing_is_valid(seed):
    fake = made_up_estimate(seed)  # memory from 0 to 2 bytes: nothing fits in 1e-3 bytes
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "estimate", fake)
        none_fits = best_plan(GPT3_175B, Cluster(gpus=8, memory_bytes=1e-3), 8)
        none_valid = best_plan(GPT3_175B, Cluster(gpus=1024), batch=3, microbatch=2)
    case = f"best_plan with a made-up estimate (seed {seed}) for GPT-3"
    assert none_fits is None, f"{case} on 8 GPUs: no plan fits, expected None; got {none_fits!r:.200}"
    assert none_valid is None, (
        f"{case} on 1024 GPUs, batch 3: a batch of 3 cannot be cut into 2-sequence microbatches, no plan is valid, "
        f"expected None; got {none_valid!r:.200}")


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-arguments")
@pytest.mark.parametrize("arguments, why", [
    ({"t": 3, "p": 8}, "t p does not divide the GPUs"), ({"t": 8, "p": 5}, "p does not divide the layers"),
    ({"t": 8, "p": 3}, "p does not divide the layers"), ({"t": 64, "p": 1}, "t does not divide the heads"),
    ({"t": 8, "p": 8, "batch": 100}, "the batch does not split into d shares"), ({"t": 0, "p": 8}, "t < 1"),
    ({"t": True, "p": 8}, "a bool is not an int"), ({"t": 8, "p": 8.0}, "p is a float"),
    ({"t": 8, "p": 8, "microbatch": 0}, "microbatch < 1"),
])
def test_estimate_rejects_arguments_outside_the_contract(arguments, why):
    arguments = {"batch": 1536, **arguments}
    raises_value_error(lambda: estimate(GPT3_175B, Cluster(gpus=1024), **arguments),
                       f"estimate(GPT-3, 1024 GPUs, {arguments})", why)


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-arguments")
@pytest.mark.parametrize("arguments", [{"batch": 0}, {"batch": False}, {"batch": 8, "microbatch": 0}, {"batch": 8.0}])
def test_best_plan_rejects_arguments_outside_the_contract(arguments):
    raises_value_error(lambda: best_plan(GPT3_175B, Cluster(gpus=8), **arguments), f"best_plan(GPT-3, 8 GPUs, {arguments})",
                       "an argument outside the contract")
