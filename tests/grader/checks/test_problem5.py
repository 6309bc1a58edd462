"""The Problem 5 grader checks, in process: the answer key passes, wrong variants fail.

Each wrong variant replaces ``estimate`` or ``best_plan`` of the student module
(monkeypatch) and must fail the criterion it targets, and only that one, with a message
that names the call and what was expected.
"""
import dataclasses
import math
import re

import pytest
from grading_helpers import observe_and_judge

from grader.checks import Fail
from grader.checks import problem5 as checks
from grader.layout import DEFAULT_RUBRIC
from grader.tomlcompat import tomllib
from minitorch import cost_model

SEED = 1234
CRITERIA = ["memory", "compute_bubble", "communication", "best_plan", "arguments"]
ESTIMATE_CRITERIA = ["memory", "compute_bubble", "communication"]


def run_check(name, seed=SEED):
    """The check along the grader's path (observe, plain data, save/load, judge)."""
    observe_and_judge(checks, name, seed)


def verdicts(names=CRITERIA) -> dict:
    """Criterion -> None (passed) or its failure message."""
    found = {}
    for name in names:
        try:
            run_check(name)
            found[name] = None
        except Fail as failure:
            found[name] = str(failure)
    return found


def loses_only(lost: set, match: str) -> None:
    found = verdicts()
    assert {name for name, message in found.items() if message} == lost, found
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


@pytest.mark.parametrize("name", CRITERIA)
@pytest.mark.parametrize("seed", [0, SEED])
def test_answer_key_passes(name, seed):
    run_check(name, seed)


def test_rubric_entries_name_existing_checks_and_total_12():
    rubric = tomllib.loads(DEFAULT_RUBRIC.read_text())
    problem5 = [c for c in rubric["criterion"] if c["problem"].startswith("5.")]
    assert sum(c["points"] for c in problem5) == 12
    assert {c["check"].split(":")[1] for c in problem5} == set(CRITERIA)
    for criterion in problem5:
        module, name = criterion["check"].split(":")
        assert module == "problem5"
        assert callable(getattr(checks, f"observe_{name}")) and callable(getattr(checks, f"judge_{name}"))


@pytest.mark.parametrize("name", CRITERIA)
def test_stub_raises_not_implemented(name, student):
    def stub(*args, **kwargs):
        raise NotImplementedError("Problem 5.x")

    student("estimate", stub)
    student("best_plan", stub)
    with pytest.raises(NotImplementedError):
        run_check(name)


def test_cases_cover_what_the_contract_allows():
    plans = checks.plan_cases(SEED)
    counts = [checks.reference(c["model"], c["cluster"], c["batch"], c["t"], c["p"], c["microbatch"]) for c in plans]
    assert any(c["t"] > c["cluster"]["gpus_per_node"] for c in plans)
    assert any(c["t"] == 1 and c["p"] == 1 for c in plans)
    assert any(c["p"] == c["model"]["layers"] > 1 for c in plans)
    assert any(1 < v["microbatches"] < v["p"] for v in counts)
    assert any(c["microbatch"] > 1 for c in plans)
    searches = checks.search_cases(SEED)
    bests = [checks.acceptable_best(checks.reference_plans(**checks._unpacked(c))) for c in searches]
    assert sum(1 for best in bests if not best) >= 3  # nothing fits, or nothing is valid
    assert any(best and best[0][0] & (best[0][0] - 1) for best in bests)  # a t that is not a power of two
    assert checks.search_cases(SEED) == searches and checks.plan_cases(SEED) == plans  # the seed repeats them


# ---------------------------------------------------------------- 5.1: each mistake loses its criterion


def with_fields(estimate, change):
    """An estimate returning the answer key's Estimate with the fields ``change(it, model, cluster,
    microbatch)`` gives replaced."""
    def wrong(model, cluster, batch, t, p, microbatch=1):
        right = estimate(model, cluster, batch, t, p, microbatch)
        return dataclasses.replace(right, **change(right, model, cluster, microbatch))

    return wrong


def test_forgetting_activations_loses_memory_only(student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {"activation_bytes": 0.0}))
    loses_only({"memory"}, "activation_bytes = 0.0")


def test_gpipe_in_flight_loses_memory_only(student, answer_estimate):
    def all_in_flight(e, model, cluster, microbatch):
        per_input = 2 * model.seq_len * microbatch * model.hidden * (model.layers // e.p)
        return {"activation_bytes": e.activation_bytes + (e.microbatches - min(e.p, e.microbatches)) * per_input}

    student("estimate", with_fields(answer_estimate, all_in_flight))
    loses_only({"memory"}, "activation_bytes")


def test_gpipe_bubble_convention_loses_compute_bubble_only(student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {
        "bubble_s": e.compute_s * (e.p - 1) / (e.microbatches + e.p - 1)}))
    loses_only({"compute_bubble"}, "bubble_s")


def test_nvlink_across_nodes_loses_communication_only(student, answer_estimate):
    def nvlink(e, model, cluster, microbatch):
        if e.t <= cluster.gpus_per_node:
            return {}
        return {"tensor_parallel_s": e.tensor_parallel_s * cluster.ib_bytes_per_s / cluster.nvlink_bytes_per_s}

    student("estimate", with_fields(answer_estimate, nvlink))
    loses_only({"communication"}, r"tensor_parallel_s = .*the cost model gives")


def test_pipeline_transfers_not_scattered_lose_communication(student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {"pipeline_s": e.pipeline_s * e.t}))
    loses_only({"communication"}, "pipeline_s")


def test_a_wrong_microbatch_count_is_judged_once(student, answer_estimate):
    """m = batch / d (the microbatch size forgotten), everything else consistent with that m."""
    def wrong(model, cluster, batch, t, p, microbatch=1):
        right = answer_estimate(model, cluster, batch, t, p, microbatch)
        m = batch // right.d
        scale = m / right.microbatches
        stored = min(p, m) * (model.layers // p) * 2 * model.seq_len * microbatch * model.hidden
        working = right.activation_bytes - min(p, right.microbatches) * (model.layers // p) * 2 * model.seq_len * microbatch * model.hidden
        return dataclasses.replace(right, microbatches=m, bubble_s=right.compute_s * (p - 1) / m,
                                   tensor_parallel_s=right.tensor_parallel_s * scale, pipeline_s=right.pipeline_s * scale,
                                   activation_bytes=stored + working)

    student("estimate", wrong)
    loses_only({"compute_bubble"}, "microbatches")


def test_valid_plan_rejected_fails_with_the_call(student, answer_estimate):
    def refuses_across_nodes(model, cluster, batch, t, p, microbatch=1):
        if t > cluster.gpus_per_node:
            raise ValueError("t must fit in a node")
        return answer_estimate(model, cluster, batch, t, p, microbatch)

    student("estimate", refuses_across_nodes)
    with pytest.raises(Fail, match=r"estimate\(Model\(layers=.*raised ValueError \(t must fit in a node\), but the plan is valid"):
        run_check("memory")


@pytest.mark.parametrize("returned", [None, (1, 2), "estimate"])
def test_something_else_than_an_estimate_fails_clearly(student, returned):
    student("estimate", lambda *args, **kwargs: returned)
    for name in ESTIMATE_CRITERIA:
        with pytest.raises(Fail, match="where a minitorch.cost_model.Estimate was expected"):
            run_check(name)


def test_fields_that_are_not_numbers_fail_clearly(student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {"pipeline_s": "0"}))
    with pytest.raises(Fail, match="pipeline_s is str, not a number"):
        run_check("communication")


def test_nan_fails(student, answer_estimate):
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {"data_parallel_s": math.nan}))
    loses_only({"communication"}, "data_parallel_s = nan")


# ---------------------------------------------------------------- 5.2


def plans_of(model, cluster, batch, microbatch):
    """Every valid plan's estimate (arguments checked as the contract says)."""
    from minitorch import pipeline

    for value in (batch, microbatch):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"not an int >= 1: {value!r}")
    found = []
    for t in range(1, math.gcd(cluster.gpus, model.heads) + 1):
        for p in range(1, model.layers + 1):
            try:
                found.append(pipeline.estimate(model, cluster, batch, t, p, microbatch))
            except ValueError:
                continue
    return found


def test_first_fitting_plan_loses_best_plan_only(student):
    def first_fitting(model, cluster, batch, microbatch=1):
        return next((e for e in plans_of(model, cluster, batch, microbatch) if e.fits), None)

    student("best_plan", first_fitting)
    loses_only({"best_plan"}, "the fastest valid plan that fits is t =")


def test_powers_of_two_only_loses_best_plan(student):
    def powers_of_two(model, cluster, batch, microbatch=1):
        fitting = [e for e in plans_of(model, cluster, batch, microbatch) if e.fits and e.t & (e.t - 1) == 0]
        return min(fitting, key=lambda e: e.step_s, default=None)

    student("best_plan", powers_of_two)
    loses_only({"best_plan"}, "the fastest valid plan that fits is t =")


def test_ignoring_memory_loses_best_plan(student):
    student("best_plan", lambda model, cluster, batch, microbatch=1: min(
        plans_of(model, cluster, batch, microbatch), key=lambda e: e.step_s, default=None))
    loses_only({"best_plan"}, r"GB: does not fit\); the fastest valid plan that fits is")


def test_raising_when_nothing_fits_fails_with_the_call(student):
    from minitorch import pipeline

    right = pipeline.best_plan

    def raises(model, cluster, batch, microbatch=1):
        found = right(model, cluster, batch, microbatch)
        if found is None:
            raise ValueError("no plan fits")
        return found

    student("best_plan", raises)
    with pytest.raises(ValueError, match="no plan fits"):
        run_check("best_plan")


def test_best_plan_is_judged_with_the_graders_estimate(student, answer_estimate):
    """A wrong estimate costs 5.1 only: best_plan still passes with it."""
    student("estimate", with_fields(answer_estimate, lambda e, model, cluster, microbatch: {"activation_bytes": 0.0}))
    run_check("best_plan")


# ---------------------------------------------------------------- 5.2-arguments


def test_assert_instead_of_value_error_loses_arguments_only(student, answer_estimate):
    def asserts(model, cluster, batch, t, p, microbatch=1):
        try:
            return answer_estimate(model, cluster, batch, t, p, microbatch)
        except ValueError as error:
            raise AssertionError(str(error)) from None

    student("estimate", asserts)
    loses_only({"arguments"}, "raised AssertionError; expected ValueError at the call")


def test_bools_accepted_lose_arguments(student, answer_estimate):
    student("estimate", lambda model, cluster, batch, t, p, microbatch=1: answer_estimate(
        model, cluster, int(batch) if isinstance(batch, bool) else batch, int(t) if isinstance(t, bool) else t, p, microbatch))
    loses_only({"arguments"}, "t=True")


def test_argument_cases_are_outside_the_contract():
    for name, model, cluster, arguments, why in checks.argument_cases(SEED):
        if name == "estimate":
            assert not checks.valid_plan(model, cluster, arguments["batch"], arguments["t"], arguments["p"],
                                         arguments["microbatch"]), why


def test_reference_agrees_with_the_lecture():
    """The grader's own model gives the lecture's numbers for the 1T model (section 6.2)."""
    model = {k: getattr(cost_model.MEGATRON_1T, k) for k in checks.MODEL_FIELDS}
    cluster = {k: getattr(cost_model.Cluster(gpus=3072), k) for k in checks.CLUSTER_FIELDS}
    p32 = checks.reference(model, cluster, 3072, 8, 32, 1)
    assert checks._memory(p32) / 1e9 == pytest.approx(78, abs=1.0)
    p64 = checks.reference(model, cluster, 3072, 8, 64, 1)
    assert p64["state_bytes"] / 1e9 == pytest.approx(31, abs=1.0)
    assert p64["flops_per_gpu"] / checks._step(p64) / 1e12 == pytest.approx(197, abs=2)


# ---------------------------------------------------------------- correct, written another way


def other_estimate(model, cluster, batch, t, p, microbatch=1):
    """Right, in another shape: floats for the counts, per-token and per-layer terms, no helpers."""
    for value in (batch, t, p, microbatch):
        if type(value) is not int or value < 1:
            raise ValueError(f"not an int >= 1: {value!r}")
    if cluster.gpus % (t * p) or model.layers % p or model.heads % t or batch % (cluster.gpus // (t * p) * microbatch):
        raise ValueError("not a valid plan")
    d = cluster.gpus / (t * p)
    m = batch / d / microbatch
    tokens = batch * model.seq_len
    per_token = 96 * model.layers * model.hidden**2 + 16 * model.layers * model.seq_len * model.hidden \
        + 6 * model.hidden * model.vocab
    flops_per_gpu = per_token * tokens / cluster.gpus
    compute = flops_per_gpu / cluster.peak_flops / cluster.efficiency
    size = 2.0 * microbatch * model.seq_len * model.hidden
    link = cluster.ib_bytes_per_s if t > cluster.gpus_per_node else cluster.nvlink_bytes_per_s
    per_layer = 6 * (2 - 2 / t) * size / link
    local = model.parameters / t / p
    return cost_model.Estimate(
        t=t, p=p, d=d, microbatches=m, compute_s=compute, bubble_s=(p - 1) * compute / m,
        tensor_parallel_s=per_layer * model.layers / p * m,
        pipeline_s=0 if p == 1 else 2 * m * size / t / cluster.ib_bytes_per_s,
        data_parallel_s=(2 - 2 / d) * 2 * local / cluster.ib_bytes_per_s,
        state_bytes=local * 16,
        activation_bytes=size * model.layers / p * min(p, m)
        + microbatch * model.seq_len * model.hidden * (10 + (24 + 5 * model.heads * model.seq_len / model.hidden) / t),
        flops_per_gpu=flops_per_gpu, memory_limit=cluster.memory_bytes)


def brute_force_best_plan(model, cluster, batch, microbatch=1):
    """Right, in another shape: every t and p tried, invalid ones skipped by their ValueError, sorted."""
    from minitorch import pipeline

    for value in (batch, microbatch):
        if type(value) is not int or value < 1:
            raise ValueError(f"not an int >= 1: {value!r}")
    found = []
    for t in range(1, cluster.gpus + 1):
        for p in range(1, model.layers + 1):
            try:
                found.append(pipeline.estimate(model, cluster, batch, t, p, microbatch))
            except ValueError:
                pass
    fitting = sorted((e for e in found if e.fits), key=lambda e: (e.step_s, -e.t))
    return fitting[0] if fitting else None


def test_correct_code_written_another_way_keeps_every_point(student):
    student("estimate", other_estimate)
    student("best_plan", brute_force_best_plan)
    assert verdicts() == {name: None for name in CRITERIA}
