"""Public tests for Problem 2 (clock_cycles and Pipe).

Run one problem with ``pytest -m problem_2_1`` or ``pytest -m problem_2_2``. On the
starter kit every test here fails with NotImplementedError until you implement it.
``@pytest.mark.criterion(...)`` names the grader's criteria whose kind of mistake a test
catches (the write-up lists them next to each criterion).
"""
import threading
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.overrides import TorchFunctionMode

from minitorch import runtime
from minitorch.pipeline import Pipe, clock_cycles

RTOL, ATOL = 1e-4, 1e-6


# ---------------------------------------------------------------- Problem 2.1


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-schedule", "2.1-stage-order")
def test_lecture_example_3_microbatches_3_stages():
    assert list(clock_cycles(3, 3)) == [
        [(0, 0)],
        [(1, 0), (0, 1)],
        [(2, 0), (1, 1), (0, 2)],
        [(2, 1), (1, 2)],
        [(2, 2)],
    ]


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-schedule", "2.1-stage-order")
def test_exercise_1_two_microbatches_three_stages():
    assert list(clock_cycles(2, 3)) == [[(0, 0)], [(1, 0), (0, 1)], [(1, 1), (0, 2)], [(1, 2)]]


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-no-microbatches")
@pytest.mark.parametrize("num_stages", [1, 2, 5])
def test_no_microbatches_yields_nothing(num_stages):
    assert list(clock_cycles(0, num_stages)) == []


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-schedule")
def test_one_stage_is_one_microbatch_per_wave():
    assert list(clock_cycles(4, 1)) == [[(0, 0)], [(1, 0)], [(2, 0)], [(3, 0)]]


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-errors")
@pytest.mark.parametrize("num_microbatches, num_stages", [(-1, 3), (3, 0), (3, -2), (0, -1)])
def test_bad_arguments_raise_value_error(num_microbatches, num_stages):
    with pytest.raises(ValueError):
        # at the call (checked first) or on the first next (a generator function): both are right
        next(iter(clock_cycles(num_microbatches, num_stages)))


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-generator")
def test_a_generator_that_yields_a_new_list_per_wave():
    schedule = clock_cycles(3, 3)
    assert not isinstance(schedule, (list, tuple)) and iter(schedule) is schedule, (
        f"clock_cycles returned a {type(schedule).__name__}; write it as a generator (yield one wave at a time)"
    )
    waves = list(schedule)
    assert len({id(wave) for wave in waves}) == len(waves), "the same list object is yielded for several waves"
    assert waves[0] == [(0, 0)] and waves[-1] == [(2, 2)]


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-schedule")
@given(num_microbatches=st.integers(1, 12), num_stages=st.integers(1, 12))
def test_schedule_properties(num_microbatches, num_stages):
    waves = list(clock_cycles(num_microbatches, num_stages))
    assert len(waves) == num_microbatches + num_stages - 1
    seen = set()
    for k, wave in enumerate(waves):
        assert all(i + j == k for i, j in wave), f"wave {k} holds a pair with i + j != {k}: {wave}"
        seen.update(wave)
    every_pair = {(i, j) for i in range(num_microbatches) for j in range(num_stages)}
    assert seen == every_pair
    assert sum(len(wave) for wave in waves) == len(every_pair), "a pair appears twice"


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-stage-order")
@pytest.mark.parametrize("num_microbatches, num_stages", [(3, 3), (5, 2), (2, 6)])
def test_waves_are_ordered_by_stage(num_microbatches, num_stages):
    for k, wave in enumerate(clock_cycles(num_microbatches, num_stages)):
        assert [j for _, j in wave] == sorted(j for _, j in wave), f"wave {k} not ordered by stage: {wave}"


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
@pytest.mark.criterion("2.2-forward")
@pytest.mark.parametrize("num_stages", [1, 2, 3])
@pytest.mark.parametrize("batch, split_size", [(10, 4), (8, 1), (6, 6), (5, 16), (9, 4)])
def test_pipe_matches_sequential(pipe_factory, num_stages, batch, split_size):
    stages = make_stages(num_stages)
    pipe = pipe_factory(stages, split_size)
    x = torch.randn(batch, 6)
    torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL)


class RecordsRows(nn.Module):
    """Remembers the first row number (column 0) and the row count of every microbatch it runs."""

    def __init__(self, log, index):
        super().__init__()
        self.log, self.index = log, index

    def forward(self, x):
        self.log.append((self.index, int(x[0, 0]), x.shape[0]))
        return x + 0


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-forward", "2.2-call-order")
@pytest.mark.parametrize("batch, split_size, sizes", [(9, 4, [4, 4, 1]), (6, 4, [4, 2]), (6, 2, [2, 2, 2]), (5, 16, [5])])
def test_microbatches_have_split_size_rows(pipe_factory, batch, split_size, sizes):
    log = []
    pipe = pipe_factory([RecordsRows(log, j) for j in range(2)], split_size)
    pipe(torch.arange(batch, dtype=torch.float64).unsqueeze(1))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    for j in range(2):
        assert [rows for stage, _, rows in log if stage == j] == sizes, (
            f"stage {j}: split_size={split_size} is the number of ROWS per microbatch (torch.split), "
            f"so a batch of {batch} rows gives microbatches of {sizes} rows"
        )
        assert [first for stage, first, _ in log if stage == j] == starts, f"stage {j} ran the microbatches out of order"


def call_order(pipe, x):
    """The submit/receive calls the Pipe makes on its StageWorkers, as ``["submit(0)", ...]``."""
    events = []
    with runtime.observe(events.append):
        pipe(x)
    return [f"{e.kind}({e.stage})" for e in events if e.kind in ("submit", "receive")]


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-call-order")
def test_call_order_is_submit_the_wave_then_receive_it(pipe_factory):
    pipe = pipe_factory(make_stages(3), 2)
    expected = [  # the write-up's table for M = K = 3
        "submit(0)", "receive(0)",
        "submit(0)", "submit(1)", "receive(0)", "receive(1)",
        "submit(0)", "submit(1)", "submit(2)", "receive(0)", "receive(1)", "receive(2)",
        "submit(1)", "submit(2)", "receive(1)", "receive(2)",
        "submit(2)", "receive(2)",
    ]
    assert call_order(pipe, torch.randn(6, 6)) == expected
    assert call_order(pipe, torch.randn(5, 6)) == expected, "a second call (uneven last microbatch) differs"


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-forward")
def test_pipe_repeated_calls_with_different_inputs(pipe_factory):
    stages = make_stages(3)
    pipe = pipe_factory(stages, 3)
    for batch in (7, 9, 2):
        x = torch.randn(batch, 6)
        torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL)


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-forward")
def test_pipe_does_not_mutate_input_and_registers_parameters(pipe_factory):
    stages = make_stages(2)
    pipe = pipe_factory(stages, 2)
    x = torch.randn(5, 6)
    before = x.clone()
    pipe(x)
    assert torch.equal(x, before)
    assert len(list(pipe.parameters())) == sum(len(list(s.parameters())) for s in stages)


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-backward")
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
@pytest.mark.criterion("2.2-no-grad")
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
    """Raises on its second call (microbatch 1) while ``fail`` is set. With 3 stages and 3
    microbatches that is in wave 2, before stage 2's microbatch 0 is received."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.fail = True
        self.calls = 0
        self.raised = None

    def forward(self, x):
        self.calls += 1
        if self.fail and self.calls == 2:
            self.raised = StageFailure("stage 1 refused this batch")
            raise self.raised
        return self.linear(x)


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-exceptions")
def test_stage_exception_reaches_caller_and_pipe_is_reusable(pipe_factory):
    torch.manual_seed(0)
    stages = [nn.Linear(6, 6), FailsOnce(), nn.Linear(6, 6)]
    pipe = pipe_factory(stages, 2)
    with pytest.raises(StageFailure, match="stage 1 refused this batch") as caught:
        pipe(torch.randn(6, 6))
    assert caught.value is stages[1].raised, "re-raise the stage's own exception object, not a copy"
    stages[1].fail = False
    x = torch.randn(6, 6)
    torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL,
                               msg="the next call is wrong: receive the rest of the wave before raising")


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-exceptions")
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
@pytest.mark.criterion("2.2-concurrency", "2.3-speedup")
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


class CallingThreadOps(TorchFunctionMode):
    """Records the torch operations run on the thread that enters it (modes are per thread,
    so the stage threads are not seen), with whether each made new data (not a view)."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)}
        fresh = isinstance(result, torch.Tensor) and result.untyped_storage().data_ptr() not in inputs
        self.log.append((getattr(func, "__name__", str(func)), fresh))
        return result


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-transfers", "2.3-speedup")
def test_microbatches_are_moved_and_computed_inside_the_submitted_callables(pipe_factory):
    # Distinct devices that are all the CPU, so that a move guarded by `if x.device != device`
    # happens here as it would between two GPUs.
    pipe = pipe_factory(make_stages(3), 2, devices=["cpu:0", "cpu", "cpu:0"])
    log, thread = [], threading.get_ident()

    def on_event(event):
        if event.kind in ("submit", "receive") and threading.get_ident() == thread:
            log.append((event.kind, False))

    x = torch.randn(6, 6)
    with runtime.observe(on_event), CallingThreadOps(log):
        pipe(x)
    last_receive = max(i for i, (name, _) in enumerate(log) if name == "receive")
    for name, fresh in log[:last_receive]:
        assert name not in ("to", "cuda", "cpu", "clone", "copy_") and not fresh, (
            f"Pipe.forward ran torch `{name}` on the calling thread before its last receive: moving a "
            "microbatch (.to(device)), copying or computing on it belongs inside the submitted callable "
            "(only views such as torch.split before, only torch.cat after the last receive)"
        )
