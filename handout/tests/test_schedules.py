"""Public tests for Problem 4 (1F1B, interleaved 1F1B, activation recomputation, training
with your own schedule).

Run one problem with ``pytest -m problem_4_1`` (or ``problem_4_2``, ``problem_4_3``,
``problem_4_4``). Schedules are checked by running them through the provided simulator
(``minitorch.schedules.simulate``), with instant transfers and with a delay on every
transfer; recomputation against the plain run of the same layers; ``train_step`` against
the same model run without a pipeline. Every failure names the promise of the docstring it
broke, the case, and what was expected. On the starter kit every test here fails with
NotImplementedError. ``@pytest.mark.criterion(...)`` names the grader's criteria whose kind
of mistake a test catches; the grader tries more cases of the same promises.
"""
import contextlib
import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F

from minitorch import schedules
from minitorch.executor import StepReport
from minitorch.pipeline import checkpoint_sequential, interleaved_one_f_one_b, one_f_one_b, run_layers, train_step
from minitorch.runtime import StageWorkers


def simulated(schedule, call, t_b=2.0, t_comm=0.0, **sizes):
    """The simulator's timeline of ``schedule``, or a failure naming the call and the problem."""
    try:
        return schedules.simulate(schedule, 1.0, t_b, t_comm=t_comm, **sizes)
    except ValueError as error:
        pytest.fail(f"{call} is not a valid schedule: {error}")


def picture(timeline):
    return "\nyour schedule, simulated (F = 1 unit, B = 2):\n" + schedules.render_ascii(timeline, width=200)


def check_new_lists_of_actions(function, arguments):
    """``function(*arguments)`` returns a new list of lists of ``Action`` with int stage and
    microbatch, and a second call, after the caller emptied the first result, returns the
    same schedule again."""
    call = f"{function.__name__}{arguments!r}"
    first = function(*arguments)
    assert type(first) is list and all(type(row) is list for row in first), (
        f"{call}: expected a new list with one list per device; got {type(first).__name__} of "
        f"{sorted({type(row).__name__ for row in first})}")
    for device, row in enumerate(first):
        for step, action in enumerate(row):
            kinds = (type(action).__name__, type(action[0]).__name__, type(action[2]).__name__)
            assert kinds == ("Action", "int", "int"), (
                f"{call}[{device}][{step}]: expected Action(stage, kind, microbatch) with int stage and microbatch "
                f"(minitorch.schedules.Action); got {action!r}, a {kinds[0]} with a {kinds[1]} stage and a {kinds[2]} "
                "microbatch")
    kept = copy.deepcopy(first)
    for row in first:
        row.clear()
    first.clear()
    again = function(*arguments)
    assert again == kept, (
        f"{call} called again, after the caller emptied the lists the first call returned, returned {again!r:.120}; "
        f"expected the same schedule as the first time: each call returns new lists")


def call_valid_twin(function, args):
    """Call ``function`` with the valid arguments equal to ``args`` (2.0 == 2, True == 1,
    numpy.int64(4) == 4) first, when there are such: a cache keyed on equal values must not
    answer the bad call without checking it."""
    try:
        twin = tuple(int(value) for value in args)
    except (TypeError, ValueError):
        return
    if all(value >= 1 for value in twin) and (len(twin) < 3 or twin[1] % twin[0] == 0):
        function(*twin)


def raises_value_error(call, text, wrong):
    try:
        call()
    except ValueError:
        return
    except Exception as error:  # noqa: BLE001 - reported: the convention is ValueError
        pytest.fail(f"{text}: {wrong}, expected ValueError at the call; got {type(error).__name__}: {error}")
    pytest.fail(f"{text}: {wrong}, expected ValueError at the call; it returned")


# ---------------------------------------------------------------- Problem 4.1

LECTURE_1F1B_K4_M8 = """\
device 0 |F0F1F2F3············B0B0F4B1B1F5B2B2F6B3B3F7B4B4··B5B5··B6B6··B7B7|
device 1 |··F0F1F2········B0B0F3B1B1F4B2B2F5B3B3F6B4B4F7B5B5··B6B6··B7B7····|
device 2 |····F0F1····B0B0F2B1B1F3B2B2F4B3B3F5B4B4F6B5B5F7B6B6··B7B7········|
device 3 |······F0B0B0F1B1B1F2B2B2F3B3B3F4B4B4F5B5B5F6B6B6F7B7B7············|"""

# The lecture's 1F1B order and Megatron-LM's interleaved order, simulated with a transfer
# delay of 0.5 units (F = 1, B = 2): the time one step takes.
ONE_F_ONE_B_WITH_DELAY = {(4, 8): 41.0, (3, 5): 25.0, (2, 2): 10.0}
INTERLEAVED_WITH_DELAY = {(2, 4, 2): 16.5, (4, 8, 2): 35.5, (4, 8, 4): 45.0, (3, 6, 3): 29.0}


@pytest.mark.problem_4_1
@pytest.mark.criterion("4.1-makespan", "4.1-peak-in-flight")
def test_lecture_timeline_k4_m8():
    timeline = simulated(one_f_one_b(4, 8), "one_f_one_b(4, 8)")
    assert schedules.render_ascii(timeline) == LECTURE_1F1B_K4_M8, (
        "one_f_one_b(4, 8) should draw as the lecture's timeline:\n" + LECTURE_1F1B_K4_M8 + picture(timeline))


@pytest.mark.problem_4_1
@pytest.mark.criterion("4.1-makespan", "4.1-peak-in-flight")
@settings(max_examples=40, deadline=None)
@given(num_stages=st.integers(1, 8), num_microbatches=st.integers(1, 20), t_b=st.sampled_from([1.0, 2.0, 3.0]))
def test_valid_as_fast_as_gpipe_and_holds_at_most_k_minus_d(num_stages, num_microbatches, t_b):
    call = f"one_f_one_b({num_stages}, {num_microbatches})"
    schedule = one_f_one_b(num_stages, num_microbatches)
    assert isinstance(schedule, list) and len(schedule) == num_stages, (
        f"{call}: expected a list with one list of actions per device ({num_stages}), got {schedule!r:.200}")
    timeline = simulated(schedule, call, t_b, num_microbatches=num_microbatches, num_chunks=1)
    gpipe = (num_microbatches + num_stages - 1) * (1.0 + t_b)
    assert timeline.makespan == pytest.approx(gpipe, rel=1e-12), (
        f"{call}: one step takes {timeline.makespan:g} units with F = 1, B = {t_b:g}; GPipe's takes "
        f"(M + K - 1)(F + B) = {gpipe:g} and 1F1B must not be slower" + picture(timeline))
    expected = [min(num_stages - d, num_microbatches) for d in range(num_stages)]
    assert timeline.peak_in_flight == expected, (
        f"{call}: peak microbatches held per device {timeline.peak_in_flight}; 1F1B holds min(K - d, M) = {expected}"
        + picture(timeline))


@pytest.mark.problem_4_1
@pytest.mark.criterion("4.1-makespan")
@pytest.mark.parametrize("num_stages, num_microbatches", list(ONE_F_ONE_B_WITH_DELAY))
def test_no_slower_than_the_lecture_order_with_transfer_delays(num_stages, num_microbatches):
    call = f"one_f_one_b({num_stages}, {num_microbatches})"
    timeline = simulated(one_f_one_b(num_stages, num_microbatches), call, t_comm=0.5)
    expected = ONE_F_ONE_B_WITH_DELAY[num_stages, num_microbatches]
    assert timeline.makespan <= expected + 1e-9, (
        f"{call}: with a transfer delay of 0.5 units one step takes {timeline.makespan:g}; the lecture's 1F1B "
        f"order takes {expected:g}. With instant transfers they may tie: your order leaves no room for the "
        "transfers" + picture(timeline))


@pytest.mark.problem_4_1
@pytest.mark.criterion("4.1-makespan")
@pytest.mark.parametrize("num_stages, num_microbatches", [(1, 1), (4, 8), (3, 2)])
def test_one_f_one_b_returns_new_lists_of_actions(num_stages, num_microbatches):
    check_new_lists_of_actions(one_f_one_b, (num_stages, num_microbatches))


@pytest.mark.problem_4_1
@pytest.mark.criterion("4.1-arguments")
@pytest.mark.parametrize("args, wrong", [
    ((0, 4), "K = 0"), ((4, 0), "M = 0"), ((-1, 3), "K < 0"), ((2.0, 4), "K is a float"), ((True, 4), "K is a bool"),
    ((4, False), "M is a bool"), (("4", 8), "K is a string"), ((4, None), "M is None"),
    ((np.int64(4), 8), "K is a numpy integer (Python ints only)"),
])
def test_one_f_one_b_bad_arguments(args, wrong):
    call_valid_twin(one_f_one_b, args)
    raises_value_error(lambda: one_f_one_b(*args), f"one_f_one_b{args!r}", wrong)


# ---------------------------------------------------------------- Problem 4.2


@contextlib.contextmanager
def own_one_f_one_b_or_a_stand_in(num_stages, num_microbatches):
    """Your ``one_f_one_b`` when it returns a valid schedule of new ``Action`` lists for these
    sizes; otherwise (the 4.1 tests say why) a GPipe order stands in for it, so that a 4.2 test
    whose v = 1 your interleaved builder hands on to ``one_f_one_b`` judges 4.2's code alone, as
    the grader does (it puts its own 1F1B there when yours fails)."""
    from minitorch import pipeline

    try:
        check_new_lists_of_actions(pipeline.one_f_one_b, (num_stages, num_microbatches))
        schedules.simulate(pipeline.one_f_one_b(num_stages, num_microbatches))
        yours = True
    except Exception:  # noqa: BLE001 - any failure of 4.1's: the stand-in is used
        yours = False
    with pytest.MonkeyPatch.context() as patch:
        if not yours:
            patch.setattr(pipeline, "one_f_one_b", schedules.gpipe)
        yield


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-interleaved")
@settings(max_examples=40, deadline=None)
@given(num_stages=st.integers(1, 6), groups=st.integers(1, 4), num_chunks=st.integers(1, 4))
def test_interleaved_valid_and_bubble_divided_by_v(num_stages, groups, num_chunks):
    num_microbatches = groups * num_stages
    call = f"interleaved_one_f_one_b({num_stages}, {num_microbatches}, {num_chunks})"
    with own_one_f_one_b_or_a_stand_in(num_stages, num_microbatches):
        schedule = interleaved_one_f_one_b(num_stages, num_microbatches, num_chunks)
    timeline = simulated(schedule, call, num_microbatches=num_microbatches, num_chunks=num_chunks)
    expected = (num_microbatches + (num_stages - 1) / num_chunks) * 3.0
    assert timeline.makespan == pytest.approx(expected, rel=1e-9), (
        f"{call}: one step takes {timeline.makespan:g} units (F = 1, B = 2 per device); the contract says "
        f"(M + (K - 1)/v)(F + B) = {expected:g}" + picture(timeline))


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-interleaved")
@pytest.mark.parametrize("num_stages, num_microbatches, num_chunks", list(INTERLEAVED_WITH_DELAY))
def test_interleaved_no_slower_than_megatron_with_transfer_delays(num_stages, num_microbatches, num_chunks):
    call = f"interleaved_one_f_one_b({num_stages}, {num_microbatches}, {num_chunks})"
    timeline = simulated(interleaved_one_f_one_b(num_stages, num_microbatches, num_chunks), call, t_comm=0.5)
    expected = INTERLEAVED_WITH_DELAY[num_stages, num_microbatches, num_chunks]
    assert timeline.makespan <= expected + 1e-9, (
        f"{call}: with a transfer delay of 0.5 units one step takes {timeline.makespan:g}; Megatron-LM's order "
        f"takes {expected:g}. With instant transfers they may tie: your warm-up leaves no room for the transfers"
        + picture(timeline))


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-interleaved")
def test_interleaved_memory_k4_m8_v2_as_megatron():
    timeline = simulated(interleaved_one_f_one_b(4, 8, 2), "interleaved_one_f_one_b(4, 8, 2)")
    assert timeline.peak_in_flight[0] <= 5.5 + 1e-9, (
        f"interleaved_one_f_one_b(4, 8, 2): device 0 holds up to {timeline.peak_in_flight[0]:g} microbatches' "
        "activations (1/v per chunk); Megatron-LM's order holds 5.5" + picture(timeline))


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-interleaved")
@pytest.mark.parametrize("num_stages, num_microbatches", [(4, 8), (3, 3), (2, 6)])
def test_interleaved_with_one_chunk_is_plain_1f1b(num_stages, num_microbatches):
    call = f"interleaved_one_f_one_b({num_stages}, {num_microbatches}, 1)"
    with own_one_f_one_b_or_a_stand_in(num_stages, num_microbatches):
        timeline = simulated(interleaved_one_f_one_b(num_stages, num_microbatches, 1), call)
    expected = [min(num_stages - d, num_microbatches) for d in range(num_stages)]
    all_forwards_first = [num_microbatches] * num_stages if num_microbatches == num_stages else expected
    assert timeline.peak_in_flight in (expected, all_forwards_first), (
        f"{call}: peak microbatches held per device {timeline.peak_in_flight}; v = 1 is plain 1F1B, which holds "
        f"min(K - d, M) = {expected}" + picture(timeline))


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-interleaved")
def test_interleaved_stage_numbering():
    schedule = interleaved_one_f_one_b(2, 2, 2)
    stages = [sorted({a.stage for a in row}) for row in schedule]
    assert stages == [[0, 2], [1, 3]], (
        f"interleaved_one_f_one_b(2, 2, 2): device d holds stages stage_of(d, chunk, K) = d, d + K; got {stages}")


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-interleaved")
@pytest.mark.parametrize("num_stages, num_microbatches, num_chunks", [(1, 1, 1), (4, 8, 2), (2, 4, 1)])
def test_interleaved_returns_new_lists_of_actions(num_stages, num_microbatches, num_chunks):
    with own_one_f_one_b_or_a_stand_in(num_stages, num_microbatches):
        check_new_lists_of_actions(interleaved_one_f_one_b, (num_stages, num_microbatches, num_chunks))


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-arguments")
@pytest.mark.parametrize("args, wrong", [
    ((4, 6, 2), "M = 6 is not a multiple of K = 4"), ((4, 6, 1), "M = 6 is not a multiple of K = 4 (v = 1 too)"),
    ((4, 8, 0), "v = 0"), ((0, 8, 2), "K = 0"), ((4, 8, 2.0), "v is a float"), ((4, 8, True), "v is a bool"),
    ((4, 8, np.int64(2)), "v is a numpy integer (Python ints only)"),
])
def test_interleaved_bad_arguments(args, wrong):
    call_valid_twin(interleaved_one_f_one_b, args)
    raises_value_error(lambda: interleaved_one_f_one_b(*args), f"interleaved_one_f_one_b{args!r}", wrong)


# ---------------------------------------------------------------- Problem 4.3


def tanh_dropout_layers(num_layers, dropout=0.3, width=12, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    layers = []
    for index in range(num_layers):
        parts = [nn.Linear(width, width, dtype=dtype), nn.Tanh()]
        if dropout and index % 2 == 0:
            parts.append(nn.Dropout(dropout))
        layers.append(nn.Sequential(*parts))
    return layers


def run_and_backward(layers, x, run, rng_seed=1):
    """Output, x.grad and every parameter's grad of ``run(layers, x)`` with loss sum(out^2)."""
    modules = [layer for layer in layers if isinstance(layer, nn.Module)]
    for layer in modules:
        layer.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    torch.manual_seed(rng_seed)
    output = run(layers, x)
    output.pow(2).sum().backward()
    return {"output": output.detach(), "grad of x": x.grad,
            **{f"grad of parameter {i}": p.grad for i, p in enumerate(p for m in modules for p in m.parameters())}}


def assert_bit_identical(plain, mine, case):
    for name, expected in plain.items():
        got = mine[name]
        if expected is None or got is None:
            said = {True: "a gradient", False: "none"}
            assert expected is None and got is None, (
                f"{case}: {name}: the plain run gives {said[expected is not None]}, yours gives {said[got is not None]}")
            continue
        assert got.dtype == expected.dtype and got.shape == expected.shape, (
            f"{case}: {name} has dtype {got.dtype} and shape {list(got.shape)}; the plain run's has {expected.dtype} "
            f"and {list(expected.shape)}")
        # exact: checkpoint_sequential promises the plain run's bits (the same layers on the same shapes, in the same process); the caller's x against its copy; the same backward twice
        assert torch.equal(expected, got), (
            f"{case}: {name} is not bit-identical to the plain run (differs by up to "
            f"{(expected - got).abs().max().item():.3g}); checkpoint_sequential promises the same bits")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
@pytest.mark.parametrize("num_layers, segments", [(9, None), (9, 1), (9, 3), (9, 9), (10, 4)])
def test_bit_identical_to_plain_run_with_dropout(num_layers, segments):
    layers = tanh_dropout_layers(num_layers)
    x = torch.randn(5, 12, dtype=torch.float64)
    plain = run_and_backward(layers, x, run_layers)
    mine = run_and_backward(layers, x, lambda ls, h: checkpoint_sequential(ls, h, segments))
    assert_bit_identical(plain, mine, f"{num_layers} layers with dropout, segments={segments}")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
@pytest.mark.parametrize("case, segments", [("twice in one segment", 1), ("in two segments", 2),
                                            ("a weight of two modules", 2)])
def test_bit_identical_with_a_repeated_module(case, segments):
    """A module may appear twice and modules may share a weight: each use's gradient counts once."""
    layers = tanh_dropout_layers(3)
    if case == "a weight of two modules":
        layers[1][0].weight = layers[0][0].weight  # segments of [0, 1] and [2]: one segment uses it twice
    else:
        layers = [layers[0], layers[0]]
    x = torch.randn(5, 12, dtype=torch.float64)
    plain = run_and_backward(layers, x, run_layers)
    mine = run_and_backward(layers, x, lambda ls, h: checkpoint_sequential(ls, h, segments))
    assert_bit_identical(plain, mine, f"{len(layers)} layers, a module {case}, segments={segments}")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
@pytest.mark.parametrize("case", ["tuple", "ModuleList", "frozen", "no parameters", "float32 1-D", "non-contiguous 3-D",
                                  "second call", "a parameter its forward does not use"])
def test_bit_identical_for_what_the_contract_allows(case):
    layers = tanh_dropout_layers(4, dtype=torch.float32 if "float32" in case else torch.float64)
    x = torch.randn(5, 12, dtype=torch.float64)
    passed = list(layers)
    if case == "a parameter its forward does not use":  # autograd finds no path to it: no gradient
        layers[1].register_parameter("spare", nn.Parameter(torch.randn(12, dtype=torch.float64)))
    elif case == "tuple":
        passed = tuple(layers)
    elif case == "ModuleList":
        passed = nn.ModuleList(layers)
    elif case == "frozen":
        layers[0].requires_grad_(False)
    elif case == "no parameters":
        layers = passed = [nn.Tanh(), nn.Dropout(0.3), nn.Softsign(), nn.Dropout(0.2)]
    elif case == "float32 1-D":
        x = torch.randn(12)
    elif case == "non-contiguous 3-D":
        x = torch.randn(12, 3, 2, dtype=torch.float64).permute(2, 1, 0)
    elif case == "second call":
        checkpoint_sequential(passed, torch.randn(2, 7, 12, dtype=torch.float64, requires_grad=True), 4).sum().backward()
    plain = run_and_backward(layers, x, lambda ls, h: run_layers(passed, h))
    mine = run_and_backward(layers, x, lambda ls, h: checkpoint_sequential(passed, h, 2))
    assert_bit_identical(plain, mine, f"4 layers, segments=2, {case}")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_bit_identical_for_an_input_that_is_not_a_leaf():
    layers = tanh_dropout_layers(4)
    x = torch.randn(5, 12, dtype=torch.float64)
    plain, mine = (run_on_a_non_leaf(layers, x, run)
                   for run in (run_layers, lambda ls, h: checkpoint_sequential(ls, h, 2)))
    assert_bit_identical(plain, mine, "4 layers, segments=2, an input that is an earlier layer's output and retains its "
                                      "gradient (autograd gives it that gradient once)")


def run_on_a_non_leaf(layers, x, run):
    """``run_and_backward`` with ``run`` given an earlier layer's output (``2 * x``: not a
    leaf) that retains its gradient; that gradient is recorded too."""
    given = []

    def on_a_non_leaf(layers, leaf):
        hidden = leaf * 2
        hidden.retain_grad()
        given.append(hidden)
        return run(layers, hidden)

    result = run_and_backward(layers, x, on_a_non_leaf)
    return {**result, "grad of the input (2 * x)": given[0].grad}


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_rng_state_as_after_plain_run():
    layers = tanh_dropout_layers(6)
    x = torch.randn(5, 12, dtype=torch.float64)
    run_and_backward(layers, x, run_layers)
    after_plain = torch.get_rng_state()
    run_and_backward(layers, x, lambda ls, h: checkpoint_sequential(ls, h, 2))
    # exact: checkpoint_sequential promises the plain run's bits (the same layers on the same shapes, in the same process); the caller's x against its copy; the same backward twice
    assert torch.equal(torch.get_rng_state(), after_plain), (
        "6 layers with dropout, segments=2: after forward and backward the global random state differs from the "
        "plain run's; code that draws after the backward must draw the same numbers")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_parameters_get_gradients_when_input_does_not_require_grad():
    layers = tanh_dropout_layers(4, dropout=0)
    x = torch.randn(3, 12, dtype=torch.float64)  # requires_grad False
    checkpoint_sequential(layers, x, 2).sum().backward()
    missing = [i for i, p in enumerate(p for layer in layers for p in layer.parameters()) if p.grad is None]
    assert not missing, f"4 layers, segments=2, an input without grad: parameters {missing} got no gradient"


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
@pytest.mark.parametrize("dtype, layers_need_grad, input_grad", [
    (torch.float32, True, False), (torch.float64, False, False), (torch.float64, False, True)])
def test_output_dtype_and_requires_grad_as_the_plain_run(dtype, layers_need_grad, input_grad):
    layers = tanh_dropout_layers(3, dtype=dtype)
    for layer in layers:
        layer.requires_grad_(layers_need_grad)
    x = torch.randn(4, 12, dtype=dtype, requires_grad=input_grad)
    case = f"3 layers, segments=2, a {dtype} input with requires_grad={input_grad}, parameters requires_grad={layers_need_grad}"
    mine = checkpoint_sequential(layers, x, 2)
    plain = run_layers(layers, x)  # after your call: an x switched to requires_grad is 4.3-caller-unchanged's
    assert (mine.dtype, tuple(mine.shape), mine.requires_grad) == (plain.dtype, tuple(plain.shape), plain.requires_grad), (
        f"{case}: the output has dtype {mine.dtype}, shape {list(mine.shape)}, requires_grad={mine.requires_grad}; the "
        f"plain run's has {plain.dtype}, {list(plain.shape)}, requires_grad={plain.requires_grad}")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_gradients_accumulate_onto_those_already_there():
    layers = tanh_dropout_layers(4)
    x = torch.randn(5, 12, dtype=torch.float64)
    ramp = [torch.linspace(-1, 1, p.numel(), dtype=p.dtype).reshape(p.shape) for layer in layers for p in layer.parameters()]

    def run(run_layers_like):
        for p, start in zip((p for layer in layers for p in layer.parameters()), ramp):
            p.grad = start.clone()
        torch.manual_seed(3)
        run_layers_like(layers, x).pow(2).sum().backward()
        return [p.grad.clone() for layer in layers for p in layer.parameters()]

    plain, mine = run(run_layers), run(lambda ls, h: checkpoint_sequential(ls, h, 2))
    for index, (expected, got) in enumerate(zip(plain, mine)):
        # exact: checkpoint_sequential promises the plain run's bits (the same layers on the same shapes, in the same process); the caller's x against its copy; the same backward twice
        assert torch.equal(expected, got), (
            f"4 layers, segments=2, gradients already there before the backward: parameter {index}'s .grad differs from "
            f"the plain run's by up to {(expected - got).abs().max().item():.3g}; backward adds to the .grad already there")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_autograd_grad_changes_no_grad_and_returns_the_gradients():
    layers = tanh_dropout_layers(4)
    parameters = [p for layer in layers for p in layer.parameters()]
    x = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    plain = torch.autograd.grad(run_layers(layers, x).pow(2).sum(), [x, *parameters])
    torch.manual_seed(3)
    mine = torch.autograd.grad(checkpoint_sequential(layers, x, 2).pow(2).sum(), [x, *parameters], allow_unused=True)
    case = "4 layers, segments=2, gradients taken with torch.autograd.grad"
    touched = [index for index, p in enumerate(parameters) if p.grad is not None]
    assert not touched and x.grad is None, (
        f"{case}: afterwards parameters {touched} (and x: {x.grad is not None}) have a .grad; torch.autograd.grad "
        "changes no .grad")
    for name, expected, got in zip(["x"] + [f"parameter {i}" for i in range(len(parameters))], plain, mine):
        # exact: checkpoint_sequential promises the plain run's bits (the same layers on the same shapes, in the same process); the caller's x against its copy; the same backward twice
        assert got is not None and torch.equal(expected, got), (
            f"{case}: the gradient returned for {name} is {'none' if got is None else 'not bit-identical'}; expected "
            "the plain run's")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_torch_utils_checkpoint_is_not_used(monkeypatch):
    import torch.utils.checkpoint as torch_checkpoint

    def refused(*args, **kwargs):
        pytest.fail("checkpoint_sequential called torch.utils.checkpoint: Problem 4.3 asks for hand-written recomputation")

    for name in ("checkpoint", "checkpoint_sequential"):
        monkeypatch.setattr(torch_checkpoint, name, refused)
    monkeypatch.setattr(torch_checkpoint.CheckpointFunction, "forward", staticmethod(refused))
    layers = tanh_dropout_layers(4)
    checkpoint_sequential(layers, torch.randn(5, 12, dtype=torch.float64, requires_grad=True), 2).sum().backward()


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_plain_functions_as_layers():
    modules = tanh_dropout_layers(3)
    layers = [modules[0], torch.sin, modules[1], torch.tanh, modules[2]]  # functions have no parameters
    x = torch.randn(5, 12, dtype=torch.float64)
    plain = run_and_backward(modules, x, lambda ls, h: run_layers(layers, h))
    mine = run_and_backward(modules, x, lambda ls, h: checkpoint_sequential(layers, h, 2))
    assert_bit_identical(plain, mine, "modules and plain functions, segments=2")


def count_alive_outputs(layers, run):
    """Layer outputs still alive after forward, the most alive at once during backward, and
    the layer calls per phase (forward hooks on the layers)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    refs, phase, peak, calls = [], ["forward"], [0], {"forward": 0, "backward": 0}

    def hook(module, inputs, output):
        refs.append(StorageWeakRef(output.untyped_storage()))
        calls[phase[0]] += 1
        if phase[0] == "backward":
            peak[0] = max(peak[0], sum(not r.expired() for r in refs))

    handles = [layer.register_forward_hook(hook) for layer in layers]
    x = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)
    output = run(layers, x)
    after_forward = sum(not r.expired() for r in refs)  # the output itself is one of them
    phase[0] = "backward"
    output.sum().backward()
    for handle in handles:
        handle.remove()
    after_backward = sum(not r.expired() for r in refs) - 1  # the output is still held
    return after_forward, peak[0], calls, after_backward


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-stored-activations")
@pytest.mark.parametrize("num_layers, segments", [(16, None), (16, 2), (16, 8), (12, 3)])
def test_stores_segment_inputs_only_and_one_segment_in_backward(num_layers, segments):
    layers = tanh_dropout_layers(num_layers, dropout=0)
    stored, peak, _, _ = count_alive_outputs(layers, lambda ls, h: checkpoint_sequential(ls, h, segments))
    k = round(math.sqrt(num_layers)) if segments is None else segments
    case = f"{num_layers} layers, segments={segments} ({k} segments)"
    assert stored <= k, (
        f"{case}: {stored} layer outputs are alive after the forward (the plain run keeps {num_layers}); "
        f"only the {k - 1} inputs of segments 1..{k - 1} and the output may be")
    assert peak <= k + math.ceil(num_layers / k), (
        f"{case}: {peak} layer outputs alive at once during backward; recomputing one segment at a time keeps "
        f"at most about {k + math.ceil(num_layers / k)} (segment inputs + one segment)")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-stored-activations")
@pytest.mark.parametrize("segments", [2, 4])
def test_nothing_is_kept_after_the_backward(segments):
    layers = tanh_dropout_layers(8, dropout=0)
    *_, after = count_alive_outputs(layers, lambda ls, h: checkpoint_sequential(ls, h, segments))
    assert after == 0, (
        f"8 layers, segments={segments}: after the backward (no retain_graph) {after} layer outputs are still alive "
        "while the caller holds the output; the plain run keeps none (a tensor kept on ctx, not saved with "
        "ctx.save_for_backward, outlives the backward)")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-recompute-count")
@pytest.mark.parametrize("segments", [None, 1, 4, 16])
def test_every_layer_recomputed_exactly_once(segments):
    layers = tanh_dropout_layers(16)
    _, _, calls, _ = count_alive_outputs(layers, lambda ls, h: checkpoint_sequential(ls, h, segments))
    assert calls == {"forward": 16, "backward": 16}, (
        f"16 layers, segments={segments}: the layers ran {calls['forward']} times in forward and "
        f"{calls['backward']} times in backward; each runs once in forward and exactly once more in backward")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-recompute-count")
@pytest.mark.parametrize("num_layers, segments, backward_order", [
    (7, None, [5, 6, 3, 4, 0, 1, 2]),  # round(sqrt(7)) = 3 segments: segment_bounds(7, 3), last one first
    (10, None, [7, 8, 9, 4, 5, 6, 0, 1, 2, 3]),  # round(sqrt(10)) = 3, not 4
    (10, 4, [8, 9, 6, 7, 3, 4, 5, 0, 1, 2]),
])
def test_backward_recomputes_the_segments_of_segment_bounds(num_layers, segments, backward_order):
    layers, order = tanh_dropout_layers(num_layers, dropout=0), []
    for index, layer in enumerate(layers):
        layer.register_forward_hook(lambda module, inputs, output, index=index: order.append(index))
    output = checkpoint_sequential(layers, torch.randn(5, 12, dtype=torch.float64, requires_grad=True), segments)
    del order[:]  # only the recomputation in backward
    output.sum().backward()
    assert order == backward_order, (
        f"{num_layers} layers, segments={segments}: backward ran the layers in the order {order}; expected "
        f"{backward_order}, the segments of segment_bounds (None: round(sqrt(n)), the nearest int), last one first")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-arguments")
@pytest.mark.parametrize("layers, segments, wrong", [
    ([], None, "no layers"), ([nn.Tanh()], 0, "segments = 0"), ([nn.Tanh()] * 3, 4, "more segments than layers"),
    ([nn.Tanh()], 1.5, "segments is not an int"), ([nn.Tanh()] * 3, True, "segments is a bool"),
    ([nn.Tanh()] * 3, np.int64(2), "segments is a numpy integer (Python ints only)"),
    ([3], None, "a layer that is not callable"), ([nn.Tanh(), 3], None, "the second layer is not callable"),
])
def test_checkpoint_bad_arguments(layers, segments, wrong):
    raises_value_error(lambda: checkpoint_sequential(layers, torch.zeros(2, 2), segments),
                       f"checkpoint_sequential({layers!r}, x, segments={segments!r})", wrong)


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-arguments")
def test_checkpoint_input_that_is_not_a_tensor():
    raises_value_error(lambda: checkpoint_sequential([nn.Tanh()], [[1.0, 2.0]]),
                       "checkpoint_sequential([Tanh()], [[1.0, 2.0]])", "x is not a tensor")


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-caller-unchanged")
@pytest.mark.parametrize("input_grad, frozen", [(False, False), (True, False), (True, True)])
def test_callers_tensors_unchanged_and_a_second_backward_gives_the_same_gradients(input_grad, frozen):
    layers = tanh_dropout_layers(4)
    if frozen:
        layers[0].requires_grad_(False)
    x = torch.randn(5, 12, dtype=torch.float64, requires_grad=input_grad)
    before = x.detach().clone()
    output = checkpoint_sequential(layers, x, 2)
    try:
        output.sum().backward(retain_graph=True)
    except RuntimeError as error:
        pytest.skip(f"the first backward failed ({error}): the 4.3-bit-identical tests say why")
    case = f"4 layers, segments=2, an input with requires_grad={input_grad}" + (", layer 0 frozen" if frozen else "")
    assert x.requires_grad is input_grad, f"{case}: afterwards x.requires_grad is {x.requires_grad}; keep the caller's"
    assert input_grad or x.grad is None, f"{case}: afterwards x has a .grad although it does not require grad"
    # exact: checkpoint_sequential promises the plain run's bits (the same layers on the same shapes, in the same process); the caller's x against its copy; the same backward twice
    assert torch.equal(x.detach(), before), f"{case}: the caller's x changed"
    switched = [i for i, p in enumerate(layers[0].parameters()) if frozen and (p.requires_grad or p.grad is not None)]
    assert not switched, f"{case}: afterwards the frozen layer's parameters {switched} require grad or have a .grad"
    wanted = [p for layer in layers for p in layer.parameters() if p.grad is not None]  # which: 4.3-bit-identical's
    first = [p.grad.clone() for p in wanted]
    for p in wanted:
        p.grad = None
    try:
        output.sum().backward()
    except RuntimeError as error:
        pytest.fail(f"{case}: a second backward (retain_graph=True the first time) failed: {error}")
    for index, (p, once) in enumerate(zip(wanted, first)):
        # exact: checkpoint_sequential promises the plain run's bits (the same layers on the same shapes, in the same process); the caller's x against its copy; the same backward twice
        assert torch.equal(p.grad, once), (
            f"{case}: the second backward gives parameter {index} another gradient than the first (differs by up to "
            f"{(p.grad - once).abs().max().item():.3g})")


# ---------------------------------------------------------------- Problem 4.4


class Recorder(nn.Module):
    """A stage that notes, per device, every forward and the start of every backward."""

    def __init__(self, stage, num_devices, log, width=6):
        super().__init__()
        self.linear = nn.Linear(width, width, dtype=torch.float64)
        self.stage, self.device, self.log = stage, stage % num_devices, log

    def forward(self, x):
        out = torch.tanh(self.linear(x))
        self.log[self.device].append(f"F{self.stage}")
        out.register_hook(lambda grad: self.log[self.device].append(f"B{self.stage}"))
        return out


def peaks(log, num_chunks):
    result = []
    for events in log:
        held = peak = 0
        for event in events:
            held += 1 if event[0] == "F" else -1
            peak = max(peak, held)
        result.append(peak / num_chunks)
    return result


def gpipe_over_chunks(num_stages, num_microbatches, num_chunks=1):
    """A valid order that is neither 1F1B nor interleaved: each device's forwards chunk by chunk,
    then its backwards, last chunk first (GPipe over the K * v stages)."""
    chunks = range(num_chunks)
    return [[schedules.Action(c * num_stages + d, "F", m) for c in chunks for m in range(num_microbatches)]
            + [schedules.Action(c * num_stages + d, "B", m) for c in reversed(chunks) for m in range(num_microbatches)]
            for d in range(num_stages)]


def schedule_to_follow(monkeypatch, num_devices, num_chunks, num_microbatches):
    """Your schedule for the step, and whose it is; when yours is not valid (the 4.1 and 4.2 tests
    say why), a GPipe order is put in place of your schedule functions instead, so that this test
    judges train_step alone, as the grader does (it puts its own 1F1B or interleaved order there)."""
    from minitorch import pipeline

    try:
        schedule = (one_f_one_b(num_devices, num_microbatches) if num_chunks == 1
                    else interleaved_one_f_one_b(num_devices, num_microbatches, num_chunks))
        schedules.simulate(schedule, 1.0, 2.0, num_microbatches=num_microbatches, num_chunks=num_chunks)
        if len(schedule) == num_devices:
            return schedule, "your schedule"
    except Exception:  # noqa: BLE001 - a schedule function that raises has no valid schedule either
        pass
    monkeypatch.setattr(pipeline, "one_f_one_b", gpipe_over_chunks)
    monkeypatch.setattr(pipeline, "interleaved_one_f_one_b", gpipe_over_chunks)
    return gpipe_over_chunks(num_devices, num_microbatches, num_chunks), "the GPipe order bound in place of yours"


@pytest.mark.problem_4_4
@pytest.mark.criterion("4.4-train-step")
@pytest.mark.parametrize("num_devices, num_chunks, num_microbatches", [(2, 1, 4), (3, 1, 5), (2, 2, 4), (2, 3, 2)])
def test_train_step_follows_your_schedule_and_matches_the_sequential_run(num_devices, num_chunks, num_microbatches, monkeypatch):
    case = f"train_step on {num_devices} devices x {num_chunks} chunks, M = {num_microbatches}"
    schedule, whose = schedule_to_follow(monkeypatch, num_devices, num_chunks, num_microbatches)
    torch.manual_seed(0)
    log = [[] for _ in range(num_devices)]
    stages = [Recorder(s, num_devices, log) for s in range(num_devices * num_chunks)]
    reference = [nn.Linear(6, 6, dtype=torch.float64) for _ in stages]
    for ours, theirs in zip(stages, reference):
        theirs.load_state_dict(ours.linear.state_dict())
    x, y = torch.randn(2 * num_microbatches + 1, 6, dtype=torch.float64), torch.randn(2 * num_microbatches + 1, 6, dtype=torch.float64)
    with StageWorkers(["cpu"] * num_devices, timeout=20) as workers:
        report = train_step(workers, stages, x, y, F.mse_loss, num_microbatches)
    planned = [[f"{a.kind}{a.stage}" for a in row] for row in schedule]
    assert log == planned, f"{case}: the devices ran (kind, stage) {log}; {whose} says {planned}"
    predicted = simulated(schedule, case).peak_in_flight
    assert peaks(log, num_chunks) == pytest.approx(predicted), (
        f"{case}: measured peak activations per device {peaks(log, num_chunks)}; the simulator predicts {predicted}")
    h = x
    for layer in reference:
        h = torch.tanh(layer(h))
    loss = F.mse_loss(h, y)
    loss.backward()
    assert report.loss == pytest.approx(loss.item(), rel=1e-9), f"{case}: loss {report.loss}, expected {loss.item()}"
    for s, (ours, theirs) in enumerate(zip(stages, reference)):
        torch.testing.assert_close(ours.linear.weight.grad, theirs.weight.grad, rtol=1e-9, atol=1e-12,
                                   msg=lambda text, s=s: f"{case}: the gradient of stage {s}'s weight: {text}")


def recorders_and_reference(num_devices, num_chunks, log, seed=0):
    """Recording stages and plain ``nn.Linear`` copies of them (for the run without a pipeline)."""
    torch.manual_seed(seed)
    stages = [Recorder(s, num_devices, log) for s in range(num_devices * num_chunks)]
    reference = [nn.Linear(6, 6, dtype=torch.float64) for _ in stages]
    for ours, theirs in zip(stages, reference):
        theirs.load_state_dict(ours.linear.state_dict())
    return stages, reference


def sequential_gradients(reference, x, y):
    h = x
    for layer in reference:
        h = torch.tanh(layer(h))
    loss = F.mse_loss(h, y)
    loss.backward()
    return loss.item(), [layer.weight.grad for layer in reference]


@pytest.mark.problem_4_4
@pytest.mark.criterion("4.4-train-step")
@pytest.mark.parametrize("num_devices, num_chunks, first, then", [(2, 1, 3, 5), (2, 2, 2, 4)])
def test_train_step_adds_to_the_gradients_and_trains_twice(num_devices, num_chunks, first, then, monkeypatch):
    case = (f"train_step on {num_devices} devices x {num_chunks} chunks with gradients already there, M = {first}, then "
            f"again with M = {then}")
    schedule_to_follow(monkeypatch, num_devices, num_chunks, first)
    stages, reference = recorders_and_reference(num_devices, num_chunks, [[] for _ in range(num_devices)])
    ramp = torch.linspace(-1, 1, 36, dtype=torch.float64).reshape(6, 6)
    for stage in stages:
        stage.linear.weight.grad = ramp.clone()
    x, y = torch.randn(2 * then + 1, 6, dtype=torch.float64), torch.randn(2 * then + 1, 6, dtype=torch.float64)
    with StageWorkers(["cpu"] * num_devices, timeout=20) as workers:
        for num_microbatches in (first, then):
            train_step(workers, stages, x, y, F.mse_loss, num_microbatches)
    _, grads = sequential_gradients(reference, x, y)
    for s, (ours, one_step) in enumerate(zip(stages, grads)):
        torch.testing.assert_close(ours.linear.weight.grad, ramp + 2 * one_step, rtol=1e-9, atol=1e-12, msg=lambda text, s=s: (
            f"{case}: stage {s}'s weight .grad is not the gradients already there plus twice one step's: the step adds "
            f"its gradient to .grad (zeroing is the caller's), and each call is a step of its own. {text}"))


@pytest.mark.problem_4_4
@pytest.mark.criterion("4.4-train-step")
@pytest.mark.parametrize("container", [tuple, nn.ModuleList])
def test_train_step_returns_the_executors_report_and_takes_any_sequence(container, monkeypatch):
    case = f"train_step on 2 devices x 2 chunks, M = 4, stages passed as a {container.__name__}"
    schedule, whose = schedule_to_follow(monkeypatch, 2, 2, 4)
    stages, reference = recorders_and_reference(2, 2, [[], []])
    x, y = torch.randn(9, 6, dtype=torch.float64), torch.randn(9, 6, dtype=torch.float64)
    with StageWorkers(["cpu", "cpu"], timeout=20) as workers:
        report = train_step(workers, container(stages), x, y, F.mse_loss, 4)
    assert isinstance(report, StepReport), f"{case}: returned {report!r:.80}; expected the executor's StepReport"
    loss, _ = sequential_gradients(reference, x, y)
    assert report.loss == pytest.approx(loss, rel=1e-9), f"{case}: the report's loss is {report.loss}, expected {loss}"
    planned = [row.split() for row in schedules.format_schedule(schedule, 2)]
    assert report.executed == planned, f"{case}: the report says the devices ran {report.executed}; {whose} is {planned}"


@pytest.mark.problem_4_4
@pytest.mark.criterion("4.4-train-step")
@pytest.mark.parametrize("num_stages, num_microbatches, wrong", [
    (3, 2, "3 stages on 2 devices"), (0, 2, "no stages"), (4, 3, "M = 3 with 2 devices x 2 chunks"), (2, 0, "M = 0")])
def test_train_step_bad_arguments_raise(num_stages, num_microbatches, wrong):
    stages, _ = recorders_and_reference(2, 2, [[], []])
    x, y = torch.randn(5, 6, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)
    with StageWorkers(["cpu", "cpu"], timeout=20) as workers:
        try:
            train_step(workers, stages[:num_stages], x, y, F.mse_loss, num_microbatches)
        except NotImplementedError:
            raise  # the stub's, not the exception this test asks for
        except Exception:  # noqa: BLE001 - any class: the contract promises an exception, ValueError is typical
            return
    pytest.fail(f"train_step with {wrong}: it returned; the contract says it raises")


class FailingStage(nn.Module):
    """A stage whose second forward raises."""

    def __init__(self):
        super().__init__()
        self.linear, self.calls = nn.Linear(6, 6, dtype=torch.float64), 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:
            raise ArithmeticError("stage 1 failed on purpose")
        return self.linear(x)


@pytest.mark.problem_4_4
@pytest.mark.criterion("4.4-train-step")
def test_an_error_in_a_stage_reaches_the_caller(monkeypatch):
    schedule_to_follow(monkeypatch, 2, 1, 3)
    stages = [nn.Linear(6, 6, dtype=torch.float64), FailingStage()]
    x, y = torch.randn(7, 6, dtype=torch.float64), torch.randn(7, 6, dtype=torch.float64)
    with StageWorkers(["cpu", "cpu"], timeout=5) as workers:
        try:
            train_step(workers, stages, x, y, F.mse_loss, 3)
        except ArithmeticError as error:
            assert "failed on purpose" in str(error), f"stage 1 raised ArithmeticError; the caller got {error!r}"
            return
        except NotImplementedError:
            raise  # the stub's
        except Exception as error:  # noqa: BLE001 - reported: the stage's own exception must arrive
            pytest.fail(f"train_step on 2 devices, stage 1 raising ArithmeticError in its second forward: the caller got "
                        f"{type(error).__name__}: {error}; expected the stage's own ArithmeticError")
    pytest.fail("train_step on 2 devices, stage 1 raising ArithmeticError in its second forward: it returned; expected "
                "the stage's ArithmeticError")


@pytest.mark.problem_4_4
@pytest.mark.criterion("4.4-train-step")
def test_train_step_with_one_row_per_microbatch(monkeypatch):
    case = "train_step on 3 devices x 1 chunk, M = 3, a batch of 3 rows"
    schedule_to_follow(monkeypatch, 3, 1, 3)
    stages, reference = recorders_and_reference(3, 1, [[], [], []])
    x, y = torch.randn(3, 6, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    with StageWorkers(["cpu"] * 3, timeout=20) as workers:
        report = train_step(workers, stages, x, y, F.mse_loss, 3)
    loss, grads = sequential_gradients(reference, x, y)
    assert report.loss == pytest.approx(loss, rel=1e-9), f"{case}: the report's loss is {report.loss}, expected {loss}"
    for s, (ours, expected) in enumerate(zip(stages, grads)):
        torch.testing.assert_close(ours.linear.weight.grad, expected, rtol=1e-9, atol=1e-12, msg=lambda text, s=s: (
            f"{case}: stage {s}'s weight gradient is not the sequential run's: {text}"))
