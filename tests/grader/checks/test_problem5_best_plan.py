"""The 5.2 checks (grader/checks/problem5/best_plan/ and arguments/), in process.

best_plan is judged twice by the grader (the rubric's fallback): with the student's own
estimate on real searches (``pieces = "own"``), and, where that fails, with the grader's
stand-in estimate on designed searches (``pieces = "grader"``). A mistake of best_plan's own
must fail both runs, on every seed; a correct best_plan passes the own run with a correct
estimate, and the stand-in run whatever the student's estimate does.
"""
import dataclasses
import math
import numbers
import re

import pytest
from grading_helpers import observe_and_judge

from grader.checks.judging import Fail
from grader.checks.problem5 import expected
from grader.checks.problem5.best_plan import cases as own_cases
from grader.checks.problem5.best_plan import stand_in
from grader.checks.problem5.plans import valid_plans
from minitorch import cost_model

SEEDS = [0, 1234, 99]
RUNS = ["own", "grader"]


def run_best_plan(pieces: str, seed: int = SEEDS[1]) -> None:
    observe_and_judge("problem5.best_plan:best_plan", None, seed, {"pieces": pieces})


def failure(pieces: str, seed: int) -> str | None:
    try:
        run_best_plan(pieces, seed)
    except Fail as error:
        return str(error)
    return None


@pytest.fixture
def student(monkeypatch):
    from minitorch import pipeline

    return lambda attribute, value: monkeypatch.setattr(pipeline, attribute, value)


@pytest.mark.parametrize("pieces", RUNS)
@pytest.mark.parametrize("seed", SEEDS)
def test_answer_key_passes(pieces, seed):
    run_best_plan(pieces, seed)


def test_the_stub_raises_not_implemented(student):
    def stub(*args, **kwargs):
        raise NotImplementedError("Problem 5.2")

    student("best_plan", stub)
    for pieces in RUNS:
        with pytest.raises(NotImplementedError):
            run_best_plan(pieces)


# ---------------------------------------------------------------- the own run's fixed searches


def reference_of(case: dict) -> list[dict]:
    return expected.reference_plans(case["model"], case["cluster"], case["batch"], case["microbatch"])


def only_best(case: dict) -> dict | None:
    plans = reference_of(case)
    best = expected.acceptable_best(plans)
    assert len(best) <= 1, case["name"]
    return next((v for v in plans if (v["t"], v["p"]) == best[0]), None) if best else None


OWN = {case["name"]: case for case in own_cases.search_cases(0)[: len(own_cases.FIXED)]}
PROPERTIES = {  # what each fixed search tries: a property of its fastest fitting plan
    "12 heads on 6-GPU nodes of 215 MB": lambda best, case: best["t"] == 3,
    "12 heads on 8-GPU nodes of 253 MB, microbatches of 2": lambda best, case: best["t"] == 3 and case["microbatch"] == 2,
    "12 heads on 6-GPU nodes of 176,633,856 bytes, microbatches of 2":
        lambda best, case: expected.memory(best) == case["cluster"]["memory_bytes"],
    "2 layers on 4-GPU nodes of 63.9 MB": lambda best, case: best["t"] > case["cluster"]["gpus_per_node"],
    "2 layers on 6-GPU nodes of 87.6 MB": lambda best, case: best["p"] == case["model"]["layers"],
    "GPT-3 on 1024 GPUs of 80 GB, batch 1536 (lecture 6.3)": lambda best, case: (best["t"], best["p"]) == (8, 16),
    "one GPU": lambda best, case: (best["t"], best["p"]) == (1, 1),
    "12 heads on 6-GPU nodes of 50 MB": lambda best, case: best is None and reference_of(case),
    "a batch of 3 in microbatches of 2": lambda best, case: best is None and not reference_of(case),
}


def test_every_fixed_search_is_described():
    assert set(PROPERTIES) == set(OWN)


@pytest.mark.parametrize("name", PROPERTIES)
def test_each_fixed_search_tries_its_rule_with_margins(name):
    case = OWN[name]
    best = only_best(case)
    assert PROPERTIES[name](best, case)
    limit = case["cluster"]["memory_bytes"]
    for values in reference_of(case):
        is_best = best is not None and (values["t"], values["p"]) == (best["t"], best["p"])
        if not is_best or expected.memory(values) != limit:  # the one at the limit is meant to be there
            assert abs(expected.memory(values) / limit - 1) > 0.005, (name, values["t"], values["p"])
        if best and not is_best and expected.memory(values) <= limit:
            assert expected.step(values) > expected.step(best) * (1 + 1e-4), (name, values["t"], values["p"])


def test_the_search_at_the_limit_is_exact_in_the_answer_key():
    from minitorch import pipeline

    case = OWN["12 heads on 6-GPU nodes of 176,633,856 bytes, microbatches of 2"]
    best = only_best(case)
    model, cluster = cost_model.Model("x", **case["model"]), cost_model.Cluster(**case["cluster"])
    found = pipeline.estimate(model, cluster, case["batch"], best["t"], best["p"], case["microbatch"])
    assert found.memory_bytes == cluster.memory_bytes and found.fits


def test_the_hard_search_is_none_of_the_shortcuts():
    """The fastest fitting plan is not the first fitting one (t- or p-major), the fastest ignoring
    memory, the smallest, the one with the least compute, or the largest t or p that fits."""
    case = OWN["12 heads on 6-GPU nodes of 215 MB"]
    plans, (best,) = reference_of(case), expected.acceptable_best(reference_of(case))
    best = next(v for v in plans if (v["t"], v["p"]) == best)
    fitting = [v for v in plans if expected.memory(v) <= v["memory_limit"]]
    shortcuts = [fitting[0], min(fitting, key=lambda v: (v["p"], v["t"])), min(plans, key=expected.step),
                 min(fitting, key=expected.memory), min(fitting, key=lambda v: v["compute_s"]),
                 max(fitting, key=lambda v: (v["t"], v["p"])), max(fitting, key=lambda v: (v["p"], v["t"]))]
    assert all(plan is not best for plan in shortcuts)


# ---------------------------------------------------------------- the stand-in's designed searches


def tables(seed: int):
    for index, case in enumerate(stand_in.search_cases()):
        yield case, stand_in.designed_table(seed, index, case)


def stand_in_step(values: dict) -> float:
    return sum(values[term] for term in stand_in.TERMS)


@pytest.mark.parametrize("seed", [0, 1, 2, 1234, 99])
def test_each_designed_search_has_its_shape(seed):
    for case, table in tables(seed):
        plans = list(table.values())
        best = expected.acceptable_best(plans)
        design = case["design"]
        if design == "none valid":
            assert not table and not valid_plans(case["model"], case["cluster"], case["batch"], case["microbatch"])
            continue
        assert len(table) == len(valid_plans(case["model"], case["cluster"], case["batch"], case["microbatch"]))
        if design == "none fits":
            assert not best and min(expected.memory(v) for v in plans) == stand_in.LIMIT + 1
            continue
        assert len(best) == (2 if design == "a tie" else 1), (design, best)
        target = table[best[0]]
        node, layers, gpus = case["cluster"]["gpus_per_node"], case["model"]["layers"], case["cluster"]["gpus"]
        assert stand_in.TARGETS.get(design, lambda *a: True)(target["t"], target["p"], node, layers, gpus), design
        if design == "at the limit":
            assert expected.memory(target) == stand_in.LIMIT
        if len(plans) > 1:
            assert any(expected.memory(v) == stand_in.LIMIT + 1 and stand_in_step(v) < stand_in_step(target) for v in plans)
        if design not in ("t = p = 1", "one GPU"):
            fitting = [v for v in plans if expected.memory(v) <= stand_in.LIMIT]
            for shortcut in (fitting[0], min(fitting, key=lambda v: (v["p"], v["t"])), min(fitting, key=expected.memory)):
                assert shortcut is not target, (design, shortcut["t"], shortcut["p"])


@pytest.mark.parametrize("seed", [0, 1, 2, 1234, 99])
def test_partial_sums_of_the_step_rank_a_decoy_first(seed):
    """Ranking the fitting plans by compute alone, or without one communication term, does not
    find the target in the designed search of any plan."""
    case, table = next((case, table) for case, table in tables(seed) if case["design"] == "any plan")
    fitting = [v for v in table.values() if expected.memory(v) <= stand_in.LIMIT]
    target = min(fitting, key=stand_in_step)
    for left_out in ("bubble_s", "tensor_parallel_s", "pipeline_s", "data_parallel_s"):
        partial = min(fitting, key=lambda v: v["compute_s"] + (0 if left_out == "bubble_s" else v["bubble_s"]) + sum(
            v[term] for term in ("tensor_parallel_s", "pipeline_s", "data_parallel_s") if term != left_out))
        assert partial is not target or left_out == "bubble_s", left_out
    assert min(fitting, key=lambda v: v["compute_s"]) is not target


# ---------------------------------------------------------------- best_plan's own mistakes fail both runs


def plans_of(model, cluster, batch, microbatch, ts=None, ps=None):
    """Every valid plan's estimate by the module's estimate (arguments checked as the contract says)."""
    from minitorch import pipeline

    for value in (batch, microbatch):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"not an int >= 1: {value!r}")
    found = []
    for t in range(1, math.gcd(cluster.gpus, model.heads) + 1) if ts is None else ts:
        for p in range(1, model.layers + 1) if ps is None else ps:
            try:
                found.append(pipeline.estimate(model, cluster, batch, t, p, microbatch))
            except ValueError:
                continue
    return found


def fastest(plans, fits=lambda e: e.fits, key=lambda e: e.step_s):
    return min((e for e in plans if fits(e)), key=key, default=None)


MISTAKES = {
    "the first plan that fits": lambda m, c, b, mb=1: next((e for e in plans_of(m, c, b, mb) if e.fits), None),
    "only powers of two for t": lambda m, c, b, mb=1: fastest(plans_of(m, c, b, mb, ts=[1, 2, 4, 8, 16, 32, 64])),
    "memory ignored": lambda m, c, b, mb=1: fastest(plans_of(m, c, b, mb), fits=lambda e: True),
    "memory below the limit, not at most": lambda m, c, b, mb=1: fastest(
        plans_of(m, c, b, mb), fits=lambda e: e.memory_bytes < c.memory_bytes),
    "t kept inside a node": lambda m, c, b, mb=1: fastest(plans_of(m, c, b, mb, ts=range(1, c.gpus_per_node + 1))),
    "t dividing the node": lambda m, c, b, mb=1: fastest(
        plans_of(m, c, b, mb, ts=[t for t in range(1, c.gpus_per_node + 1) if c.gpus_per_node % t == 0])),
    "p below the layers": lambda m, c, b, mb=1: fastest(plans_of(m, c, b, mb, ps=range(1, max(2, m.layers)))),
    "t from 2": lambda m, c, b, mb=1: fastest(plans_of(m, c, b, mb, ts=range(2, c.gpus + 1))),
    "ranked by compute": lambda m, c, b, mb=1: fastest(plans_of(m, c, b, mb), key=lambda e: e.compute_s),
    "ranked without the data-parallel term": lambda m, c, b, mb=1: fastest(
        plans_of(m, c, b, mb), key=lambda e: e.step_s - e.data_parallel_s),
    "microbatch not passed on": lambda m, c, b, mb=1: fastest(plans_of(m, c, b, 1)),
    "an Estimate of its own making": lambda m, c, b, mb=1: (lambda e: e and dataclasses.replace(e, d=e.d + 1))(
        fastest(plans_of(m, c, b, mb))),
}


def named(search):
    """``search(m, c, b, mb)`` with best_plan's parameter names (the grader passes them by keyword too)."""
    def best_plan(model, cluster, batch, microbatch=1):
        return search(model, cluster, batch, microbatch)

    return best_plan


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_of_best_plans_own_fails_both_runs(mistake, student):
    student("best_plan", named(MISTAKES[mistake]))
    for seed in SEEDS:
        for pieces in RUNS:
            assert failure(pieces, seed), (mistake, pieces, seed)


def test_a_cache_by_model_name_fails_both_runs(student):
    from minitorch import pipeline

    right, cache = pipeline.best_plan, {}
    student("best_plan", named(lambda m, c, b, mb: cache.setdefault(m.name, right(m, c, b, mb))))
    for pieces in RUNS:
        assert failure(pieces, SEEDS[0]), pieces
        cache.clear()


def memoised(function):
    """``function`` with its results cached on the repr of its arguments: the same object again."""
    cache = {}

    def cached(*args, **kwargs):
        key = repr((args, sorted(kwargs.items())))
        if key not in cache:
            cache[key] = function(*args, **kwargs)
        return cache[key]

    return cached


def test_a_memoised_best_plan_fails_both_runs(student):
    """The own run asks a search again (the same Estimate object comes back); the stand-in run asks
    the same arguments with another module estimate (the kept answer is the other table's)."""
    from minitorch import pipeline

    right = pipeline.best_plan
    for seed in SEEDS:
        student("best_plan", named(memoised(lambda m, c, b, mb: right(m, c, b, mb))))
        own, graders = failure("own", seed), failure("grader", seed)
        assert own and "returned the very Estimate object that an earlier call returned" in own, own
        assert graders, seed


def test_a_memoised_estimate_costs_best_plan_nothing(student):
    """A correct best_plan over an estimate that hands out kept results fails the own run (the same
    object comes back), and passes with the grader's estimate: the mistake is 5.1's."""
    from minitorch import pipeline

    student("estimate", memoised(pipeline.estimate))
    assert failure("own", SEEDS[0])
    assert failure("grader", SEEDS[0]) is None


def test_raising_when_nothing_fits_fails_with_the_call(student):
    from minitorch import pipeline

    right = pipeline.best_plan

    def raises(model, cluster, batch, microbatch=1):
        found = right(model, cluster, batch, microbatch)
        if found is None:
            raise ValueError("no plan fits")
        return found

    student("best_plan", raises)
    for pieces in RUNS:
        with pytest.raises(ValueError, match="no plan fits"):
            run_best_plan(pieces)


def test_the_messages_name_the_call_and_the_fastest_plan(student):
    student("best_plan", named(MISTAKES["memory below the limit, not at most"]))
    own, graders = failure("own", 0), failure("grader", 0)
    assert "best_plan(Model(layers=4, hidden=768" in own and "the fastest valid plan that fits is t = 4, p = 2" in own
    assert "with the grader's estimate in place of yours [at the limit]" in graders
    assert "68,719,476,736 bytes" in graders  # the target at exactly the limit


# ---------------------------------------------------------------- one mistake, one criterion


def test_a_wrong_estimate_fails_the_own_run_only(student):
    from minitorch import pipeline

    right = pipeline.estimate
    student("estimate", lambda *args, **kwargs: dataclasses.replace(right(*args, **kwargs), activation_bytes=0.0))
    assert failure("own", SEEDS[0])
    assert failure("grader", SEEDS[0]) is None


def brute_force_best_plan(model, cluster, batch, microbatch=1):
    """Right, in another shape: every t and p tried, invalid ones skipped by their ValueError,
    its own memory test, ties to the larger t."""
    found = plans_of(model, cluster, batch, microbatch)
    fitting = sorted((e for e in found if e.state_bytes + e.activation_bytes <= cluster.memory_bytes),
                     key=lambda e: (e.step_s, -e.t))
    return fitting[0] if fitting else None


def by_keywords_best_plan(model, cluster, batch, microbatch=1):
    """Right, in another shape: estimate called with every argument by name."""
    from minitorch import pipeline

    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1 or isinstance(microbatch, bool) \
            or not isinstance(microbatch, int) or microbatch < 1:
        raise ValueError("batch and microbatch must be ints >= 1")
    plans = []
    for t in range(1, cluster.gpus + 1):
        for p in range(1, model.layers + 1):
            if cluster.gpus % (t * p) == 0 and model.layers % p == 0 and model.heads % t == 0 \
                    and batch % (cluster.gpus // (t * p) * microbatch) == 0:
                plans.append(pipeline.estimate(model=model, cluster=cluster, batch=batch, t=t, p=p, microbatch=microbatch))
    return fastest(plans)


@pytest.mark.parametrize("variant", [brute_force_best_plan, by_keywords_best_plan])
def test_correct_code_written_another_way_passes_both_runs(variant, student):
    student("best_plan", variant)
    for seed in SEEDS:
        for pieces in RUNS:
            assert failure(pieces, seed) is None, (pieces, seed)


def test_a_students_own_helper_passes_the_own_run(student):
    """best_plan calling the student's own helper instead of the module's ``estimate`` keeps the
    criterion whenever that estimate is right (the own run); only the stand-in run needs the lookup."""
    from minitorch import pipeline

    helper = pipeline.estimate

    def with_helper(model, cluster, batch, microbatch=1):
        if isinstance(batch, bool) or not isinstance(batch, numbers.Integral) or batch < 1 or microbatch < 1:
            raise ValueError("batch and microbatch must be ints >= 1")
        plans = []
        for t in range(1, math.gcd(cluster.gpus, model.heads) + 1):
            for p in range(1, model.layers + 1):
                try:
                    plans.append(helper(model, cluster, batch, t, p, microbatch))
                except ValueError:
                    pass
        return fastest(plans)

    student("best_plan", with_helper)
    assert failure("own", SEEDS[0]) is None
    assert failure("grader", SEEDS[0])


# ---------------------------------------------------------------- 5.2-arguments


def arguments_failure() -> str | None:
    try:
        observe_and_judge("problem5.arguments:best_plan", None, 0)
    except Fail as error:
        return str(error)
    return None


def test_answer_key_passes_arguments():
    assert arguments_failure() is None


@pytest.mark.parametrize("mistake, check, match", [
    ("bools accepted", lambda v: isinstance(v, int) and v >= 1, "with batch=True returned"),
    ("numpy integers accepted", lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1,
     "numpy.int64"),
    ("zero accepted", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "batch=0 returned"),
    ("no check at all", lambda v: True, "returned|raised TypeError"),
])
def test_argument_checks_that_let_through_what_the_contract_rejects_lose_arguments(mistake, check, match, student):

    def lenient(model, cluster, batch, microbatch=1):
        if not all(check(v) for v in (batch, microbatch)):
            raise ValueError("not an int >= 1")
        return "searched"

    student("best_plan", lenient)
    assert re.search(match, arguments_failure()), mistake


def test_assert_instead_of_value_error_loses_arguments_only_for_best_plan(student):
    from minitorch import pipeline

    right = pipeline.best_plan

    def asserts(*args, **kwargs):
        try:
            return right(*args, **kwargs)
        except ValueError as error:
            raise AssertionError(str(error)) from None

    student("best_plan", asserts)
    assert "raised AssertionError; expected ValueError at the call" in arguments_failure()
    assert observe_and_judge("problem5.arguments:estimate", None, 0) is None


def test_rejecting_valid_arguments_loses_arguments(student):
    student("best_plan", lambda *args, **kwargs: (_ for _ in ()).throw(ValueError("always")))
    assert "are inside the contract (ints >= 1)" in arguments_failure()


def test_a_cache_consulted_before_the_checks_loses_arguments(student):
    """batch=True answered from the kept batch=1 call (a copy: never the same object twice)."""
    from minitorch import pipeline

    right, kept = pipeline.best_plan, {}

    def cached(model, cluster, batch, microbatch=1):
        arguments = (repr(model), repr(cluster), batch, microbatch)
        if arguments not in kept:
            kept[arguments] = right(model, cluster, batch, microbatch)
        return None if kept[arguments] is None else dataclasses.replace(kept[arguments])

    student("best_plan", cached)
    assert "with batch=True, right after a valid call equal to it returned" in arguments_failure()
