"""Public tests for Problem 2 (clock_cycles and Pipe).

Run one problem with ``pytest -m problem_2_1`` or ``pytest -m problem_2_2``. On the
starter kit every test here fails with NotImplementedError until you implement it.
"""
import threading
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from minitorch.pipeline import Pipe, clock_cycles

RTOL, ATOL = 1e-4, 1e-6


# ---------------------------------------------------------------- Problem 2.1


@pytest.mark.problem_2_1
def test_lecture_example_3_microbatches_3_stages():
    assert list(clock_cycles(3, 3)) == [
        [(0, 0)],
        [(1, 0), (0, 1)],
        [(2, 0), (1, 1), (0, 2)],
        [(2, 1), (1, 2)],
        [(2, 2)],
    ]


@pytest.mark.problem_2_1
def test_exercise_1_two_microbatches_three_stages():
    assert list(clock_cycles(2, 3)) == [[(0, 0)], [(1, 0), (0, 1)], [(1, 1), (0, 2)], [(1, 2)]]


@pytest.mark.problem_2_1
@pytest.mark.parametrize("num_stages", [1, 2, 5])
def test_no_microbatches_yields_nothing(num_stages):
    assert list(clock_cycles(0, num_stages)) == []


@pytest.mark.problem_2_1
def test_one_stage_is_one_microbatch_per_wave():
    assert list(clock_cycles(4, 1)) == [[(0, 0)], [(1, 0)], [(2, 0)], [(3, 0)]]


@pytest.mark.problem_2_1
@pytest.mark.parametrize("num_microbatches, num_stages", [(-1, 3), (3, 0), (3, -2)])
def test_bad_arguments_raise_value_error_when_iterated(num_microbatches, num_stages):
    schedule = clock_cycles(num_microbatches, num_stages)  # a generator: no error yet
    with pytest.raises(ValueError):
        next(iter(schedule))


@pytest.mark.problem_2_1
@given(num_microbatches=st.integers(0, 12), num_stages=st.integers(1, 12))
def test_schedule_properties(num_microbatches, num_stages):
    waves = list(clock_cycles(num_microbatches, num_stages))
    expected_waves = num_microbatches + num_stages - 1 if num_microbatches else 0
    assert len(waves) == expected_waves
    seen = set()
    for k, wave in enumerate(waves):
        assert all(i + j == k for i, j in wave), f"wave {k} holds a pair with i + j != {k}: {wave}"
        assert [j for _, j in wave] == sorted(j for _, j in wave), f"wave {k} not ordered by stage: {wave}"
        seen.update(wave)
    every_pair = {(i, j) for i in range(num_microbatches) for j in range(num_stages)}
    assert seen == every_pair
    assert sum(len(wave) for wave in waves) == len(every_pair), "a pair appears twice"


# ---------------------------------------------------------------- Problem 2.2


def make_stages(num_stages, width=6, seed=0):
    """Stages whose outputs differ per row, so a reordering of rows shows."""
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(num_stages)]


def run_sequentially(stages, x):
    for stage in stages:
        x = stage(x)
    return x


@pytest.fixture
def pipe_factory():
    pipes = []

    def build(stages, split_size, **kwargs):
        pipe = Pipe(stages, split_size=split_size, **kwargs)
        pipes.append(pipe)
        return pipe

    yield build
    for pipe in pipes:
        pipe.close()


@pytest.mark.problem_2_2
@pytest.mark.parametrize("num_stages", [1, 2, 3])
@pytest.mark.parametrize("batch, split_size", [(10, 4), (8, 1), (6, 6), (5, 16)])
def test_pipe_matches_sequential(pipe_factory, num_stages, batch, split_size):
    stages = make_stages(num_stages)
    pipe = pipe_factory(stages, split_size)
    x = torch.randn(batch, 6)
    torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL)


@pytest.mark.problem_2_2
def test_pipe_repeated_calls_with_different_inputs(pipe_factory):
    stages = make_stages(3)
    pipe = pipe_factory(stages, 3)
    for batch in (7, 9, 2):
        x = torch.randn(batch, 6)
        torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL)


@pytest.mark.problem_2_2
def test_pipe_does_not_mutate_input_and_registers_parameters(pipe_factory):
    stages = make_stages(2)
    pipe = pipe_factory(stages, 2)
    x = torch.randn(5, 6)
    before = x.clone()
    pipe(x)
    assert torch.equal(x, before)
    assert len(list(pipe.parameters())) == sum(len(list(s.parameters())) for s in stages)


@pytest.mark.problem_2_2
def test_gradients_and_three_sgd_steps_match_sequential(pipe_factory):
    stages = make_stages(3, seed=1)
    reference = make_stages(3, seed=1)
    pipe = pipe_factory(stages, 3)
    pipe_optimizer = torch.optim.SGD(pipe.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD([p for s in reference for p in s.parameters()], lr=0.1)
    for step in range(3):
        x = torch.randn(10, 6)
        x_pipe = x.clone().requires_grad_()
        x_reference = x.clone().requires_grad_()
        pipe(x_pipe).square().mean().backward()
        run_sequentially(reference, x_reference).square().mean().backward()
        torch.testing.assert_close(x_pipe.grad, x_reference.grad, rtol=RTOL, atol=ATOL)
        for ours, theirs in zip(pipe.parameters(), (p for s in reference for p in s.parameters())):
            assert ours.grad is not None, f"step {step}: a stage parameter got no gradient (detached?)"
            torch.testing.assert_close(ours.grad, theirs.grad, rtol=RTOL, atol=ATOL)
        pipe_optimizer.step()
        reference_optimizer.step()
        pipe_optimizer.zero_grad()
        reference_optimizer.zero_grad()
    for ours, theirs in zip(pipe.parameters(), (p for s in reference for p in s.parameters())):
        torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=ATOL)


class RecordsGraph(nn.Module):
    """Remembers whether its output would build an autograd graph."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.built_graph = []

    def forward(self, x):
        y = self.linear(x)
        self.built_graph.append(y.requires_grad)
        return y


@pytest.mark.problem_2_2
@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_no_graph_is_built_in_stages_under_no_grad(pipe_factory, mode):
    stages = [RecordsGraph() for _ in range(3)]
    pipe = pipe_factory(stages, 2)
    with mode():
        out = pipe(torch.randn(6, 6))
    assert not out.requires_grad
    assert all(not built for stage in stages for built in stage.built_graph), (
        "a stage built an autograd graph although the caller ran under no_grad: "
        "grad mode is thread-local, see pitfall 1"
    )
    assert torch.is_grad_enabled()


class StageFailure(Exception):
    pass


class FailsOnce(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.fail = True

    def forward(self, x):
        if self.fail:
            raise StageFailure("stage 1 refused this batch")
        return self.linear(x)


@pytest.mark.problem_2_2
def test_stage_exception_reaches_caller_and_pipe_is_reusable(pipe_factory):
    torch.manual_seed(0)
    stages = [nn.Linear(6, 6), FailsOnce(), nn.Linear(6, 6)]
    pipe = pipe_factory(stages, 2)
    with pytest.raises(StageFailure, match="stage 1 refused this batch"):
        pipe(torch.randn(6, 6))
    stages[1].fail = False
    x = torch.randn(6, 6)
    torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL)


@pytest.mark.problem_2_2
def test_no_thread_alive_after_close():
    before = set(threading.enumerate())
    pipe = Pipe(make_stages(3), split_size=2)
    pipe(torch.randn(4, 6))
    pipe.close()
    assert set(threading.enumerate()) <= before


class Sleeps(nn.Module):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)  # releases the GIL, like a PyTorch operator
        return x + 1


@pytest.mark.problem_2_2
def test_stages_run_concurrently(pipe_factory):
    num_microbatches, num_stages, sleep = 6, 3, 0.05
    pipe = pipe_factory([Sleeps(sleep) for _ in range(num_stages)], 1)
    x = torch.zeros(num_microbatches, 1)
    start = time.perf_counter()
    out = pipe(x)
    elapsed = time.perf_counter() - start
    assert torch.equal(out, x + num_stages)
    pipelined = (num_microbatches + num_stages - 1) * sleep  # 0.4 s
    serial = num_microbatches * num_stages * sleep  # 0.9 s
    assert elapsed < (pipelined + serial) / 2, (
        f"forward took {elapsed:.2f} s: a pipelined run needs about {pipelined:.2f} s, "
        f"a serial one {serial:.2f} s. Submit the whole wave before receiving any of it."
    )
