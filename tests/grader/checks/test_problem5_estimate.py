"""The 5.1 checks (grader/checks/problem5/estimate/), in process: the answer key passes, every
rule of the contract has a deterministic case on each side, and each wrong variant loses the
criterion it targets, and only that one, on every seed, with a message naming the call."""
import dataclasses
import math
import numbers
import re

import numpy
import pytest
from grading_helpers import observe_and_judge

from grader.checks.judging import Fail
from grader.checks.problem5 import expected
from grader.checks.problem5.arguments import cases as argument_cases
from grader.checks.problem5.estimate import cases as plan_cases
from grader.checks.problem5.plans import MODEL_FIELDS, valid_plan
from minitorch import cost_model

SEEDS = [0, 1234, 99]
CRITERIA = {"memory": "5.1-memory", "compute_bubble": "5.1-compute-bubble", "communication": "5.1-communication",
            "kinds": "5.1-kinds"}


def run_check(name: str, seed: int = SEEDS[1]) -> None:
    observe_and_judge(f"problem5.estimate:{name}", None, seed)


def verdicts(seed: int) -> dict:
    """Check name -> None (passed) or its failure message."""
    found = {}
    for name in CRITERIA:
        try:
            run_check(name, seed)
            found[name] = None
        except Fail as failure:
            found[name] = str(failure)
    return found


def loses_only(lost: set, match: str) -> None:
    """On every seed: exactly ``lost`` fail, each with a message matching ``match``."""
    for seed in SEEDS:
        found = verdicts(seed)
        assert {name for name, message in found.items() if message} == lost, (seed, found)
        for name in lost:
            assert re.search(match, found[name]), found[name]


@pytest.fixture
def student(monkeypatch):
    from minitorch import pipeline

    return lambda attribute, value: monkeypatch.setattr(pipeline, attribute, value)


@pytest.fixture
def answer_estimate():
    from minitorch import pipeline

    return pipeline.estimate


def with_fields(estimate, change):
    """The answer key's estimate with the fields ``change(it, model, cluster, microbatch)`` gives replaced."""
    def wrong(model, cluster, batch, t, p, microbatch=1):
        right = estimate(model, cluster, batch, t, p, microbatch)
        return dataclasses.replace(right, **change(right, model, cluster, microbatch))

    return wrong


@pytest.mark.parametrize("seed", SEEDS)
def test_answer_key_passes(seed):
    assert verdicts(seed) == dict.fromkeys(CRITERIA)


@pytest.mark.parametrize("name", CRITERIA)
def test_stub_raises_not_implemented(name, student):
    def stub(*args, **kwargs):
        raise NotImplementedError("Problem 5.1")

    student("estimate", stub)
    with pytest.raises(NotImplementedError):
        run_check(name)


# ---------------------------------------------------------------- the cases


def counts(case: dict) -> dict:
    return expected.reference(case["model"], case["cluster"], case["batch"], case["t"], case["p"], case["microbatch"])


FIXED = plan_cases.plan_cases(0)[: len(plan_cases.FIXED) + 1]
RULES = {  # each rule of the contract, on both sides: some fixed case makes it true
    "t = 1": lambda c, v: c["t"] == 1,
    "t equals the GPUs of a node": lambda c, v: c["t"] == c["cluster"]["gpus_per_node"] > 1,
    "t one past the GPUs of a node": lambda c, v: c["t"] == c["cluster"]["gpus_per_node"] + 1,
    "t inside a node, not dividing it": lambda c, v: c["t"] <= c["cluster"]["gpus_per_node"] and c["cluster"]["gpus_per_node"] % c["t"],
    "one GPU per node, t > 1": lambda c, v: c["cluster"]["gpus_per_node"] == 1 and c["t"] > 1,
    "t equals the heads": lambda c, v: c["t"] == c["model"]["heads"],
    "p = 1": lambda c, v: c["p"] == 1 and c["t"] > 1,
    "p equals the layers": lambda c, v: c["p"] == c["model"]["layers"] > 1,
    "d = 1": lambda c, v: v["d"] == 1 and c["cluster"]["gpus"] > 1,
    "d = N": lambda c, v: v["d"] == c["cluster"]["gpus"] > 1,
    "m = 1 below p": lambda c, v: v["microbatches"] == 1 < c["p"],
    "1 < m < p": lambda c, v: 1 < v["microbatches"] < c["p"],
    "m = p": lambda c, v: v["microbatches"] == c["p"] > 1,
    "m = p + 1": lambda c, v: v["microbatches"] == c["p"] + 1,
    "microbatch over 1, by keyword": lambda c, v: c["microbatch"] > 1 and c["call"] == "keywords",
    "microbatch left at its default": lambda c, v: c["call"] == "default",
    "a cluster given in ints": lambda c, v: all(type(c["cluster"][k]) is int for k in c["cluster"]),
    "a step of microseconds": lambda c, v: expected.step(v) < 1e-3,
    "FLOP-sized numbers": lambda c, v: v["flops_per_gpu"] > 1e15,
    "one GPU": lambda c, v: c["cluster"]["gpus"] == 1,
}


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_has_a_fixed_case(rule):
    assert any(RULES[rule](case, counts(case)) for case in FIXED), rule


def test_fixed_cases_are_valid_and_the_same_every_seed():
    for case in FIXED:
        assert valid_plan(case["model"], case["cluster"], case["batch"], case["t"], case["p"], case["microbatch"]), case
        assert case["call"] != "default" or case["microbatch"] == 1
    assert plan_cases.plan_cases(5)[: len(FIXED)] == FIXED
    assert FIXED[-1]["batch"] == FIXED[plan_cases.REPEATED]["batch"]  # the repeated call
    assert plan_cases.plan_cases(5) == plan_cases.plan_cases(5) != plan_cases.plan_cases(6)


def test_reference_agrees_with_the_lecture():
    """The grader's own model gives the lecture's numbers for the 1T model (section 6.2)."""
    model = {k: getattr(cost_model.MEGATRON_1T, k) for k in MODEL_FIELDS}
    cluster = dataclasses.asdict(cost_model.Cluster(gpus=3072))
    p32 = expected.reference(model, cluster, 3072, 8, 32, 1)
    assert expected.memory(p32) / 1e9 == pytest.approx(78, abs=1.0)
    p64 = expected.reference(model, cluster, 3072, 8, 64, 1)
    assert p64["state_bytes"] / 1e9 == pytest.approx(31, abs=1.0)
    assert p64["flops_per_gpu"] / expected.step(p64) / 1e12 == pytest.approx(197, abs=2)
    assert expected.parameters(model) == cost_model.MEGATRON_1T.parameters


# ---------------------------------------------------------------- each mistake loses its criterion


def test_forgetting_activations_loses_memory_only(student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {"activation_bytes": 0.0}))
    loses_only({"memory"}, "activation_bytes = 0.0")


def test_gpipe_in_flight_loses_memory_only(student, answer_estimate):
    def all_in_flight(e, model, cluster, microbatch):
        per_input = 2 * model.seq_len * microbatch * model.hidden * (model.layers // e.p)
        return {"activation_bytes": e.activation_bytes + (e.microbatches - min(e.p, e.microbatches)) * per_input}

    student("estimate", with_fields(answer_estimate, all_in_flight))
    loses_only({"memory"}, "activation_bytes")


def test_p_in_flight_below_p_microbatches_loses_memory_only(student, answer_estimate):
    def p_in_flight(e, model, cluster, microbatch):
        per_input = 2 * model.seq_len * microbatch * model.hidden * (model.layers // e.p)
        return {"activation_bytes": e.activation_bytes + (e.p - min(e.p, e.microbatches)) * per_input}

    student("estimate", with_fields(answer_estimate, p_in_flight))
    loses_only({"memory"}, "activation_bytes")


def test_gpipe_bubble_convention_loses_compute_bubble_only(student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {
        "bubble_s": e.compute_s * (e.p - 1) / (e.microbatches + e.p - 1)}))
    loses_only({"compute_bubble"}, "bubble_s")


def scaled_link(condition):
    """Tensor-parallel time over the other link wherever ``condition(t, gpus per node)`` holds."""
    def change(e, model, cluster, microbatch):
        if not condition(e.t, cluster.gpus_per_node) or e.t == 1:
            return {}
        inside = e.t <= cluster.gpus_per_node
        ratio = cluster.ib_bytes_per_s / cluster.nvlink_bytes_per_s
        return {"tensor_parallel_s": e.tensor_parallel_s * (1 / ratio if inside else ratio)}

    return change


@pytest.mark.parametrize("mistake, condition", [
    ("NVLink across nodes", lambda t, node: t > node),
    ("InfiniBand at exactly a node (t < node for t <= node)", lambda t, node: t == node),
    ("InfiniBand unless t divides the node", lambda t, node: t <= node and node % t),
])
def test_the_wrong_link_loses_communication_only(mistake, condition, student, answer_estimate):
    student("estimate", with_fields(answer_estimate, scaled_link(condition)))
    loses_only({"communication"}, r"tensor_parallel_s = .*the cost model gives .*(spans nodes|fits in a node)")


@pytest.mark.parametrize("mistake, change", [
    ("pipeline transfers not scattered over t", lambda e: {"pipeline_s": e.pipeline_s * e.t}),
    ("no gradient coming back", lambda e: {"pipeline_s": e.pipeline_s / 2}),
    ("(d - 1)/d for a ring all-reduce", lambda e: {"data_parallel_s": e.data_parallel_s / 2}),
    ("the all-reduces of the recomputed forward forgotten", lambda e: {"tensor_parallel_s": e.tensor_parallel_s * 4 / 6}),
])
def test_each_communication_term_loses_communication_only(mistake, change, student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: change(e)))
    loses_only({"communication"}, "_s = ")


def test_a_wrong_microbatch_count_is_judged_once(student, answer_estimate):
    """m = batch / d (the microbatch size forgotten), everything else consistent with that m."""
    def wrong(model, cluster, batch, t, p, microbatch=1):
        right = answer_estimate(model, cluster, batch, t, p, microbatch)
        m = batch // right.d
        scale = m / right.microbatches
        per_input = (model.layers // p) * 2 * model.seq_len * microbatch * model.hidden
        stored = (min(p, m) - min(p, right.microbatches)) * per_input
        return dataclasses.replace(right, microbatches=m, bubble_s=right.compute_s * (p - 1) / m,
                                   tensor_parallel_s=right.tensor_parallel_s * scale, pipeline_s=right.pipeline_s * scale,
                                   activation_bytes=right.activation_bytes + stored)

    student("estimate", wrong)
    loses_only({"compute_bubble"}, "microbatches")


def test_a_default_microbatch_of_its_own_is_caught(student, answer_estimate):
    student("estimate", lambda model, cluster, batch, t, p, microbatch=2: answer_estimate(model, cluster, batch, t, p, microbatch))
    for seed in SEEDS:
        found = verdicts(seed)
        assert all(found[name] for name in ("memory", "compute_bubble", "communication")), found


def test_a_result_cached_by_model_name_loses_the_values(student, answer_estimate):
    cache = {}

    def cached(model, cluster, batch, t, p, microbatch=1):
        return cache.setdefault((model.name, t, p), answer_estimate(model, cluster, batch, t, p, microbatch))

    student("estimate", cached)
    found = verdicts(SEEDS[0])
    assert found["kinds"] is None and all(found[name] for name in ("memory", "compute_bubble", "communication")), found


def test_state_kept_between_calls_is_caught(student, answer_estimate):
    calls = []

    def drifting(model, cluster, batch, t, p, microbatch=1):  # the first answer for each plan size, kept
        calls.append((t, p))
        right = answer_estimate(model, cluster, batch, t, p, microbatch)
        return right if calls.count((t, p)) == 1 else dataclasses.replace(right, compute_s=right.compute_s * 2)

    student("estimate", drifting)
    assert verdicts(SEEDS[0])["compute_bubble"]


def test_valid_plan_rejected_fails_with_the_call(student, answer_estimate):
    def refuses_across_nodes(model, cluster, batch, t, p, microbatch=1):
        if t > cluster.gpus_per_node:
            raise ValueError("t must fit in a node")
        return answer_estimate(model, cluster, batch, t, p, microbatch)

    student("estimate", refuses_across_nodes)
    with pytest.raises(Fail, match=r"estimate\(Model\(layers=.*raised ValueError \(t must fit in a node\), but the plan is valid"):
        run_check("memory")
    run_check("kinds")  # the Estimates it did return are of the right kinds


# ---------------------------------------------------------------- kinds: a convention of its own


@pytest.mark.parametrize("mistake, change, match", [
    ("d as a float", lambda e: {"d": float(e.d)}, "d = .* is of type float"),
    ("microbatches from true division", lambda e: {"microbatches": e.microbatches / 1}, "microbatches = .* float"),
    ("a numpy integer count", lambda e: {"t": numpy.int64(e.t)}, "numpy.int64"),
    ("an int zero for a term", lambda e: {"pipeline_s": 0} if e.p == 1 else {}, "pipeline_s = 0 is of type int"),
    ("the cluster's int memory passed on", lambda e: {"memory_limit": int(e.memory_limit)}, "memory_limit = .* int"),
])
def test_kinds_lose_the_kinds_criterion_only(mistake, change, match, student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: change(e)))
    loses_only({"kinds"}, match)


@pytest.mark.parametrize("returned", [None, (1, 2), "estimate"])
def test_something_else_than_an_estimate_fails_clearly(student, returned):
    student("estimate", lambda *args, **kwargs: returned)
    for name in CRITERIA:
        with pytest.raises(Fail, match="where a minitorch.cost_model.Estimate was expected"):
            run_check(name)


def test_fields_that_are_not_numbers_fail_their_criteria(student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {"pipeline_s": "0"}))
    loses_only({"communication", "kinds"}, "pipeline_s")


def test_nan_fails(student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {"data_parallel_s": math.nan}))
    loses_only({"communication"}, "data_parallel_s = nan")


def memoised(function):
    """``function`` with its results cached on the repr of its arguments: the same object again."""
    cache = {}

    def cached(*args, **kwargs):
        key = repr((args, sorted(kwargs.items())))
        if key not in cache:
            cache[key] = function(*args, **kwargs)
        return cache[key]

    return cached


def test_a_memoised_estimate_loses_the_kinds_criterion_only(student, answer_estimate):
    """Right values, the same Estimate object for the same call: a result kept between calls."""
    student("estimate", memoised(lambda model, cluster, batch, t, p, microbatch=1:
                                 answer_estimate(model, cluster, batch, t, p, microbatch)))
    loses_only({"kinds"}, "returned the very Estimate object that the same call returned earlier")


def test_the_repeated_case_repeats_a_call():
    cases = plan_cases.plan_cases(0)
    again = cases[len(plan_cases.FIXED)]
    first = cases[plan_cases.REPEATED]
    assert {k: v for k, v in again.items() if k != "name"} == {k: v for k, v in first.items() if k != "name"}


# ---------------------------------------------------------------- correct, written another way


def other_estimate(model, cluster, batch, t, p, microbatch=1):
    """Right, in another shape: per-token and per-layer terms, numpy floats, no helpers."""
    for value in (batch, t, p, microbatch):
        if type(value) is not int or value < 1:
            raise ValueError(f"not an int >= 1: {value!r}")
    if cluster.gpus % (t * p) or model.layers % p or model.heads % t or batch % (cluster.gpus // (t * p) * microbatch):
        raise ValueError("not a valid plan")
    d = cluster.gpus // (t * p)
    m = batch // d // microbatch
    tokens = batch * model.seq_len
    per_token = 96 * model.layers * model.hidden**2 + 16 * model.layers * model.seq_len * model.hidden \
        + 6 * model.hidden * model.vocab
    flops_per_gpu = numpy.float64(per_token * tokens / cluster.gpus)
    compute = flops_per_gpu / cluster.peak_flops / cluster.efficiency
    size = 2.0 * microbatch * model.seq_len * model.hidden
    link = cluster.ib_bytes_per_s if t > cluster.gpus_per_node else cluster.nvlink_bytes_per_s
    per_layer = 6 * (2 - 2 / t) * size / link
    local = (12 * model.layers * model.hidden**2 + 13 * model.layers * model.hidden
             + (model.vocab + model.seq_len) * model.hidden) / t / p
    return cost_model.Estimate(
        t=t, p=p, d=d, microbatches=m, compute_s=compute, bubble_s=(p - 1) * compute / m,
        tensor_parallel_s=per_layer * model.layers / p * m,
        pipeline_s=0.0 if p == 1 else 2 * m * size / t / cluster.ib_bytes_per_s,
        data_parallel_s=(2 - 2 / d) * 2 * local / cluster.ib_bytes_per_s,
        state_bytes=local * 16,
        activation_bytes=size * model.layers / p * min(p, m)
        + microbatch * model.seq_len * model.hidden * (10 + (24 + 5 * model.heads * model.seq_len / model.hidden) / t),
        flops_per_gpu=float(flops_per_gpu), memory_limit=cluster.memory_bytes * 1.0)


def test_correct_code_written_another_way_keeps_every_point(student):
    student("estimate", other_estimate)
    for seed in SEEDS:
        assert verdicts(seed) == dict.fromkeys(CRITERIA)


# ---------------------------------------------------------------- 5.1-arguments


def arguments_failure() -> str | None:
    try:
        observe_and_judge("problem5.arguments:estimate", None, 0)
    except Fail as error:
        return str(error)
    return None


def test_answer_key_passes_arguments():
    assert arguments_failure() is None


def test_assert_instead_of_value_error_loses_arguments(student):
    from minitorch import pipeline

    right = pipeline.estimate

    def asserts(*args, **kwargs):
        try:
            return right(*args, **kwargs)
        except ValueError as error:
            raise AssertionError(str(error)) from None

    student("estimate", asserts)
    assert "raised AssertionError; expected ValueError at the call" in arguments_failure()
    assert observe_and_judge("problem5.arguments:best_plan", None, 0) is None  # best_plan's own checks are its own


@pytest.mark.parametrize("mistake, check, match", [
    ("bools accepted", lambda v: isinstance(v, int) and v >= 1, "with t=True returned"),
    ("numpy integers accepted", lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1,
     "numpy.int64"),
    ("zero accepted", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "=0"),
])
def test_argument_checks_that_let_through_what_the_contract_rejects_lose_arguments(mistake, check, match, student):
    from minitorch import pipeline

    right = pipeline.estimate

    def lenient(model, cluster, batch, t, p, microbatch=1):
        if not all(check(v) for v in (batch, t, p, microbatch)):
            raise ValueError("not an int >= 1")
        return right(model, cluster, int(batch), int(t), int(p), int(microbatch)) if all(
            int(v) >= 1 for v in (batch, t, p, microbatch)) else "accepted"

    student("estimate", lenient)
    assert re.search(match, arguments_failure())


def test_rejecting_valid_arguments_loses_arguments(student):
    student("estimate", lambda *args, **kwargs: (_ for _ in ()).throw(ValueError("always")))
    assert "are inside the contract (ints >= 1, a valid plan)" in arguments_failure()


def cached_before_the_checks(estimate):
    """``estimate`` answering from a cache keyed by its arguments (compared with ==) before any
    check, with a copy of the kept Estimate (so the same object never comes back twice)."""
    kept = {}

    def cached(model, cluster, batch, t, p, microbatch=1):
        arguments = (repr(model), repr(cluster), batch, t, p, microbatch)
        if arguments not in kept:
            kept[arguments] = estimate(model, cluster, batch, t, p, microbatch)
        return dataclasses.replace(kept[arguments])

    return cached


def test_the_cases_asked_again_equal_a_valid_call():
    for function in ("estimate", "best_plan"):
        cases = argument_cases.argument_cases(function)
        again = [case for case in cases if case[0].endswith(argument_cases.AGAIN)]
        inside = [{**argument_cases.BASE_CALLS[function], **case[2]} for case in cases if case[3]]
        assert len(again) == len(argument_cases.EQUAL_TO_INSIDE[function])
        for case in again:
            assert {**argument_cases.BASE_CALLS[function], **case[2]} in inside, case[0]


def test_a_cache_consulted_before_the_checks_loses_arguments(student, answer_estimate):
    """Right values and a new object each call, but t=True answered from the kept t=1 call."""
    student("estimate", cached_before_the_checks(answer_estimate))
    assert "right after a valid call equal to it returned" in arguments_failure()
