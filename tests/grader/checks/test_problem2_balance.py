"""The 2.4 checks (grader/checks/problem2/balance/), in process along the grader's path: each wrong
balance_stages fails the criterion of its mistake (a convention only 2.4-arguments), and any
optimal split passes."""
from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import pytest
from problem2_helpers import fails, patcher, run

from grader.checks.problem2.balance.expected import exact_costs, least_slowest_stage


@pytest.fixture
def student(monkeypatch):
    return patcher(monkeypatch)


@pytest.fixture
def right():
    from minitorch import pipeline

    return pipeline.balance_stages


def only_arguments_fail(match: str) -> None:
    fails("balance_arguments", match)
    run("balance")


def greedy_balance(costs, num_stages):
    """Fill each stage up to the average: the realistic wrong answer."""
    costs = list(costs)
    target, sizes, total = sum(costs) / num_stages, [], 0.0
    for index, cost in enumerate(costs):
        if sizes and len(sizes) < num_stages and total + cost > target and len(costs) - index >= num_stages - len(sizes):
            sizes.append(0)
            total = 0.0
        if not sizes:
            sizes.append(0)
        sizes[-1] += 1
        total += cost
    while len(sizes) < num_stages:  # too few stages filled: split the largest
        largest = sizes.index(max(sizes))
        sizes[largest:largest + 1] = [sizes[largest] - 1, 1]
    return sizes


def even_split(costs, num_stages):
    size, extra = divmod(len(list(costs)), num_stages)
    return [size + (stage < extra) for stage in range(num_stages)]


@pytest.mark.parametrize("wrong", [greedy_balance, even_split], ids=lambda f: f.__name__)
def test_a_balance_that_is_not_optimal_fails_only_the_balance(student, right, wrong):
    def balance_stages(costs, k):
        costs = list(costs)
        right(costs, k)  # the contract's argument checks
        return wrong([float(c) for c in costs], int(k))

    student("balance_stages", balance_stages)
    fails("balance", "the least possible is")
    run("balance_arguments")  # the same wrong split for every kind of costs: the conventions hold


def test_an_empty_stage_fails_the_balance(student, right):
    student("balance_stages", lambda costs, k: [0, *right(costs, k - 1)] if k > 1 else right(costs, k))
    fails("balance", "at least one layer each")


def test_any_optimal_split_passes(student, right):
    student("balance_stages", lambda costs, k: right(list(costs)[::-1], k)[::-1])  # the mirror image: other ties
    run("balance")
    run("balance_arguments")


def searched(tolerance: float):
    """A binary search on the limit that stops when the bounds are ``tolerance`` apart: right at
    the lecture's scale, endless on FLOPs (1e12: no two floats there are 1e-6 apart), and early
    on seconds (1e-6: it stops before it starts)."""
    def balance_stages(costs, num_stages):
        costs = list(costs)
        low, high = max(costs), sum(costs)
        while high - low > tolerance:
            middle = (low + high) / 2
            stages, total = 1, 0.0
            for cost in costs:
                if total + cost > middle:
                    stages, total = stages + 1, 0.0
                total += cost
            low, high = (middle, high) if stages > num_stages else (low, middle)
        sizes, total = [0], 0.0
        for index, cost in enumerate(costs):
            if sizes[-1] and (total + cost > high or len(costs) - index <= num_stages - len(sizes)):
                sizes.append(0)
                total = 0.0
            sizes[-1] += 1
            total += cost
        return sizes
    return balance_stages


def test_an_absolute_tolerance_fails_on_costs_of_other_scales(student):
    student("balance_stages", searched(1e-6))
    fails("balance", r"was still running after 1 s of CPU time|the least possible is")


def test_a_cache_keyed_on_the_sizes_fails_the_balance(student, right):
    cache: dict = {}

    def balance_stages(costs, num_stages):
        costs = list(costs)
        key = (len(costs), num_stages)
        if key not in cache:
            cache[key] = right(costs, num_stages)
        return list(cache[key])

    student("balance_stages", balance_stages)
    fails("balance", r"balance_stages\(\[3.3, 1, 1, 1, 1, 1, 1, 1\], 4\) \(case 1\) returned \[\d, \d, \d, \d\]: its slowest stage")


def test_a_cache_keyed_on_the_callers_list_object_fails_the_balance(student, right):
    cache: dict = {}

    def balance_stages(costs, num_stages):
        key = (id(costs), num_stages)
        if key not in cache:
            cache[key] = (costs, right(costs, num_stages))  # the list kept alive: its id is not reused
        return list(cache[key][1])

    student("balance_stages", balance_stages)
    fails("balance", "called again with the same list object, its costs now reversed")


def test_a_cache_handing_out_its_own_list_fails_only_the_arguments(student, right):
    @functools.cache
    def cached(costs, num_stages):
        return right(list(costs), num_stages)

    student("balance_stages", lambda costs, k: cached(tuple(costs), k))
    fails("balance_arguments", "called twice returned the same list object both times")


def test_sorting_the_callers_costs_fails_only_the_arguments(student, right):
    def balance_stages(costs, k):
        sizes = right(costs, k)
        if isinstance(costs, list):
            costs.sort()
        return sizes

    student("balance_stages", balance_stages)
    only_arguments_fail("changed the caller's costs")


def test_a_type_error_for_a_string_cost_fails_only_the_arguments(student, right):
    def balance_stages(costs, k):
        costs = list(costs)
        if any(isinstance(c, str) for c in costs):
            raise TypeError("costs must be numbers")
        return right(costs, k)

    student("balance_stages", balance_stages)
    only_arguments_fail(r"balance_stages\(\['1', 2\], 1\) raised TypeError: costs must be numbers; expected ValueError")


@pytest.mark.parametrize("kind, match", [(tuple, "returned a tuple; expected a new list"),
                                         (float, r"returned sizes of type float"),
                                         (np.int64, r"returned sizes of type int64")])
def test_results_of_another_type_fail_only_the_arguments(student, right, kind, match):
    student("balance_stages", lambda costs, k: tuple(right(costs, k)) if kind is tuple else [kind(n) for n in right(costs, k)])
    only_arguments_fail(match)


def test_costs_measured_twice_fail_on_a_generator_and_only_the_arguments(student, right):
    def balance_stages(costs, k):
        if len(list(costs)) < k:  # consumes a generator: the right split of nothing raises
            raise ValueError("more stages than layers")
        return right(costs, k)

    student("balance_stages", balance_stages)
    only_arguments_fail(r"as a generator, 3\) raised ValueError: .*; the contract admits it")


def test_numpy_numbers_refused_fail_only_the_arguments(student, right):
    def balance_stages(costs, k):
        costs = list(costs)
        if any(type(c) not in (int, float) for c in costs) or type(k) is not int:
            raise ValueError("costs must be ints or floats")
        return right(costs, k)

    student("balance_stages", balance_stages)
    only_arguments_fail(r"as a numpy.float64 array, 2\) raised ValueError: costs must be ints or floats; the contract admits it")


def test_a_cache_hit_that_skips_the_argument_checks_fails_only_the_arguments(student, right):
    """[1, True, 2] == [1, 1, 2] and 2.0 == 2, hashes included."""
    cache: dict = {}

    def balance_stages(costs, k):
        costs = list(costs)
        key = (tuple(costs), k)
        if key not in cache:
            cache[key] = right(costs, k)
        return list(cache[key])

    student("balance_stages", balance_stages)
    only_arguments_fail(r"balance_stages\(\[1, True, 2\], 2\) returned \[2, 1\]; expected ValueError .* also right after")


def test_the_judges_optimum_on_the_lecture_case():
    exact, scale = exact_costs([1] * 7 + [3.3])
    least, split = least_slowest_stage(exact, 4)
    assert Fraction(least, scale) == Fraction(3.3) and sum(split) == 8 and len(split) == 4
    assert least_slowest_stage(exact_costs([0, 0, 0])[0], 3) == (0, [1, 1, 1])
    exact, scale = exact_costs([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert least_slowest_stage(exact, 3) == (17 * scale, [5, 2, 2])  # 15, 13, 17
