"""Public tests for Problem 4 (1F1B, interleaved 1F1B, activation recomputation).

Run one problem with ``pytest -m problem_4_1`` (or ``problem_4_2``, ``problem_4_3``).
Schedules are checked by running them through the provided simulator
(``minitorch.schedules.simulate``); recomputation against the plain run of the same
layers. On the starter kit every test here fails with NotImplementedError.
``@pytest.mark.criterion(...)`` names the grader's criteria whose kind of mistake a test catches.
"""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from minitorch import schedules
from minitorch.pipeline import checkpoint_sequential, interleaved_one_f_one_b, one_f_one_b, run_layers

# ---------------------------------------------------------------- Problem 4.1

LECTURE_1F1B_K4_M8 = """\
device 0 |F0F1F2F3············B0B0F4B1B1F5B2B2F6B3B3F7B4B4··B5B5··B6B6··B7B7|
device 1 |··F0F1F2········B0B0F3B1B1F4B2B2F5B3B3F6B4B4F7B5B5··B6B6··B7B7····|
device 2 |····F0F1····B0B0F2B1B1F3B2B2F4B3B3F5B4B4F6B5B5F7B6B6··B7B7········|
device 3 |······F0B0B0F1B1B1F2B2B2F3B3B3F4B4B4F5B5B5F6B6B6F7B7B7············|"""


@pytest.mark.problem_4_1
@pytest.mark.criterion("4.1-makespan", "4.1-peak-in-flight")
def test_lecture_timeline_k4_m8():
    timeline = schedules.simulate(one_f_one_b(4, 8), t_f=1, t_b=2)
    assert schedules.render_ascii(timeline) == LECTURE_1F1B_K4_M8
    assert timeline.makespan == pytest.approx(33, abs=1e-9)
    assert timeline.peak_in_flight == [4, 3, 2, 1]


@pytest.mark.problem_4_1
@pytest.mark.criterion("4.1-peak-in-flight")
def test_device_0_order_k4_m8():
    assert schedules.format_schedule(one_f_one_b(4, 8))[0] == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"


@pytest.mark.problem_4_1
@pytest.mark.criterion("4.1-makespan", "4.1-peak-in-flight")
@given(num_stages=st.integers(1, 8), num_microbatches=st.integers(1, 20), t_b=st.sampled_from([1.0, 2.0, 3.0]))
def test_valid_as_fast_as_gpipe_and_holds_at_most_k_minus_d(num_stages, num_microbatches, t_b):
    schedule = one_f_one_b(num_stages, num_microbatches)
    assert len(schedule) == num_stages
    assert all(action.stage == d for d, row in enumerate(schedule) for action in row)
    timeline = schedules.simulate(schedule, 1.0, t_b, num_microbatches=num_microbatches, num_chunks=1)
    gpipe = schedules.simulate(schedules.gpipe(num_stages, num_microbatches), 1.0, t_b)
    assert timeline.makespan == pytest.approx(gpipe.makespan, rel=1e-12)
    assert timeline.peak_in_flight == [min(num_stages - d, num_microbatches) for d in range(num_stages)]


@pytest.mark.problem_4_1
@pytest.mark.criterion("4.1-arguments")
@pytest.mark.parametrize("args", [(0, 4), (4, 0), (-1, 3), (3, -2), (2.0, 4), (4, 3.0)])
def test_one_f_one_b_bad_arguments(args):
    with pytest.raises(ValueError):
        one_f_one_b(*args)


# ---------------------------------------------------------------- Problem 4.2


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-interleaved")
@given(num_stages=st.integers(1, 6), groups=st.integers(1, 4), num_chunks=st.integers(1, 4))
def test_interleaved_valid_and_bubble_divided_by_v(num_stages, groups, num_chunks):
    num_microbatches = groups * num_stages
    schedule = interleaved_one_f_one_b(num_stages, num_microbatches, num_chunks)
    timeline = schedules.simulate(schedule, 1.0, 2.0, num_microbatches=num_microbatches, num_chunks=num_chunks)
    one_f_one_b_idle = (num_stages - 1) * 3.0
    for idle in timeline.idle_per_device:
        assert idle == pytest.approx(one_f_one_b_idle / num_chunks, abs=1e-9)
    for d, peak in enumerate(timeline.peak_in_flight):
        warmup = 2 * (num_stages - d - 1) + (num_chunks - 1) * num_stages if num_chunks > 1 else num_stages - d - 1
        assert peak <= min(warmup + 1, num_microbatches * num_chunks) / num_chunks + 1e-9


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-interleaved")
def test_interleaved_lecture_k4_m8_v2():
    timeline = schedules.simulate(interleaved_one_f_one_b(4, 8, 2), 1.0, 2.0)
    assert timeline.idle_per_device == pytest.approx([4.5] * 4, abs=1e-9)  # 1F1B: 9
    assert timeline.peak_in_flight[0] == pytest.approx(5.5, abs=1e-9)  # 1F1B: 4


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-interleaved")
def test_interleaved_stage_numbering():
    schedule = interleaved_one_f_one_b(2, 2, 2)
    assert {a.stage for a in schedule[0]} == {0, 2}
    assert {a.stage for a in schedule[1]} == {1, 3}
    assert schedule[0][0] == schedules.Action(0, "F", 0)


@pytest.mark.problem_4_2
@pytest.mark.criterion("4.2-arguments")
@pytest.mark.parametrize("args", [(4, 6, 2), (3, 4, 2), (4, 2, 2), (4, 8, 0), (0, 8, 2), (4, 0, 2), (2, 4, -1), (4, 8, 2.0)])
def test_interleaved_bad_arguments(args):
    with pytest.raises(ValueError):
        interleaved_one_f_one_b(*args)


# ---------------------------------------------------------------- Problem 4.3


def tanh_dropout_layers(num_layers, dropout=0.3, width=12, seed=0):
    torch.manual_seed(seed)
    layers = []
    for index in range(num_layers):
        parts = [nn.Linear(width, width, dtype=torch.float64), nn.Tanh()]
        if dropout and index % 2 == 0:
            parts.append(nn.Dropout(dropout))
        layers.append(nn.Sequential(*parts))
    return layers


def gradients(layers, x, run, rng_seed=1):
    for layer in layers:
        layer.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    torch.manual_seed(rng_seed)
    output = run(layers, x)
    output.pow(2).sum().backward()
    return [output.detach(), x.grad] + [p.grad for layer in layers for p in layer.parameters()]


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
@pytest.mark.parametrize("num_layers, segments", [(9, None), (9, 1), (9, 3), (9, 9), (10, 4)])
def test_bit_identical_to_plain_run_with_dropout(num_layers, segments):
    layers = tanh_dropout_layers(num_layers)
    x = torch.randn(5, 12, dtype=torch.float64)
    plain = gradients(layers, x, run_layers)
    mine = gradients(layers, x, lambda ls, h: checkpoint_sequential(ls, h, segments))
    for expected, got in zip(plain, mine):
        assert torch.equal(expected, got)  # bit for bit, not allclose


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_rng_state_as_after_plain_run():
    layers = tanh_dropout_layers(6)
    x = torch.randn(5, 12, dtype=torch.float64)
    gradients(layers, x, run_layers)
    after_plain = torch.get_rng_state()
    gradients(layers, x, lambda ls, h: checkpoint_sequential(ls, h, 2))
    assert torch.equal(torch.get_rng_state(), after_plain)


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_parameters_get_gradients_when_input_does_not_require_grad():
    layers = tanh_dropout_layers(4, dropout=0)
    x = torch.randn(3, 12, dtype=torch.float64)  # requires_grad False
    checkpoint_sequential(layers, x, 2).sum().backward()
    assert all(p.grad is not None for layer in layers for p in layer.parameters())


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-bit-identical")
def test_plain_functions_as_layers():
    modules = tanh_dropout_layers(3)
    layers = [modules[0], torch.sin, modules[1], torch.tanh, modules[2]]  # functions have no parameters
    x = torch.randn(5, 12, dtype=torch.float64)
    plain = gradients(modules, x, lambda ls, h: run_layers(layers, h))
    mine = gradients(modules, x, lambda ls, h: checkpoint_sequential(layers, h, 2))
    for expected, got in zip(plain, mine):
        assert torch.equal(expected, got)


def count_alive_outputs(layers, run):
    """Layer outputs still alive after forward, and the most alive at once during backward."""
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
    return after_forward, peak[0], calls


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-stored-activations")
@pytest.mark.parametrize("num_layers, segments", [(16, None), (16, 2), (16, 8), (12, 3)])
def test_stores_segment_inputs_only_and_one_segment_in_backward(num_layers, segments):
    layers = tanh_dropout_layers(num_layers, dropout=0)
    plain_stored, _, _ = count_alive_outputs(layers, run_layers)
    assert plain_stored == num_layers
    stored, peak, _ = count_alive_outputs(layers, lambda ls, h: checkpoint_sequential(ls, h, segments))
    k = round(math.sqrt(num_layers)) if segments is None else segments
    assert stored == k  # segment inputs (besides x) and the output
    assert peak <= k + math.ceil(num_layers / k)  # about n/k + k


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-recompute-count")
@pytest.mark.parametrize("segments", [None, 1, 4, 16])
def test_every_layer_recomputed_exactly_once(segments):
    layers = tanh_dropout_layers(16)
    _, _, calls = count_alive_outputs(layers, lambda ls, h: checkpoint_sequential(ls, h, segments))
    assert calls == {"forward": 16, "backward": 16}


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-recompute-count")
@pytest.mark.parametrize("num_layers, segments, backward_order", [
    (7, None, [5, 6, 3, 4, 0, 1, 2]),  # round(sqrt(7)) = 3 segments: segment_bounds(7, 3), last one first
    (10, 4, [8, 9, 6, 7, 3, 4, 5, 0, 1, 2]),
])
def test_backward_recomputes_the_segments_of_segment_bounds(num_layers, segments, backward_order):
    layers, order = tanh_dropout_layers(num_layers, dropout=0), []
    for index, layer in enumerate(layers):
        layer.register_forward_hook(lambda module, inputs, output, index=index: order.append(index))
    output = checkpoint_sequential(layers, torch.randn(5, 12, dtype=torch.float64, requires_grad=True), segments)
    del order[:]  # only the recomputation in backward
    output.sum().backward()
    assert order == backward_order, "backward must recompute the segments of segment_bounds, the last one first"


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-arguments")
@pytest.mark.parametrize("layers, segments", [([], None), ([nn.Tanh()], 0), ([nn.Tanh()] * 3, 4), ([nn.Tanh()] * 3, -1),
                                              ([nn.Tanh()], 1.5), ([3], None)])
def test_checkpoint_bad_arguments(layers, segments):
    with pytest.raises(ValueError):
        checkpoint_sequential(layers, torch.zeros(2, 2), segments)


@pytest.mark.problem_4_3
@pytest.mark.criterion("4.3-arguments")
def test_checkpoint_input_that_is_not_a_tensor():
    with pytest.raises(ValueError):
        checkpoint_sequential([nn.Tanh()], [[1.0, 2.0]])
