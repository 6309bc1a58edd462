"""The Problem 4.1 and 4.2 grader checks, in process: the answer key passes, wrong variants fail.

Each wrong variant replaces one function of the student module (monkeypatch) and must fail
the criterion it targets with a message that says what went wrong.
"""
from __future__ import annotations

import functools
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from grading_helpers import observe_and_judge

from grader.checks.judging import Fail, Malformed, observed
from grader.checks.problem4.expected_orders import reference_interleaved
from grader.checks.problem4.one_f_one_b import observe as one_f_one_b_observe
from grader.checks.problem4.one_f_one_b.judge import judge_makespan
from grader.child import plain_copy
from grader.layout import REPOSITORY
from grader.rubric import load_rubric
from minitorch.schedules import Action

SEED = 1234
CHECKS = {  # criterion -> check
    "4.1-makespan": "problem4.one_f_one_b:makespan", "4.1-peak-in-flight": "problem4.one_f_one_b:peak",
    "4.1-arguments": "problem4.one_f_one_b:arguments", "4.2-interleaved": "problem4.interleaved:schedule",
    "4.2-arguments": "problem4.interleaved:arguments",
}


def answer(name):
    """A function of the answer key's student module (the module the checks import)."""
    from minitorch import pipeline

    return getattr(pipeline, name)


def run_check(criterion, seed=SEED, pieces="own"):
    """The check along the grader's path (observe, plain data, save/load, judge)."""
    observe_and_judge(CHECKS[criterion], None, seed, {"pieces": pieces})


def fails(criterion, match, pieces="own"):
    with pytest.raises(Fail, match=match):
        run_check(criterion, pieces=pieces)


@pytest.fixture
def student(monkeypatch):
    from minitorch import pipeline

    return lambda attribute, value: monkeypatch.setattr(pipeline, attribute, value)


@pytest.mark.parametrize("criterion", list(CHECKS))
@pytest.mark.parametrize("seed", [0, SEED])
def test_answer_key_passes(criterion, seed):
    run_check(criterion, seed)


def test_rubric_names_these_checks_and_problem_4_totals_18():
    criteria = [c for c in load_rubric().criteria if c.problem.startswith("4.")]
    assert sum(c.points for c in criteria) == 18
    assert {c.id: c.check for c in criteria if c.id in CHECKS} == CHECKS
    assert {c.id: c.fallback for c in criteria if c.fallback} == {
        "4.2-interleaved": "one_f_one_b", "4.2-arguments": "one_f_one_b",
        "4.4-train-step": "one_f_one_b and interleaved_one_f_one_b"}


@pytest.mark.parametrize("criterion", list(CHECKS))
def test_stub_raises_not_implemented(criterion, student):
    def stub(*args, **kwargs):
        raise NotImplementedError("Problem 4.x")

    for attribute in ("one_f_one_b", "interleaved_one_f_one_b"):
        student(attribute, stub)
    with pytest.raises(NotImplementedError):
        run_check(criterion)


# ---------------------------------------------------------------- 4.1


def one_f_one_b_with_warmup(warmup_of):
    def schedule(num_stages, num_microbatches):
        rows = []
        for d in range(num_stages):
            warmup = max(0, min(warmup_of(num_stages, d), num_microbatches))
            row = [Action(d, "F", m) for m in range(warmup)]
            for m in range(num_microbatches - warmup):
                row += [Action(d, "F", warmup + m), Action(d, "B", m)]
            rows.append(row + [Action(d, "B", m) for m in range(num_microbatches - warmup, num_microbatches)])
        return rows

    return schedule


def test_warmup_one_too_many_fails_peak(student):
    student("one_f_one_b", one_f_one_b_with_warmup(lambda k, d: k - d))
    fails("4.1-peak-in-flight", r"device 0 holds up to \d+ microbatches.*min\(K - d, M\)")
    run_check("4.1-makespan")  # as fast as GPipe: only the memory is wrong


def test_warmup_too_short_fails_makespan(student):
    student("one_f_one_b", one_f_one_b_with_warmup(lambda k, d: k - d - 2))
    fails("4.1-makespan", r"one step takes .* GPipe's takes \(M \+ K - 1\)\(F \+ B\)")


def test_gpipe_order_fails_peak(student):
    def gpipe(num_stages, num_microbatches):
        return [[Action(d, "F", m) for m in range(num_microbatches)] + [Action(d, "B", m) for m in range(num_microbatches)]
                for d in range(num_stages)]

    student("one_f_one_b", gpipe)
    fails("4.1-peak-in-flight", "holds up to")


def test_missing_backward_fails_as_invalid(student):
    one_f_one_b = answer("one_f_one_b")

    student("one_f_one_b", lambda k, m: [row[:-1] if d == 0 else row for d, row in enumerate(one_f_one_b(k, m))])
    fails("4.1-makespan", r"is not a valid schedule: device 0: missing B")


@pytest.mark.parametrize("kind, seen", [
    (tuple, r"each action must be Action .*; got tuple"),
    (lambda a: Action(float(a.stage), a.kind, a.microbatch), r"stage and microbatch must be int .*; got float, int"),
    (lambda a: Action(a.stage, a.kind, np.int64(a.microbatch)), r"stage and microbatch must be int .*; got int, numpy.int64"),
])
def test_actions_of_another_kind_fail_makespan_only(student, kind, seen):
    """Tuples, float or numpy stages: the simulator and printers need the contract's Action of ints."""
    one_f_one_b = answer("one_f_one_b")
    student("one_f_one_b", lambda k, m: [[kind(a) for a in row] for row in one_f_one_b(k, m)])
    fails("4.1-makespan", r"one_f_one_b\(1, 1\): " + seen)
    run_check("4.1-peak-in-flight")  # the order is right: only the kinds are wrong


def test_rows_as_tuples_fail_makespan(student):
    one_f_one_b = answer("one_f_one_b")
    student("one_f_one_b", lambda k, m: [tuple(row) for row in one_f_one_b(k, m)])
    fails("4.1-makespan", r"each device's row must be list .*; got tuple")


def test_a_cache_returning_the_same_list_fails_makespan(student):
    student("one_f_one_b", functools.lru_cache(maxsize=None)(answer("one_f_one_b")))
    fails("4.1-makespan", r"one_f_one_b\(4, 8\) called twice returns the same list both times")


def test_a_cache_of_deep_copies_passes(student):
    import copy

    cached = functools.lru_cache(maxsize=None)(answer("one_f_one_b"))
    student("one_f_one_b", lambda k, m: copy.deepcopy(cached(k, m)))
    run_check("4.1-makespan")


def test_a_cache_keyed_on_k_alone_fails(student):
    one_f_one_b, cache = answer("one_f_one_b"), {}
    student("one_f_one_b", lambda k, m: [list(row) for row in cache.setdefault(k, one_f_one_b(k, m))])
    fails("4.1-makespan", r"one_f_one_b\(\d, \d+\) is not a valid schedule")


@pytest.mark.parametrize("kind, label", [(bool, r"\(True, 4\): K is a bool, expected ValueError at the call; it returned"),
                                         (str, r"\('4', 8\): K is a string, expected ValueError at the call; it returned")])
def test_bools_or_strings_accepted_fail_arguments(student, kind, label):
    one_f_one_b = answer("one_f_one_b")

    def lenient(k, m):
        return one_f_one_b(int(k), int(m)) if isinstance(k, kind) or isinstance(m, kind) else one_f_one_b(k, m)

    student("one_f_one_b", lenient)
    fails("4.1-arguments", label)


def test_numpy_integers_accepted_fail_arguments(student):
    one_f_one_b = answer("one_f_one_b")
    student("one_f_one_b", lambda k, m: one_f_one_b(*(int(n) if isinstance(n, np.integer) else n for n in (k, m))))
    fails("4.1-arguments", r"\(numpy.int64\(4\), 8\): K is a numpy integer .* expected ValueError at the call; it returned")


def test_assert_instead_of_value_error_fails_arguments(student):
    one_f_one_b = answer("one_f_one_b")

    def asserting(k, m):
        assert type(k) is int and type(m) is int and k >= 1 and m >= 1, "bad sizes"
        return one_f_one_b(k, m)

    student("one_f_one_b", asserting)
    fails("4.1-arguments", r"one_f_one_b\(0, 4\): K = 0, expected ValueError at the call; got AssertionError: bad sizes")


def test_a_forged_observation_that_leaves_out_cases_fails():
    observation = one_f_one_b_observe.observe_makespan(SEED, {})
    observation["schedules"] = observation["schedules"][:1]
    with pytest.raises(Malformed, match="asked for 20 cases and got 1"):
        judge_makespan(SEED, {}, observed(plain_copy(observation)))


# ---------------------------------------------------------------- 4.2


def test_interleaved_ignoring_chunks_fails(student):
    one_f_one_b = answer("one_f_one_b")

    student("interleaved_one_f_one_b", lambda k, m, v: one_f_one_b(k, m))
    fails("4.2-interleaved", r"not a valid schedule: device 0: missing 1F0")


def test_interleaved_all_forwards_first_fails_peak(student):
    interleaved_one_f_one_b = answer("interleaved_one_f_one_b")

    def forwards_first(k, m, v):
        rows = interleaved_one_f_one_b(k, m, v)
        return [[a for a in row if a.kind == "F"] + [a for a in row if a.kind == "B"] for row in rows]

    student("interleaved_one_f_one_b", forwards_first)
    fails("4.2-interleaved", r"holds up to .* Megatron-LM's order holds at most")


def test_interleaved_backward_chunks_not_reversed_fails(student):
    interleaved_one_f_one_b = answer("interleaved_one_f_one_b")

    def same_chunk_order(k, m, v):
        rows = interleaved_one_f_one_b(k, m, v)
        return [[Action((v - 1 - a.stage // k) * k + a.stage % k, "B", a.microbatch) if a.kind == "B" else a
                 for a in row] for row in rows]

    student("interleaved_one_f_one_b", same_chunk_order)
    fails("4.2-interleaved", "not a valid schedule: deadlock|one step takes")


def test_interleaved_warmup_that_only_ties_with_instant_transfers_fails(student):
    """K - d - 1 + (v - 1)K warm-up forwards: as fast as Megatron's order and lighter on memory
    with instant transfers, slower as soon as a transfer takes time."""
    def short_warmup(k, m, v):
        result = []
        for d, row in enumerate(reference_interleaved(k, m, v)):
            forwards = [Action(*a) for a in row if a[1] == "F"]
            backwards = [Action(*a) for a in row if a[1] == "B"]
            warmup = min((k - d - 1) + (v - 1) * k if v > 1 else k - d - 1, len(forwards))
            order = forwards[:warmup]
            for i in range(len(forwards) - warmup):
                order += [forwards[warmup + i], backwards[i]]
            result.append(order + backwards[len(forwards) - warmup:])
        return result

    student("interleaved_one_f_one_b", short_warmup)
    fails("4.2-interleaved", r"with a transfer delay of 0.5 units .* Megatron-LM's order takes .* With instant "
                             r"transfers the two tie")


def test_interleaved_returning_tuples_fails(student):
    interleaved_one_f_one_b = answer("interleaved_one_f_one_b")
    student("interleaved_one_f_one_b", lambda k, m, v: [[tuple(a) for a in row] for row in interleaved_one_f_one_b(k, m, v)])
    fails("4.2-interleaved", r"interleaved_one_f_one_b\(1, 1, 1\): each action must be Action")


def test_interleaved_cache_returning_the_same_list_fails(student):
    student("interleaved_one_f_one_b", functools.lru_cache(maxsize=None)(answer("interleaved_one_f_one_b")))
    fails("4.2-interleaved", r"interleaved_one_f_one_b\(4, 8, 2\) called twice returns the same list")


def test_v1_without_the_multiple_rule_fails_arguments(student):
    interleaved_one_f_one_b, one_f_one_b = answer("interleaved_one_f_one_b"), answer("one_f_one_b")

    student("interleaved_one_f_one_b", lambda k, m, v: one_f_one_b(k, m) if v == 1 else interleaved_one_f_one_b(k, m, v))
    fails("4.2-arguments", r"\(4, 6, 1\): M = 6 is not a multiple of K = 4 \(the rule holds for v = 1 too\)")
    run_check("4.2-interleaved")  # valid cases: still full marks on understanding


def test_bad_m_not_raising_fails(student):
    from minitorch import schedules

    student("interleaved_one_f_one_b", lambda k, m, v: schedules.gpipe(k, max(m, 1)))
    fails("4.2-arguments", r"interleaved_one_f_one_b\(4, 6, 2\): M = 6 is not a multiple of K = 4, expected ValueError")


def test_bad_m_raising_for_everything_fails(student):
    def always(k, m, v):
        raise ValueError("no")

    student("interleaved_one_f_one_b", always)
    fails("4.2-arguments", r"interleaved_one_f_one_b\(1, 1, 1\) is valid but raised ValueError")


@pytest.mark.parametrize("function, args", [("one_f_one_b", (2.0, 4)), ("interleaved_one_f_one_b", (4, 8, 0))])
def test_sizes_not_checked_fail_arguments(student, function, args):
    """Checks M % K and sizes < 1 of K and M, but not v, and not whether the sizes are ints."""
    from minitorch import schedules

    def partly_checked(k, m, v=1):
        if k < 1 or m < 1 or m % k and function != "one_f_one_b":
            raise ValueError("bad sizes")
        return schedules.gpipe(int(k), int(m))

    student(function, partly_checked)
    criterion = "4.1-arguments" if function == "one_f_one_b" else "4.2-arguments"
    fails(criterion, re.escape(f"{function}{args}") + ": .* expected ValueError at the call; it returned")


# 4.2's fallback: the student's own one_f_one_b first; the grader's only where that fails.


def b_before_f_on_last_device(schedule_function):
    """``schedule_function`` with the last device's first B moved to the front of its row."""
    def invalid(*arguments):
        schedule = schedule_function(*arguments)
        row = schedule[-1]
        first_b = next(i for i, action in enumerate(row) if action.kind == "B")
        schedule[-1] = [row[first_b], *row[:first_b], *row[first_b + 1:]]
        return schedule

    return invalid


def test_an_invalid_one_f_one_b_costs_4_2_only_with_the_students_own_pieces(student):
    """The answer key's interleaved builder hands v = 1 on to its one_f_one_b: with the
    student's own (invalid) one, 4.2 fails; with the grader's bound in (the fallback), it
    passes, arguments included, and the student's is put back."""
    from minitorch import pipeline

    invalid = b_before_f_on_last_device(answer("one_f_one_b"))
    student("one_f_one_b", invalid)
    fails("4.1-makespan", r"is not a valid schedule")
    fails("4.2-interleaved", r"interleaved_one_f_one_b\(1, 1, 1\) is not a valid schedule")
    run_check("4.2-interleaved", pieces="grader")
    run_check("4.2-arguments", pieces="grader")
    assert pipeline.one_f_one_b is invalid


def test_the_graders_one_f_one_b_raises_as_its_contract_says(student):
    """Bound for 4.2's fallback, the grader's 1F1B raises the contract's ValueError itself,
    so an interleaved builder that leaves the argument checks to it passes 4.2-arguments."""
    from minitorch import pipeline

    interleaved, one_f_one_b = answer("interleaved_one_f_one_b"), answer("one_f_one_b")

    def delegating(k, m, v):
        if type(v) is not int or v < 1:
            raise ValueError("v must be an int >= 1")
        if v == 1 and type(k) is int and type(m) is int and k >= 1 and m % k:
            raise ValueError("M must be a multiple of K")
        return pipeline.one_f_one_b(k, m) if v == 1 else interleaved(k, m, v)

    student("interleaved_one_f_one_b", delegating)
    student("one_f_one_b", lambda k, m: one_f_one_b(int(k), int(m)))  # its own accepts bools
    fails("4.2-arguments", r"\(1, True, 1\): M is a bool")
    run_check("4.2-arguments", pieces="grader")


def test_megatrons_all_forwards_first_at_m_equal_k_passes(student):
    """Megatron-LM (releases with the rule) runs every forward first when M == K: a faithful
    port keeps 4.2; the same order at M = 2K holds too much and fails."""
    interleaved_one_f_one_b = answer("interleaved_one_f_one_b")

    def megatron(k, m, v, rule=lambda k, m: m == k):
        rows = interleaved_one_f_one_b(k, m, v)
        if not rule(k, m):
            return rows
        return [[a for a in row if a.kind == "F"] + [a for a in row if a.kind == "B"] for row in rows]

    student("interleaved_one_f_one_b", megatron)
    run_check("4.2-interleaved")
    run_check("4.2-interleaved", seed=0)
    student("interleaved_one_f_one_b", lambda k, m, v: megatron(k, m, v, rule=lambda k, m: m == 2 * k))
    fails("4.2-interleaved", r"interleaved_one_f_one_b\(1, 2, 4\): device 0 holds up to 2 .* Megatron-LM's order holds at most 1")


def test_a_4_2_child_holds_no_interleaved_order():
    """The fallback binds the grader's one_f_one_b in the student's module; whatever the
    student's interleaved builder reaches from it (its globals, the modules a 4.2 child
    imports) holds no interleaved order: 4.2's answer is not in the child to take."""
    script = ("import importlib, json, sys\n"
              "for name in ['grader.child', 'grader.checks.problem4.interleaved.observe']: importlib.import_module(name)\n"
              "from grader.checks.problem4.interleaved import observe\n"
              "piece_globals = sorted(observe.grader_one_f_one_b.__globals__)\n"
              "print(json.dumps([sorted(m for m in sys.modules if m.startswith('grader.')), piece_globals]))")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPOSITORY, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    modules, piece_globals = json.loads(done.stdout)
    assert "grader.checks.problem4.pieces" in modules
    assert not [m for m in modules if m.endswith(("expected_orders", "interleaved_piece")) or "judge" in m]
    assert not [name for name in piece_globals if "interleav" in name.lower() or "megatron" in name.lower()]


def test_the_4_4_interleaved_piece_is_megatrons_order_for_every_size_4_4_asks():
    from grader.checks.problem4.train_step import stages
    from grader.checks.problem4.train_step.interleaved_piece import ORDERS, grader_interleaved

    asked = {stages.schedule_call(case.devices, case.chunks, m) for case in stages.CASES for m in case.sizes()}
    interleaved = {arguments for function, arguments in asked if function == "interleaved_one_f_one_b"}
    assert interleaved == set(ORDERS)
    for sizes in interleaved:
        assert [[tuple(a) for a in row] for row in grader_interleaved(*sizes)] == reference_interleaved(*sizes)
    with pytest.raises(ValueError):
        grader_interleaved(2, 3, 2)
