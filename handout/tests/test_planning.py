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

import numpy
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


# ---------------------------------------------------------------- Problem 5.1, term by term
# Small plans whose every number can be checked by hand from the write-up's "The cost model":
# models of P = 12 L h^2 + 13 L h + (V + s) h = 51,933,184 (SMALL) and 29,512,704 (TWELVE_HEADS)
# parameters on round-numbered GPUs.
# Each value below was worked out from the write-up's definitions; the contract's tolerance
# (relative 1e-6) leaves no room for a factor of 2 in any term.

SMALL = Model("small", layers=4, hidden=1024, heads=8, seq_len=512, vocab=1000)
ROUND = Cluster(gpus=16, gpus_per_node=4, peak_flops=100e12, efficiency=0.5, memory_bytes=40e9,
                nvlink_bytes_per_s=100e9, ib_bytes_per_s=10e9)
TWELVE_HEADS = Model("twelve heads", layers=4, hidden=768, heads=12, seq_len=512, vocab=1000)
PLANS = {  # name: (model, cluster, batch, t, p, microbatch)
    "t = 4 = a node, p = 2, m = 3": (SMALL, ROUND, 12, 4, 2, 2),
    "t = 8 over two nodes, p = 1, m = 4": (SMALL, ROUND, 8, 8, 1, 1),
    "t = 3 inside a 4-GPU node, p = 2, m = 2": (TWELVE_HEADS, dataclasses.replace(ROUND, gpus=12), 4, 3, 2, 1),
    "one GPU": (SMALL, dataclasses.replace(ROUND, gpus=1, gpus_per_node=1), 1, 1, 1, 1),
    "p = 4 = the layers, m = 2 < p": (SMALL, ROUND, 4, 2, 4, 1),
    "t = 1, p = 2, m = 3 = p + 1, d = 8": (SMALL, ROUND, 48, 1, 2, 2),
}
EXPECTED = {
    "t = 4 = a node, p = 2, m = 3": dict(
        t=4, p=2, d=2, microbatches=3, flops_per_gpu=1.698630205e11, compute_s=3.397260411e-3, bubble_s=1.132420137e-3,
        tensor_parallel_s=1.13246208e-3, pipeline_s=3.145728e-4, data_parallel_s=1.2983296e-3, state_bytes=103866368.0,
        activation_bytes=30408704.0, memory_limit=40e9),
    "t = 8 over two nodes, p = 1, m = 4": dict(
        t=8, p=1, d=2, microbatches=4, flops_per_gpu=1.132420137e11, compute_s=2.264840274e-3, bubble_s=0.0,
        tensor_parallel_s=1.76160768e-2, pipeline_s=0.0, data_parallel_s=1.2983296e-3, state_bytes=103866368.0,
        activation_bytes=12320768.0, memory_limit=40e9),
    "t = 3 inside a 4-GPU node, p = 2, m = 2": dict(
        t=3, p=2, d=2, microbatches=2, flops_per_gpu=4.373610496e10, compute_s=8.747220992e-4, bubble_s=4.373610496e-4,
        tensor_parallel_s=2.5165824e-4, pipeline_s=1.048576e-4, data_parallel_s=9.837568e-4, state_bytes=78700544.0,
        activation_bytes=15466496.0, memory_limit=40e9),
    "one GPU": dict(
        t=1, p=1, d=1, microbatches=1, flops_per_gpu=2.264840274e11, compute_s=4.529680548e-3, bubble_s=0.0,
        tensor_parallel_s=0.0, pipeline_s=0.0, data_parallel_s=0.0, state_bytes=830930944.0,
        activation_bytes=32505856.0, memory_limit=40e9),
    "p = 4 = the layers, m = 2 < p": dict(
        t=2, p=4, d=2, microbatches=2, flops_per_gpu=5.662100685e10, compute_s=1.132420137e-3, bubble_s=1.698630205e-3,
        tensor_parallel_s=1.2582912e-4, pipeline_s=2.097152e-4, data_parallel_s=1.2983296e-3, state_bytes=103866368.0,
        activation_bytes=18874368.0, memory_limit=40e9),
    "t = 1, p = 2, m = 3 = p + 1, d = 8": dict(
        t=1, p=2, d=8, microbatches=3, flops_per_gpu=6.794520822e11, compute_s=1.358904164e-2, bubble_s=4.529680548e-3,
        tensor_parallel_s=0.0, pipeline_s=1.2582912e-3, data_parallel_s=9.0883072e-3, state_bytes=415465472.0,
        activation_bytes=65011712.0, memory_limit=40e9),
}


def check_terms(plan: str, what: dict[str, str]) -> None:
    """The fields ``what`` names of your estimate of ``plan`` against the worked-out values:
    within relative 1e-6, a zero term within 1e-9 of the step time."""
    model, cluster, batch, t, p, microbatch = PLANS[plan]
    e = estimate(model, cluster, batch, t, p, microbatch=microbatch)
    for field, meaning in what.items():
        got, want = getattr(e, field), EXPECTED[plan][field]
        tolerance = 1e-9 * sum(EXPECTED[plan][k] for k in ("compute_s", "bubble_s", "tensor_parallel_s", "pipeline_s",
                                                            "data_parallel_s")) if want == 0 else 1e-6 * abs(want)
        assert isinstance(got, (int, float)) and abs(got - want) <= tolerance, (
            f"{call(model, cluster, batch, t, p, microbatch)} [{plan}]: {field} = {got!r}; expected {want:.10g}: {meaning} "
            f"(relative 1e-6; a ratio of {got / want if want and isinstance(got, (int, float)) else float('nan'):.4g} to it)")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-compute-bubble")
@pytest.mark.parametrize("plan", PLANS)
def test_counts_follow_from_the_plan_and_the_batch(plan):
    model, cluster, batch, t, p, microbatch = PLANS[plan]
    e = estimate(model, cluster, batch, t, p, microbatch=microbatch)
    got = {k: getattr(e, k) for k in ("t", "p", "d", "microbatches")}
    want = {k: EXPECTED[plan][k] for k in got}
    assert got == want, (f"{call(model, cluster, batch, t, p, microbatch)} [{plan}]: {got}; expected {want} (d = N/(t p) "
                         "replicas, each running batch/(d b) microbatches of b sequences)")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-compute-bubble")
@pytest.mark.parametrize("plan", PLANS)
def test_compute_is_the_steps_flops_shared_by_every_gpu(plan):
    check_terms(plan, {"flops_per_gpu": "96 B s L h^2 (1 + s/(6h) + V/(16 L h)) shared by the N GPUs",
                       "compute_s": "those FLOPs at efficiency x peak"})


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-compute-bubble")
@pytest.mark.parametrize("plan", PLANS)
def test_bubble_is_idle_time_over_ideal_compute(plan):
    check_terms(plan, {"bubble_s": "1F1B's idle time, (p - 1)/m of the compute time"})


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-communication")
@pytest.mark.parametrize("plan", PLANS)
def test_tensor_parallel_time_is_six_ring_all_reduces_per_layer_and_microbatch_over_the_groups_link(plan):
    check_terms(plan, {"tensor_parallel_s": "6 all-reduces (forward, recomputation, backward) per layer of the stage "
                                            "per microbatch, each 2(t - 1)/t of a b x s x h 16-bit tensor, over NVLink "
                                            "when t is at most a node's GPUs, else InfiniBand"})


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-communication")
@pytest.mark.parametrize("plan", PLANS)
def test_pipeline_time_is_an_activation_forward_and_a_gradient_back_per_microbatch(plan):
    check_terms(plan, {"pipeline_s": "per microbatch, one activation forward and one gradient back, each a GPU's 1/t "
                                     "share of a b x s x h 16-bit tensor, over InfiniBand; none when p = 1"})


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-communication")
@pytest.mark.parametrize("plan", PLANS)
def test_data_parallel_time_is_a_ring_all_reduce_of_the_gradients(plan):
    check_terms(plan, {"data_parallel_s": "a ring all-reduce among the d replicas, 2(d - 1)/d of the GPU's 16-bit "
                                          "gradients (2 bytes per local parameter), over InfiniBand"})


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-memory")
@pytest.mark.parametrize("plan", PLANS)
def test_training_state_is_16_bytes_per_local_parameter(plan):
    check_terms(plan, {"state_bytes": "16 bytes per parameter, P/(t p) parameters per GPU",
                       "memory_limit": "the cluster's memory per GPU"})


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-memory")
@pytest.mark.parametrize("plan", PLANS)
def test_activations_are_the_inputs_in_flight_and_one_recomputed_layer(plan):
    check_terms(plan, {"activation_bytes": "min(p, m) microbatches in flight, each the b x s x h 16-bit input of the "
                                           "stage's L/p layers, plus the recomputed layer's s b h (10 + 24/t + 5 a s/(h t))"})


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-kinds")
@pytest.mark.parametrize("cluster", [ROUND, Cluster(gpus=16, gpus_per_node=4, peak_flops=100 * 10**12, efficiency=1,
                                                    memory_bytes=40 * 10**9, nvlink_bytes_per_s=100 * 10**9,
                                                    ib_bytes_per_s=10 * 10**9)], ids=["floats", "ints"])
def test_counts_are_ints_and_every_other_field_a_float(cluster):
    for batch, t, p, microbatch in [(12, 4, 2, 2), (8, 8, 1, 1), (4, 2, 4, 1), (16, 1, 1, 1)]:
        e = estimate(SMALL, cluster, batch, t, p, microbatch)
        for field in dataclasses.fields(Estimate):
            value = getattr(e, field.name)
            wanted = int if field.name in ("t", "p", "d", "microbatches") else float
            assert isinstance(value, wanted) and not isinstance(value, bool), (
                f"{call(SMALL, cluster, batch, t, p, microbatch)}: {field.name} = {value!r} is a "
                f"{type(value).__name__}; the contract makes t, p, d and microbatches ints and every other field a float")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-compute-bubble", "5.1-memory", "5.1-communication")
def test_microbatch_defaults_to_one():
    _, cluster, batch, t, p, _ = PLANS["t = 8 over two nodes, p = 1, m = 4"]
    assert estimate(SMALL, cluster, batch, t, p) == estimate(SMALL, cluster, batch, t, p, 1), (
        f"{call(SMALL, cluster, batch, t, p, 1)}: leaving microbatch out must give the same estimate as microbatch=1")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-compute-bubble", "5.1-memory", "5.1-communication", "5.1-kinds")
def test_an_estimate_depends_only_on_its_arguments():
    """Two models of the same name, asked in turn: neither gets the other's estimate."""
    wider = dataclasses.replace(SMALL, hidden=2048, heads=16)
    _, cluster, batch, t, p, microbatch = PLANS["t = 4 = a node, p = 2, m = 3"]
    first = estimate(SMALL, cluster, batch, t, p, microbatch)
    other = estimate(wider, cluster, batch, t, p, microbatch)
    again = estimate(SMALL, cluster, batch, t, p, microbatch)
    assert other.state_bytes > 3 * first.state_bytes, (
        f"a model twice as wide, of the same name, has about 4 times the state: {other.state_bytes:.6g} against "
        f"{first.state_bytes:.6g} (is something kept from an earlier call?)")
    assert again == first, "the same call, repeated after another, must give the same estimate"
    assert again is not first, ("the same call, repeated after another, returned the very Estimate object the first "
                                "call returned: a result kept between calls (each call returns a new Estimate)")


# ---------------------------------------------------------------- Problem 5.1, the lecture's figures and properties


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


def made_up_estimate(seed: int, target=None, limit: float = 2.0**36):
    """An ``estimate`` with the contract's validity and made-up, seeded times and memory (whole
    numbers, so sums are exact); its values depend on every argument. With ``target`` (a
    predicate on (t, p)), the first valid plan it holds is the fastest that fits, at exactly
    ``limit`` bytes; every faster plan is one byte over ``limit``; the rest are slower, and
    the slower ones that fit have the least compute time."""
    def fake(model, cluster, batch, t, p, microbatch=1):
        if not valid(model, cluster, batch, t, p, microbatch):
            raise ValueError("not a valid plan")
        rng = random.Random(f"{seed} {model} {batch} {t} {p} {microbatch}")
        chosen = target and next((plan for plan in candidates(model, cluster, batch, microbatch) if target(*plan)), None)
        if chosen is None:
            step, memory = rng.randint(1000, 2000), float(rng.randint(0, 2 * int(limit)))
        elif (t, p) == chosen:
            step, memory = 1000, limit
        else:
            step = rng.randint(500, 999) if rng.random() < 0.3 else rng.randint(1001, 2000)
            memory = limit + 1 if step < 1000 else float(rng.randint(0, 2 * int(limit)))
        slow_fitting = chosen is not None and step > 1000 and memory <= limit
        compute = 1 if slow_fitting else step // 2
        state = float(rng.randint(0, int(memory)))
        communication = dict.fromkeys(("tensor_parallel_s", "pipeline_s", "data_parallel_s"), 0.0)
        communication[rng.choice(sorted(communication))] = (step - compute) / 1024
        return Estimate(t=t, p=p, d=cluster.gpus // (t * p), microbatches=batch // (cluster.gpus // (t * p) * microbatch),
                        compute_s=compute / 1024, bubble_s=0.0, **communication, state_bytes=state,
                        activation_bytes=memory - state, flops_per_gpu=1.0, memory_limit=float(cluster.memory_bytes))

    return fake


def candidates(model, cluster, batch, microbatch=1):
    """Every valid (t, p), t-major."""
    return [(t, p) for t in range(1, cluster.gpus + 1) for p in range(1, model.layers + 1)
            if valid(model, cluster, batch, t, p, microbatch)]


def with_made_up_estimate(fake, model, cluster, batch, **arguments):
    """best_plan's result with ``fake`` as this module's estimate, and the fitting estimates."""
    every = [fake(model, cluster, batch, t, p, arguments.get("microbatch", 1))
             for t, p in candidates(model, cluster, batch, arguments.get("microbatch", 1))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "estimate", fake)
        got = best_plan(model, cluster, batch, **arguments)
    return got, [e for e in every if e.fits], every


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-best-plan")
@given(seed=st.integers(0, 10**6), heads=st.sampled_from([6, 12, 24]), layers=st.sampled_from([6, 12, 24]),
       gpus=st.sampled_from([6, 12, 24, 48]), limit=st.floats(0.2, 2.0))
def test_best_plan_is_the_fastest_fitting_plan_estimate_gives(seed, heads, layers, gpus, limit):
    fake = made_up_estimate(seed, limit=2.0**20)
    model = Model("made up", layers=layers, hidden=heads * 8, heads=heads, seq_len=64, vocab=100)
    cluster = Cluster(gpus=gpus, gpus_per_node=6, memory_bytes=limit * 2**20)
    got, fitting, every = with_made_up_estimate(fake, model, cluster, gpus)
    case = f"best_plan with a made-up estimate (seed {seed}) for {model}, {cluster}, batch {gpus}"
    if not fitting:
        assert got is None, f"{case}: no plan fits, expected None, got {got!r:.200}"
        return
    want = min(fitting, key=lambda e: e.step_s)
    assert got is not None, f"{case}: returned None, expected t = {want.t}, p = {want.p}"
    assert got.step_s <= want.step_s * (1 + 1e-9) and got.fits and got == fake(model, cluster, gpus, got.t, got.p), (
        f"{case}: returned t = {got.t}, p = {got.p} ({got.step_s:.4f} s, fits: {got.fits}); the fastest of the "
        f"{len(fitting)} fitting plans among {len(every)} valid ones is t = {want.t}, p = {want.p} ({want.step_s:.4f} s)")


TWELVE = Model("twelve", layers=12, hidden=768, heads=12, seq_len=512, vocab=32000)
SIXTEEN = Model("sixteen", layers=8, hidden=1024, heads=16, seq_len=1024, vocab=50000)
TARGETS = {  # name: (model, cluster, batch, microbatch, which plan is the fastest that fits)
    "t = 16 spans two 8-GPU nodes": (SIXTEEN, Cluster(gpus=32, memory_bytes=2.0**36), 64, 1, lambda t, p: t > 8),
    "t = 3 inside an 8-GPU node": (TWELVE, Cluster(gpus=24, memory_bytes=2.0**36), 24, 1, lambda t, p: t == 3),
    "t = 6 on 6-GPU nodes": (TWELVE, Cluster(gpus=24, gpus_per_node=6, memory_bytes=2.0**36), 48, 2, lambda t, p: t == 6),
    "one layer per stage": (SIXTEEN, Cluster(gpus=32, memory_bytes=2.0**36), 32, 1, lambda t, p: p == 8),
    "t = p = 1": (TWELVE, Cluster(gpus=24, memory_bytes=2.0**36), 96, 2, lambda t, p: t == p == 1),
    "a plan of all 16 GPUs (d = 1)": (SIXTEEN, Cluster(gpus=16, gpus_per_node=4, memory_bytes=2.0**36), 16, 1,
                                      lambda t, p: t * p == 16 and p > 1),
}


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-best-plan")
@pytest.mark.parametrize("name", TARGETS)
def test_best_plan_finds_the_fastest_plan_that_fits_wherever_it_is(name):
    """A made-up estimate makes one plan the fastest that fits, with memory exactly at the limit
    (it fits: at most the limit), every faster plan one byte over, and slower fitting plans with
    less compute: every valid plan is a candidate, fits is <=, and the whole step decides."""
    model, cluster, batch, microbatch, target = TARGETS[name]
    fake = made_up_estimate(7, target, limit=cluster.memory_bytes)
    got, fitting, every = with_made_up_estimate(fake, model, cluster, batch, microbatch=microbatch)
    want = min(fitting, key=lambda e: e.step_s)
    case = (f"best_plan({model.name}, {cluster.gpus} GPUs in nodes of {cluster.gpus_per_node}, batch={batch}, "
            f"microbatch={microbatch}) with a made-up estimate [{name}]")
    assert got == want, (
        f"{case}: returned {'None' if got is None else f't = {got.t}, p = {got.p}'}; expected the estimate of "
        f"t = {want.t}, p = {want.p}, the fastest of the {len(fitting)} plans that fit among {len(every)} valid ones "
        f"(its memory is exactly the limit, {want.memory_bytes:,.0f} bytes: it fits)")


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-best-plan")
def test_best_plan_depends_only_on_its_arguments():
    """Two models of the same name, asked in turn: neither gets the other's plan."""
    fake = made_up_estimate(3, lambda t, p: t == 4)
    other = made_up_estimate(3, lambda t, p: t == 2)
    cluster = Cluster(gpus=24, memory_bytes=2.0**36)
    first = with_made_up_estimate(fake, TWELVE, cluster, 24)[0]
    second = with_made_up_estimate(other, dataclasses.replace(TWELVE, layers=6), cluster, 24)[0]
    assert (first.t, second.t) == (4, 2), (
        f"best_plan for two models named {TWELVE.name!r}: t = {first.t}, then t = {second.t}; expected 4, then 2 (is "
        "something kept from an earlier call?)")
    again = with_made_up_estimate(fake, TWELVE, cluster, 24)[0]
    assert again is not first, ("best_plan asked the same again returned the very Estimate object it returned the first "
                                "time: a result kept between calls (the Estimate is the one estimate returns when "
                                "best_plan runs)")


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-best-plan")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_plan_is_none_when_nothing_fits_or_nothing_is_valid(seed):
    fake = made_up_estimate(seed, limit=2.0**20)  # memory from 0 to 2 MiB: nothing fits in 1e-3 bytes
    none_fits = with_made_up_estimate(fake, GPT3_175B, Cluster(gpus=8, memory_bytes=1e-3), 8)[0]
    none_valid = with_made_up_estimate(fake, GPT3_175B, Cluster(gpus=1024), 3, microbatch=2)[0]
    case = f"best_plan with a made-up estimate (seed {seed}) for GPT-3"
    assert none_fits is None, f"{case} on 8 GPUs: no plan fits, expected None; got {none_fits!r:.200}"
    assert none_valid is None, (
        f"{case} on 1024 GPUs, batch 3: a batch of 3 cannot be cut into 2-sequence microbatches, no plan is valid, "
        f"expected None; got {none_valid!r:.200}")


@pytest.mark.problem_5_1
@pytest.mark.criterion("5.1-arguments")
@pytest.mark.parametrize("arguments, why", [
    ({"t": 3, "p": 8}, "t p does not divide the GPUs"), ({"t": 8, "p": 5}, "p does not divide the layers"),
    ({"t": 8, "p": 3}, "p does not divide the layers"), ({"t": 64, "p": 1}, "t does not divide the heads"),
    ({"t": 8, "p": 8, "batch": 100}, "the batch does not split into d shares"), ({"t": 0, "p": 8}, "t < 1"),
    ({"t": True, "p": 8}, "a bool is not an int"), ({"t": 8, "p": 8.0}, "p is a float"),
    ({"t": 8, "p": 8, "microbatch": 0}, "microbatch < 1"), ({"t": numpy.int64(8), "p": 8}, "a numpy integer is not an int"),
    ({"t": 8, "p": 8, "batch": numpy.int64(1536)}, "a numpy integer is not an int"), ({"t": None, "p": 8}, "t is None"),
], ids=repr)
def test_estimate_rejects_arguments_outside_the_contract(arguments, why):
    arguments = {"batch": 1536, **arguments}
    raises_value_error(lambda: estimate(GPT3_175B, Cluster(gpus=1024), **arguments),
                       f"estimate(GPT-3, 1024 GPUs, {arguments})", why)


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.2-arguments")
@pytest.mark.parametrize("arguments", [{"batch": 0}, {"batch": False}, {"batch": 8, "microbatch": 0}, {"batch": 8.0},
                                       {"batch": numpy.int64(8)}, {"batch": 8, "microbatch": 1.5}], ids=repr)
def test_best_plan_rejects_arguments_outside_the_contract(arguments):
    raises_value_error(lambda: best_plan(GPT3_175B, Cluster(gpus=8), **arguments), f"best_plan(GPT-3, 8 GPUs, {arguments})",
                       "an argument outside the contract")


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.1-arguments", "5.2-arguments")
@pytest.mark.parametrize("function, valid, equal", [
    (estimate, {"t": 1, "p": 8}, {"t": True, "p": 8}), (estimate, {"t": 8, "p": 8}, {"t": numpy.int64(8), "p": 8}),
    (estimate, {"t": 8, "p": 8}, {"t": 8, "p": 8.0}), (best_plan, {}, {"batch": 1536.0}),
    (best_plan, {}, {"batch": numpy.int64(1536)}),
], ids=["estimate t=True", "estimate t=numpy.int64(8)", "estimate p=8.0", "best_plan batch=1536.0",
        "best_plan batch=numpy.int64(1536)"])
def test_arguments_outside_the_contract_are_rejected_right_after_an_equal_valid_call(function, valid, equal):
    """A bool, a float or a numpy integer equal to a valid int (with an equal hash) is still outside
    the contract, even when the valid call came just before."""
    cluster = Cluster(gpus=1024)
    function(GPT3_175B, cluster, **{"batch": 1536, **valid})
    arguments = {"batch": 1536, **valid, **equal}
    raises_value_error(lambda: function(GPT3_175B, cluster, **arguments),
                       f"{function.__name__}(GPT-3, 1024 GPUs, {arguments}) right after the same call with {valid or 'ints'}",
                       "an argument outside the contract, equal to a valid one")


@pytest.mark.problem_5_2
@pytest.mark.criterion("5.1-arguments", "5.2-arguments")
def test_arguments_at_the_limits_are_accepted():
    """The smallest sizes the contract allows raise nothing: one GPU, one sequence, t = p = 1."""
    cluster = Cluster(gpus=1, gpus_per_node=1)
    for function, arguments in [(estimate, {"batch": 1, "t": 1, "p": 1, "microbatch": 1}),
                                (estimate, {"batch": 1536, "t": 8, "p": 8, "microbatch": 1}),
                                (best_plan, {"batch": 1, "microbatch": 1})]:
        where = cluster if arguments["batch"] == 1 else Cluster(gpus=1024)
        try:
            function(GPT3_175B, where, **arguments)
        except ValueError as error:
            pytest.fail(f"{function.__name__}(GPT-3, {where.gpus} GPUs, {arguments}) raised ValueError ({error}); these "
                        "arguments are inside the contract (ints >= 1, a valid plan)")
