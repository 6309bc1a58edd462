"""Public tests for Problem 2 (clock_cycles, Pipe and balance_stages).

Run one problem with ``pytest -m problem_2_1``, ``-m problem_2_2`` or ``-m problem_2_4``. On the
starter kit every test here fails with NotImplementedError until you implement it.
``@pytest.mark.criterion(...)`` names the grader's criteria whose kind of mistake a test
catches (the write-up lists them next to each criterion).
"""
import itertools
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.overrides import TorchFunctionMode

from minitorch import runtime
from minitorch.pipeline import Pipe, balance_stages, clock_cycles

RTOL, ATOL = 1e-4, 1e-6


# ---------------------------------------------------------------- Problem 2.1

LECTURE_3_3 = [[(0, 0)], [(1, 0), (0, 1)], [(2, 0), (1, 1), (0, 2)], [(2, 1), (1, 2)], [(2, 2)]]


def check_waves(call, waves, expected):
    """Each wave holds the expected pairs, in any order: the order inside a wave is
    test_waves_are_ordered_by_stage's (criterion 2.1-stage-order), not the schedule's."""
    for k, (have, want) in enumerate(zip(waves, expected)):
        try:
            pairs = sorted(tuple(pair) for pair in have)
        except TypeError:  # not a list of pairs: the message shows it
            pairs = None
        assert pairs == sorted(want), (
            f"contract (Yields): {call}, wave {k}: expected the pairs {want} (in any order), got {have} "
            "(each pair in the earliest clock cycle it can run in)"
        )
    assert len(waves) == len(expected), (
        f"contract (Yields): {call} yielded {len(waves)} waves; expected M + K - 1 = {len(expected)}: {expected}"
    )


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-schedule")
def test_lecture_example_3_microbatches_3_stages():
    check_waves("clock_cycles(3, 3)", list(clock_cycles(3, 3)), LECTURE_3_3)


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-schedule")
def test_exercise_1_two_microbatches_three_stages():
    expected = [[(0, 0)], [(1, 0), (0, 1)], [(1, 1), (0, 2)], [(1, 2)]]
    check_waves("clock_cycles(2, 3)", list(clock_cycles(2, 3)), expected)


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-no-microbatches")
@pytest.mark.parametrize("num_stages", [1, 2, 5])
def test_no_microbatches_yields_nothing(num_stages):
    waves = list(clock_cycles(0, num_stages))
    assert waves == [], f"contract (Yields): clock_cycles(0, {num_stages}) yielded {waves}; expected no wave (M = 0)"


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-schedule")
def test_one_stage_is_one_microbatch_per_wave():
    check_waves("clock_cycles(4, 1)", list(clock_cycles(4, 1)), [[(0, 0)], [(1, 0)], [(2, 0)], [(3, 0)]])


# Each bad call after a valid call equal to it (True == 1 and 2.0 == 2, hashes included), where there is one.
BAD_SCHEDULE_CALLS = [(-1, 3, None), (3, 0, None), (3, -2, None), (0, -1, None), (True, 3, (1, 3)), (False, 2, (0, 2)),
                      (3, 2.0, (3, 2)), (np.float64(2.0), 3, (2, 3)), ("3", 3, None), (3, None, None)]


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-errors")
@pytest.mark.parametrize("num_microbatches, num_stages, twin", BAD_SCHEDULE_CALLS)
def test_bad_arguments_raise_value_error(num_microbatches, num_stages, twin):
    call = f"clock_cycles({num_microbatches!r}, {num_stages!r})"
    if twin is not None:
        list(clock_cycles(*twin))  # a call with equal arguments first: each call is checked on its own
    try:
        # at the call (checked first) or on the first next (a generator function): both are right
        first = next(iter(clock_cycles(num_microbatches, num_stages)), "nothing")
    except ValueError:
        return
    except Exception as error:  # noqa: BLE001 - named in the message
        pytest.fail(f"contract (Raises): {call} raised {type(error).__name__}: {error}; expected ValueError")
    after = f" (right after clock_cycles{twin}, equal to it)" if twin else ""
    pytest.fail(f"contract (Raises): {call}{after} yielded {first!r}; expected ValueError (not an int, M < 0 or K < 1)")


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-errors")
def test_numpy_integers_are_ints():
    try:
        waves = list(clock_cycles(np.int64(3), np.int32(3)))
    except ValueError as error:
        pytest.fail(f"contract (Args): clock_cycles(np.int64(3), np.int32(3)) raised ValueError: {error}; NumPy integers "
                    "are ints to the contract")
    check_waves("clock_cycles(np.int64(3), np.int32(3))", waves, LECTURE_3_3)
    kinds = sorted({type(number).__name__ for wave in waves for pair in wave for number in pair})
    assert kinds == ["int"], f"contract (Yields): clock_cycles(np.int64(3), np.int32(3)) yielded pairs of {kinds}; expected Python ints"


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-generator")
def test_a_generator_that_yields_a_new_list_per_wave():
    schedule = clock_cycles(3, 3)
    assert not isinstance(schedule, (list, tuple)) and iter(schedule) is schedule, (
        f"clock_cycles returned a {type(schedule).__name__}; write it as a generator (yield one wave at a time)"
    )
    waves = list(schedule)
    assert len({id(wave) for wave in waves}) == len(waves), "the same list object is yielded for several waves"
    assert waves[:1] == [[(0, 0)]] and waves[-1:] == [[(2, 2)]], (
        f"contract (Yields): clock_cycles(3, 3) yielded {waves}; expected [(0, 0)] first and [(2, 2)] last"
    )
    kinds = sorted({f"{type(wave).__name__} of {type(pair).__name__}s of {type(n).__name__}" for wave in waves
                    for pair in wave for n in pair})
    assert kinds == ["list of tuples of int"], f"contract (Yields): clock_cycles(3, 3) yielded a {', '.join(kinds)}; expected a list of tuples of int"


def first_wave_seconds(m, k):
    """CPU seconds until ``clock_cycles(m, k)`` hands out its first wave (CPU time, not wall time:
    a busy machine hardly changes it)."""
    started = time.process_time()
    next(iter(clock_cycles(m, k)))
    return time.process_time() - started


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-generator")
def test_the_work_before_the_first_wave_grows_with_m_plus_k_not_m_times_k():
    # (2048, 1) and (1, 2048) hold as many microbatches and stages as (2048, 2048), a thousandth of
    # its pairs; every size is called once, so nothing an earlier call kept hides the work.
    lopsided = min(map(first_wave_seconds, (2048, 2049), (1, 1))) + min(map(first_wave_seconds, (1, 1), (2048, 2049)))
    square = min(map(first_wave_seconds, (2048, 2047, 2049), (2048, 2049, 2047)))
    assert square <= max(20 * lopsided, 2e-3), (
        f"contract (Guarantees): clock_cycles(2048, 2048) took {square * 1e3:.1f} ms of CPU time before its first wave, "
        f"(2048, 1) and (1, 2048) together {lopsided * 1e3:.2f} ms: its work grows with M * K, so pairs of every wave "
        "were computed before the first was handed out. A generator computes each wave when it is asked for"
    )


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-generator")
def test_new_lists_on_every_call_that_the_caller_may_change():
    once = list(clock_cycles(3, 3))
    yielded = [list(wave) for wave in once]
    for wave in once:
        wave.append((-1, -1))  # the caller's to change
    twice = list(clock_cycles(3, 3))
    assert not any(a is b for a in once for b in twice), "contract (Yields): two calls yielded the same list objects"
    assert twice == yielded, (
        f"contract (Guarantees): after the caller appended (-1, -1) to every wave of clock_cycles(3, 3), the next call "
        f"yielded {twice}: waves kept across calls hand one caller's changes to the next"
    )


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-schedule")
def test_calls_are_independent():
    outer = iter(clock_cycles(3, 3))
    waves = [next(outer)]
    other = list(clock_cycles(4, 2))  # another call while the first is half way through
    waves += list(outer)
    check_waves("clock_cycles(3, 3) with clock_cycles(4, 2) run after its first wave", waves, LECTURE_3_3)
    assert len(other) == 5, (
        f"contract (Guarantees): clock_cycles(4, 2), run while clock_cycles(3, 3) was half way through, yielded "
        f"{len(other)} waves ({other}); expected M + K - 1 = 5"
    )


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-schedule")
@given(num_microbatches=st.integers(1, 12), num_stages=st.integers(1, 12))
def test_schedule_properties(num_microbatches, num_stages):
    call = f"clock_cycles({num_microbatches}, {num_stages})"
    waves = list(clock_cycles(num_microbatches, num_stages))
    every_pair = {(i, j) for i in range(num_microbatches) for j in range(num_stages)}
    seen = [pair for wave in waves for pair in wave]
    assert sorted(seen) == sorted(every_pair), (
        f"contract (Yields): every pair (i < M, j < K) in exactly one wave; {call} yields "
        f"{len(seen)} pairs for {len(every_pair)}, missing {sorted(every_pair - set(seen))[:4]}"
    )
    finished = {}  # (i, j) -> the clock cycle it ran in
    for k, wave in enumerate(waves):
        assert wave, f"contract (Yields): {call}, wave {k} is empty"
        for i, j in wave:
            ready = max(finished.get((i, j - 1), -1), finished.get((i - 1, j), -1)) + 1
            assert k == ready, (
                f"contract: {call}, wave {k} holds {(i, j)}, which can run in clock cycle {ready} at the earliest "
                "(it needs (i, j - 1) and (i - 1, j) done first) and must run then"
            )
            finished[i, j] = k


@pytest.mark.problem_2_1
@pytest.mark.criterion("2.1-stage-order")
@pytest.mark.parametrize("num_microbatches, num_stages", [(3, 3), (5, 2), (2, 6)])
def test_waves_are_ordered_by_stage(num_microbatches, num_stages):
    call = f"clock_cycles({num_microbatches}, {num_stages})"
    for k, wave in enumerate(clock_cycles(num_microbatches, num_stages)):
        assert [j for _, j in wave] == sorted(j for _, j in wave), (
            f"contract (Yields): {call}, wave {k} is {wave}: not ordered by increasing stage; expected "
            f"{sorted(wave, key=lambda pair: pair[1])} (only the order: a wave lists its pairs by stage, stage 0 first, "
            "as the Pipe submits them)"
        )


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
    torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL, msg=lambda m: (
        f"contract (Returns): {num_stages} stages, {batch} rows at split_size {split_size}: not the stages run in "
        f"sequence: {m}"))


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
        ran = [(first, rows) for stage, first, rows in log if stage == j]
        expected = list(zip(starts, sizes))
        assert ran == expected, (
            f"contract (Args: split_size): {batch} rows at split_size={split_size}: stage {j} ran the microbatches "
            f"(first row, rows) {ran}; expected {expected}: split_size rows each (torch.split), each microbatch once, "
            "in order" + (" (a callable that reads i and j when it runs, not when it is made, runs some microbatches "
                          "twice and others never)" if len(set(ran)) < len(ran) or len(ran) != len(expected) else "")
        )


WAVES_3_3 = [  # the write-up's table for M = K = 3, wave by wave
    ["submit(0)", "receive(0)"],
    ["submit(0)", "submit(1)", "receive(0)", "receive(1)"],
    ["submit(0)", "submit(1)", "submit(2)", "receive(0)", "receive(1)", "receive(2)"],
    ["submit(1)", "submit(2)", "receive(1)", "receive(2)"],
    ["submit(2)", "receive(2)"],
]


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
    for call, rows in enumerate((6, 5), start=1):  # a second call, with an uneven last microbatch
        got = call_order(pipe, torch.randn(rows, 6))
        position = 0
        for wave, want in enumerate(WAVES_3_3):
            have = got[position : position + len(want)]
            assert have == want, (
                f"contract (Guarantees): 3 stages, {rows} rows at split_size 2, call {call}: wave {wave}: "
                f"expected {' '.join(want)}; got {' '.join(have) or 'nothing'}"
            )
            position += len(want)
        assert position == len(got), f"call {call}: after the last wave: expected nothing; got {' '.join(got[position:])}"


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-forward")
def test_pipe_repeated_calls_with_different_inputs(pipe_factory):
    stages = make_stages(3)
    pipe = pipe_factory(stages, 3)
    for call, batch in enumerate((7, 9, 2), start=1):
        x = torch.randn(batch, 6)
        torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL, msg=lambda m: (
            f"contract (Returns): 3 stages, split_size 3, call {call} ({batch} rows): not the stages run in sequence: {m}"))


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-forward")
def test_pipe_registers_the_stages_parameters(pipe_factory):
    stages = make_stages(2)
    pipe = pipe_factory(stages, 2)
    x = torch.randn(5, 6)
    torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL,
                               msg=lambda m: f"contract (Returns): 2 stages, 5 rows: not the stages run in sequence: {m}")
    expected = sum(len(list(s.parameters())) for s in stages)
    assert len(list(pipe.parameters())) == expected, (
        f"Pipe(2 stages).parameters() holds {len(list(pipe.parameters()))} tensors; expected the stages' {expected} "
        "(register the stages as submodules)")


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
        case = f"3 stages, 10 rows at split_size 3, SGD step {step}"
        torch.testing.assert_close(x_pipe.grad, x_reference.grad, rtol=RTOL, atol=ATOL,
                                   msg=lambda m: f"{case}: the gradient of the input is not the sequential run's: {m}")
        for index, (ours, theirs) in enumerate(zip(pipe.parameters(), (p for s in reference for p in s.parameters()))):
            assert ours.grad is not None, f"{case}: parameter {index} of the stages got no gradient (detached?)"
            torch.testing.assert_close(ours.grad, theirs.grad, rtol=RTOL, atol=ATOL, msg=lambda m: (
                f"{case}: the gradient of parameter {index} of the stages is not the sequential run's: {m}"))
        pipe_optimizer.step()
        reference_optimizer.step()
        pipe_optimizer.zero_grad()
        reference_optimizer.zero_grad()
    for index, (ours, theirs) in enumerate(zip(pipe.parameters(), (p for s in reference for p in s.parameters()))):
        torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=ATOL, msg=lambda m: (
            f"after 3 SGD steps, parameter {index} of the stages is not the sequential run's: {m}"))


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
    assert not out.requires_grad, f"under {mode.__name__} the Pipe's output requires grad; expected no autograd graph"
    assert all(not built for stage in stages for built in stage.built_graph), (
        "a stage built an autograd graph although the caller ran under no_grad: "
        "grad mode is thread-local, see pitfall 1"
    )
    assert torch.is_grad_enabled(), f"after the forward under {mode.__name__}, grad mode is still off on the calling thread"


class StageFailure(Exception):
    pass


def raised_by(forward, kind, case):
    """The exception ``forward()`` raised, or a failure saying what happened instead of a ``kind``."""
    try:
        result = forward()
    except (Exception, kind) as error:  # noqa: BLE001 - any other exception is named in the message
        if isinstance(error, kind):
            return error
        pytest.fail(f"contract (Raises): {case}: the caller got {type(error).__name__}: {error}; expected the stage's "
                    f"own {kind.__name__}")
    pytest.fail(f"contract (Raises): {case}: forward returned a {type(result).__name__} instead of raising; expected the "
                f"stage's {kind.__name__} to reach the caller")


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
@pytest.mark.criterion("2.2-exceptions", "2.2-exception-unchanged")
def test_stage_exception_reaches_caller_and_pipe_is_reusable(pipe_factory):
    torch.manual_seed(0)
    stages = [nn.Linear(6, 6), FailsOnce(), nn.Linear(6, 6)]
    pipe = pipe_factory(stages, 2)
    workers = pipe.workers
    caught = raised_by(lambda: pipe(torch.randn(6, 6)), StageFailure, "3 stages, 6 rows at split_size 2, stage 1 "
                       "raises on microbatch 1")
    assert caught is stages[1].raised, (
        f"contract (Raises): the caller got a {type(caught).__name__} ({caught}) that is not the object stage 1 "
        "raised; expected that very object, not a copy or a wrapper")
    stages[1].fail = False
    x = torch.randn(6, 6)
    torch.testing.assert_close(pipe(x), run_sequentially(stages, x), rtol=RTOL, atol=ATOL,
                               msg=lambda m: "the call after the failed one is not the stages run in sequence "
                                             f"({m}); a result of the failed call's wave left in the workers does "
                                             "this: receive the rest of the wave before raising")
    assert pipe.workers is workers, "contract (Guarantees): after an error the Pipe runs on new workers: self.workers serves every call"


class FailsOnCall(nn.Module):
    """Raises a StageFailure of its own on its call number ``call`` (0, 1, ...: a stage runs the
    microbatches in order, so that is microbatch ``call``) while ``fail`` is set; None: never."""

    def __init__(self, call):
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.call, self.calls, self.fail, self.raised = call, 0, True, None

    def forward(self, x):
        self.calls += 1
        if self.fail and self.calls - 1 == self.call:
            self.raised = StageFailure(f"this stage refused microbatch {self.call}")
            raise self.raised
        return self.linear(x)


SEVERAL_FAILURES = {  # (stages, rows, split_size, {stage: the microbatch it raises on}): all in one wave
    "2 stages, wave 1": (2, 2, 1, {0: 1, 1: 0}),
    "3 stages, wave 2": (3, 6, 2, {0: 2, 1: 1, 2: 0}),
}


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-exception-unchanged")
@pytest.mark.parametrize("kind", sorted(SEVERAL_FAILURES))
def test_the_first_exception_in_schedule_order_reaches_the_caller(pipe_factory, kind):
    count, rows, split_size, fail_on = SEVERAL_FAILURES[kind]
    stages = [FailsOnCall(fail_on.get(j)) for j in range(count)]
    case = (f"{count} stages, {rows} rows at split_size {split_size}, stage j raising on microbatch {fail_on} (all "
            "in one wave)")
    pipe = pipe_factory(stages, split_size)
    caught = raised_by(lambda: pipe(torch.randn(rows, 6)), StageFailure, case)
    if stages[0].raised is None:
        pytest.fail(f"{case}: stage 0 was never given microbatch {fail_on[0]}; see the tests of the microbatches and "
                    "the call order")
    culprit = next((j for j, stage in enumerate(stages) if caught is stage.raised), None)
    got = f"stage {culprit}'s exception" if culprit is not None else repr(caught)
    assert culprit == 0, (
        f"contract (Raises): {case}: the caller got {got}; expected the first in schedule order: stage 0's, the first "
        "pair the wave lists (keep the first error of the wave, do not overwrite it)")


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-exceptions")
def test_a_wave_where_every_stage_fails_is_taken_back_whole(pipe_factory):
    stages = [FailsOnCall(2 - j) for j in range(3)]  # wave 2 = [(2, 0), (1, 1), (0, 2)]: every pair raises
    pipe = pipe_factory(stages, 2)
    raised_by(lambda: pipe(torch.randn(6, 6)), StageFailure, "3 stages, 6 rows at split_size 2, every pair of wave 2 raising")
    for stage in stages:
        stage.fail = False
    x = torch.randn(6, 6)
    try:
        out = pipe(x)
    except StageFailure as error:
        pytest.fail(f"the call after the failed one raised {error!r}: an error of the failed call's wave was left in the "
                    "workers; receive every pair of the wave, whatever else raises in it, before raising")
    torch.testing.assert_close(out, run_sequentially(stages, x), rtol=RTOL, atol=ATOL,
                               msg=lambda m: "the call after the failed one is not the stages run in sequence "
                                             f"({m}); a result of the failed call's wave left in the workers does "
                                             "this: receive every pair of the wave before raising")


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-exceptions")
def test_no_thread_alive_after_close():
    before = set(threading.enumerate())
    pipe = Pipe(make_stages(3), split_size=2)
    pipe(torch.randn(4, 6))
    pipe.close()
    left = sorted(thread.name for thread in set(threading.enumerate()) - before)
    assert not left, f"contract (Guarantees): after Pipe.close() these threads are still alive: {left}"


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
    # exact: zeros plus whole numbers are exact; the caller's x against its own copy
    assert torch.equal(out, x + num_stages), f"{num_stages} stages that add 1 each: expected x + {num_stages}, got {out.flatten().tolist()}"
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


def calling_thread_log(pipe, x):
    """The torch operations (name, whether new data) and the submits and receives of the calling
    thread while ``pipe`` forwards ``x``."""
    log, thread = [], threading.get_ident()

    def on_event(event):
        if event.kind in ("submit", "receive") and threading.get_ident() == thread:
            log.append((event.kind, False))

    with runtime.observe(on_event), CallingThreadOps(log):
        pipe(x)
    return log


def check_only_views_before_the_last_receive(log, batch):
    last_receive = max(i for i, (name, _) in enumerate(log) if name == "receive")
    for name, fresh in log[:last_receive]:
        assert name not in ("to", "cuda", "cpu", "clone", "copy_") and not fresh, (
            f"Pipe.forward ran torch `{name}` on the calling thread before its last receive, on {batch}: moving a "
            "microbatch (.to(device)), copying or computing on it belongs inside the submitted callable "
            "(only views such as torch.split before, only torch.cat after the last receive)"
        )


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-transfers", "2.3-speedup")
def test_microbatches_are_moved_and_computed_inside_the_submitted_callables(pipe_factory):
    # Distinct devices that are all the CPU, so that a move guarded by `if x.device != device`
    # happens here as it would between two GPUs.
    pipe = pipe_factory(make_stages(3), 2, devices=["cpu:0", "cpu", "cpu:0"])
    check_only_views_before_the_last_receive(calling_thread_log(pipe, torch.randn(6, 6)), "a contiguous batch")


NOT_CONTIGUOUS = {
    "transposed": lambda: torch.randn(6, 6).t(),
    "every other row": lambda: torch.randn(12, 6)[::2],
    "expanded": lambda: torch.randn(1, 6).expand(6, -1),
}


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-transfers")
@pytest.mark.parametrize("layout", sorted(NOT_CONTIGUOUS))
def test_a_batch_that_is_not_contiguous_is_not_copied_on_the_calling_thread(pipe_factory, layout):
    # x.contiguous() of such a batch copies all of it before any stage starts; a stage that needs
    # contiguous memory gets it inside the submitted callable.
    pipe = pipe_factory(make_stages(3), 2, devices=["cpu:0", "cpu", "cpu:0"])
    log = calling_thread_log(pipe, NOT_CONTIGUOUS[layout]())
    check_only_views_before_the_last_receive(log, f"a batch that is not contiguous ({layout})")


class Flatten(nn.Module):
    """A stage without parameters for batches of any rank: tanh of every number."""

    def forward(self, x):
        return torch.tanh(x * 1.5 - 0.25)


FORWARD_KINDS = {
    "1-D batch": lambda: ([Flatten(), Flatten()], torch.randn(7, dtype=torch.float64)),
    "4-D batch": lambda: ([Flatten(), Flatten()], torch.randn(7, 2, 1, 3)),
    "float32 and one row": lambda: (make_stages(2), torch.randn(1, 6, dtype=torch.float32)),
    "float64": lambda: ([stage.double() for stage in make_stages(3)], torch.randn(7, 6, dtype=torch.float64)),
    "bfloat16": lambda: ([stage.to(torch.bfloat16) for stage in make_stages(2)], torch.randn(5, 6, dtype=torch.bfloat16)),
    "frozen stage": lambda: ([make_stages(1)[0].requires_grad_(False), *make_stages(1, seed=1)], torch.randn(7, 6)),
    "tuple of stages": lambda: (tuple(make_stages(2)), torch.randn(7, 6)),
    "ModuleList of stages": lambda: (nn.ModuleList(make_stages(3)), torch.randn(7, 6)),
}


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-forward")
@pytest.mark.parametrize("kind", sorted(FORWARD_KINDS))
def test_pipe_matches_sequential_across_the_contract(pipe_factory, kind):
    stages, x = FORWARD_KINDS[kind]()
    pipe = pipe_factory(stages, 2)
    rtol, atol = (2e-2, 2e-2) if x.dtype == torch.bfloat16 else (RTOL, ATOL)  # other batch sizes round otherwise
    for call, batch in enumerate((x, x[: max(1, x.shape[0] - 2)]), start=1):  # the second call: another size
        torch.testing.assert_close(pipe(batch), run_sequentially(list(stages), batch), rtol=rtol, atol=atol,
                                   msg=lambda m: f"contract (Returns): {kind}, call {call}: not the stages run in sequence: {m}")


INPUT_KINDS = {  # (rows, split_size, requires_grad, under no_grad)
    "a batch": (5, 2, False, False), "a batch that requires grad": (5, 2, True, False),
    "one microbatch": (4, 8, False, False), "one microbatch that requires grad": (4, 8, True, False),
    "a batch that requires grad, under no_grad": (6, 2, True, True),
}


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-input-unchanged")
@pytest.mark.parametrize("kind", sorted(INPUT_KINDS))
def test_the_callers_input_is_left_as_it_was(pipe_factory, kind):
    rows, split_size, requires_grad, no_grad = INPUT_KINDS[kind]
    pipe = pipe_factory(make_stages(2), split_size)
    x = torch.randn(rows, 6).requires_grad_(requires_grad)
    before = x.detach().clone()
    with torch.no_grad() if no_grad else torch.enable_grad():
        pipe(x)
    # exact: zeros plus whole numbers are exact; the caller's x against its own copy
    assert torch.equal(x.detach(), before), f"contract (Guarantees): {kind}: forward changed the caller's x in place"
    assert x.requires_grad == requires_grad and x.grad_fn is None, (
        f"contract (Guarantees): {kind}: the caller's x had requires_grad={requires_grad}; after the forward it has "
        f"requires_grad={x.requires_grad}" + (" and is part of an autograd graph" if x.grad_fn is not None else "")
    )
    assert x.grad is None, f"contract (Guarantees): {kind}: after a forward alone (no backward) the caller's x has a .grad"


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-input-unchanged")
@pytest.mark.parametrize("shape", [(6, 6), (5, 2, 3)])
def test_a_batch_that_is_not_contiguous(pipe_factory, shape):
    stages = [Flatten(), Flatten()]
    pipe = pipe_factory(stages, 2)
    x = torch.randn(*shape).transpose(0, -1).contiguous().transpose(0, -1)  # the same shape, rows apart in memory
    try:
        out = pipe(x)
    except Exception as error:  # noqa: BLE001 - named in the message
        pytest.fail(f"contract (Args): a batch of shape {list(shape)} that is not contiguous: the forward raised "
                    f"{type(error).__name__}: {error} (.view() needs contiguous memory; .reshape() does not)")
    torch.testing.assert_close(out, run_sequentially(stages, x), rtol=RTOL, atol=ATOL, msg=lambda m: (
        f"contract (Args): a batch of shape {list(shape)} that is not contiguous: not the stages run in sequence: {m}"))


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-backward")
def test_gradients_of_two_backwards_add_up(pipe_factory):
    stages, reference = make_stages(2, seed=3), make_stages(2, seed=3)
    pipe = pipe_factory(stages, 2)
    x, x_reference = torch.randn(5, 6).requires_grad_(), None
    x_reference = x.detach().clone().requires_grad_()
    for _ in range(2):  # no zero_grad in between: gradients accumulate, as for the stages run in sequence
        pipe(x).square().sum().backward()
        run_sequentially(reference, x_reference).square().sum().backward()
    torch.testing.assert_close(x.grad, x_reference.grad, rtol=RTOL, atol=ATOL, msg=lambda m: (
        f"contract (Returns): two forwards and backwards on the same batch: x.grad is not the sum of both: {m}"))
    for index, (ours, theirs) in enumerate(zip(pipe.parameters(), (p for s in reference for p in s.parameters()))):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=RTOL, atol=ATOL, msg=lambda m: (
            f"contract (Returns): two backwards: the gradient of parameter {index} is not the sum of both: {m}"))


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-backward")
def test_frozen_stages_need_no_gradient_but_pass_one_to_the_input(pipe_factory):
    stages = [stage.requires_grad_(False) for stage in make_stages(2)]
    pipe = pipe_factory(stages, 2)
    out = pipe(torch.randn(5, 6))
    assert not out.requires_grad, ("contract (Returns): every stage frozen, a batch without requires_grad: the output "
                                   "requires grad; the stages run in sequence give one that does not")
    x = torch.randn(5, 6, requires_grad=True)
    pipe(x).sum().backward()
    expected = torch.autograd.grad(run_sequentially(stages, x).sum(), x)[0]
    assert x.grad is not None, "contract (Returns): every stage frozen: x.grad is None; the gradient must reach x"
    torch.testing.assert_close(x.grad, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"every stage frozen: x.grad: {m}")


class HeldOnce(nn.Module):
    """Adds 1; on a microbatch whose first row holds ``row`` it first waits, once, until ``release``
    is set (a stage that hangs)."""

    def __init__(self, row):
        super().__init__()
        self.row, self.release = row, threading.Event()

    def forward(self, x):
        if x[0, 0] == self.row and not self.release.is_set():
            self.release.wait(5)
        return x + 1


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-exceptions", "2.2-exception-unchanged")
def test_a_timeout_reaches_the_caller_and_the_pipe_works_again_on_the_same_workers(pipe_factory):
    held = HeldOnce(row=3)  # stage 1's microbatch 1 (rows 2, 3 plus 1), alone in the last wave: any more submits retry
    pipe = pipe_factory([Sleeps(0), held], 2, timeout=0.5)
    workers, events = pipe.workers, []
    try:
        with runtime.observe(events.append):
            result = pipe(torch.arange(4.0).unsqueeze(1))
    except TimeoutError:
        pass
    except Exception as error:  # noqa: BLE001 - named in the message
        pytest.fail(f"contract (Args: timeout): stage 1 did not finish within timeout=0.5: the caller got "
                    f"{type(error).__name__}: {error}; expected the TimeoutError of StageWorkers.receive")
    else:
        pytest.fail(f"contract (Args: timeout): stage 1 did not finish within timeout=0.5, yet forward returned "
                    f"{result.flatten().tolist()}: the TimeoutError must reach the caller (not swallowed, not retried)")
    finally:
        held.release.set()
    submits = [event.stage for event in events if event.kind == "submit"]
    assert submits == [0, 0, 1, 1], (f"contract (Args: timeout): the Pipe submitted to the stages {submits} before the "
                                     "TimeoutError reached the caller; expected the schedule's [0, 0, 1, 1]: a timed-out "
                                     "call is not retried")
    x = torch.arange(4.0).unsqueeze(1) + 10
    torch.testing.assert_close(pipe(x), x + 2, msg=lambda m: f"after a timeout the next forward is wrong: {m}")
    assert pipe.workers is workers, ("contract (Guarantees): after a timeout the Pipe runs on new workers: self.workers "
                                     "serves every call until close()")


class Interrupt(BaseException):
    """Not an Exception, as KeyboardInterrupt is not."""


class FailsOn(nn.Module):
    """Counts its calls; raises ``error`` on call number ``on`` (0-based) while ``fail`` is set."""

    def __init__(self, on, error):
        super().__init__()
        self.on, self.error, self.calls, self.fail, self.raised = on, error, 0, True, None

    def forward(self, x):
        self.calls += 1
        if self.fail and self.calls - 1 == self.on:
            self.raised = self.error("refused")
            raise self.raised
        return x + 1


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-base-exception")
def test_a_base_exception_mid_wave_reaches_the_caller_and_the_pipe_still_works(pipe_factory):
    # 3 stages, 3 microbatches; stage 1 fails on microbatch 2, in wave 3 with (1, 2) still to take back
    stages = [FailsOn(-1, StageFailure), FailsOn(2, Interrupt), FailsOn(-1, StageFailure)]
    pipe = pipe_factory(stages, 2)
    raised_by(lambda: pipe(torch.zeros(6, 1)), Interrupt, "3 stages, 6 rows at split_size 2, stage 1 raises a "
              "BaseException on microbatch 2")
    stages[1].fail = False
    x = torch.arange(6.0).unsqueeze(1)
    torch.testing.assert_close(pipe(x), x + 3, msg=lambda m: (
        "contract (Raises): after a stage raised a BaseException the next call is wrong: take back the rest of "
        f"the wave first: {m}"))


@pytest.mark.problem_2_2
@pytest.mark.criterion("2.2-exception-unchanged")
def test_no_later_wave_runs_after_an_error(pipe_factory):
    stages = [FailsOn(0, StageFailure), FailsOn(-1, StageFailure), FailsOn(-1, StageFailure)]
    pipe = pipe_factory(stages, 2)
    raised_by(lambda: pipe(torch.zeros(6, 1)), StageFailure, "3 stages, 6 rows at split_size 2, stage 0 raises on "
              "microbatch 0")
    calls = [stage.calls for stage in stages]
    assert calls == [1, 0, 0], (
        f"contract (Raises): stage 0 failed in wave 0, yet the stages ran {calls} microbatches: the forward stops "
        "once the wave the error was raised in is taken back"
    )


# ---------------------------------------------------------------- Problem 2.4


def slowest_stage(costs, sizes):
    starts = list(itertools.accumulate([0, *sizes]))
    return max(sum(costs[a:b]) for a, b in zip(starts, starts[1:]))


def least_slowest_stage(costs, num_stages):
    """Every split, tried (only for a handful of layers)."""
    cuts = itertools.combinations(range(1, len(costs)), num_stages - 1)
    return min(slowest_stage(costs, [b - a for a, b in zip((0, *cut), (*cut, len(costs)))]) for cut in cuts)


def check_split(costs, num_stages, sizes):
    """``sizes`` is an optimal split of ``costs`` (its values: their types are 2.4-arguments')."""
    call = f"balance_stages({costs}, {num_stages})"
    assert isinstance(sizes, (list, tuple)) and all(int(n) == n for n in sizes), (
        f"contract (Returns): {call} returned {sizes!r}; expected a list of ints")
    sizes = [int(n) for n in sizes]
    assert len(sizes) == num_stages and min(sizes) >= 1 and sum(sizes) == len(costs), (
        f"contract (Returns): {call} returned {sizes}; expected {num_stages} stages of at least one layer, {len(costs)} in all"
    )
    least = least_slowest_stage(costs, num_stages)
    assert slowest_stage(costs, sizes) <= least + 1e-9 * max(abs(least), sum(costs)), (
        f"contract (Returns): {call} returned {sizes}, whose slowest stage costs {slowest_stage(costs, sizes):.6g}; "
        f"the least possible is {least:.6g}"
    )


@pytest.mark.problem_2_4
@pytest.mark.criterion("2.4-balance")
def test_the_lectures_output_layer():
    costs = [1] * 7 + [3.3]
    check_split(costs, 4, balance_stages(costs, 4))
    check_split(costs, 2, balance_stages(costs, 2))
    check_split(costs[::-1], 4, balance_stages(costs[::-1], 4))  # the same sizes, another answer


@pytest.mark.problem_2_4
@pytest.mark.criterion("2.4-balance")
@given(costs=st.lists(st.floats(0, 10, allow_nan=False) | st.integers(0, 9), min_size=1, max_size=8), data=st.data())
def test_the_least_slowest_stage(costs, data):
    num_stages = data.draw(st.integers(1, len(costs)), label="num_stages")
    check_split(costs, num_stages, balance_stages(costs, num_stages))


BALANCE_EDGES = {  # (costs, num_stages)
    "one layer": ([5], 1), "a stage per layer": ([2.5, 0, 0, 7], 4), "all zeros": ([0, 0, 0, 0], 2),
    "all equal (ties)": ([2] * 9, 4), "integer-valued floats": ([3.0, 1.0, 2.0, 2.0, 4.0], 3),
    "FLOPs": ([c * 2.54e12 for c in (1, 1, 1, 1, 1, 1, 1, 3.3)], 3), "seconds": ([c * 1e-6 for c in (3, 1, 4, 1, 5, 9)], 4),
    "huge ints": ([10**20, 1, 10**20 + 7, 3, 10**19], 3), "one layer far larger": ([1e-3] * 4 + [1e9] + [1e-3] * 4, 3),
}


@pytest.mark.problem_2_4
@pytest.mark.criterion("2.4-balance")
@pytest.mark.parametrize("kind", sorted(BALANCE_EDGES))
def test_edges_and_costs_of_other_scales(kind):
    costs, num_stages = BALANCE_EDGES[kind]
    check_split(costs, num_stages, balance_stages(list(costs), num_stages))


@pytest.mark.problem_2_4
@pytest.mark.criterion("2.4-balance")
def test_the_largest_sizes_are_fast():
    costs = [0.1 * (i % 7) + 1 for i in range(64)]
    started = time.process_time()
    sizes = balance_stages(costs, 16)
    seconds = time.process_time() - started
    assert len(sizes) == 16 and sum(sizes) == 64, f"contract (Returns): 64 layers on 16 stages gave {sizes}"
    assert seconds < 5, f"contract: 64 layers on 16 stages took {seconds:.1f} s of CPU time; an exact polynomial method takes milliseconds"


BAD_BALANCE_CALLS = [([], 1, None), ([1, -1], 1, None), ([1, float("nan")], 1, None), ([1, float("inf")], 1, None),
                     (["1"], 1, None), ([1, True, 2], 2, ([1, 1, 2], 2)), ([1, None], 1, None), ([1, 2], 0, None),
                     ([1, 2], 3, None), ([1, 2], True, ([1, 2], 1)), ([1, 2], 2.0, ([1, 2], 2))]


@pytest.mark.problem_2_4
@pytest.mark.criterion("2.4-arguments")
@pytest.mark.parametrize("costs, num_stages, twin", BAD_BALANCE_CALLS)
def test_bad_arguments_raise_value_error_at_the_call(costs, num_stages, twin):
    call = f"balance_stages({costs!r}, {num_stages!r})"
    if twin is not None:
        balance_stages(*twin)  # a call with equal arguments first: each call is checked on its own
    try:
        result = balance_stages(costs, num_stages)
    except ValueError:
        return
    except Exception as error:  # noqa: BLE001 - named in the message
        pytest.fail(f"contract (Raises): {call} raised {type(error).__name__}: {error}; expected ValueError")
    pytest.fail(f"contract (Raises): {call} returned {result!r}; expected ValueError")


ADMITTED_COSTS = {  # what the contract admits besides a list of Python numbers: (costs as passed, num_stages, as a list)
    "a tuple": (lambda: (tuple([1] * 7 + [3.3]), 4), [1] * 7 + [3.3]),
    "a generator": (lambda: ((c for c in [2, 7, 1, 8, 2, 8]), 3), [2, 7, 1, 8, 2, 8]),
    "a numpy float64 array": (lambda: (np.array([0.5, 3.25, 1, 2, 4.5]), 2), [0.5, 3.25, 1, 2, 4.5]),
    "a numpy int64 array": (lambda: (np.array([3, 1, 4, 1, 5, 9, 2, 6]), 3), [3, 1, 4, 1, 5, 9, 2, 6]),
    "numpy.int64 stages": (lambda: ([4, 4, 1, 1, 1, 1], np.int64(2)), [4, 4, 1, 1, 1, 1]),
}


@pytest.mark.problem_2_4
@pytest.mark.criterion("2.4-arguments")
@pytest.mark.parametrize("kind", sorted(ADMITTED_COSTS))
def test_every_kind_of_costs_the_contract_admits(kind):
    make, costs = ADMITTED_COSTS[kind]
    given, num_stages = make()
    try:
        sizes = balance_stages(given, num_stages)
    except Exception as error:  # noqa: BLE001 - named in the message
        pytest.fail(f"contract (Args): {kind}: balance_stages raised {type(error).__name__}: {error}; the contract admits it")
    check_split(costs, int(num_stages), sizes)
    kinds = sorted({type(n).__name__ for n in sizes})
    assert type(sizes) is list and kinds == ["int"], (
        f"contract (Returns): {kind}: balance_stages returned a {type(sizes).__name__} of {kinds}; expected a list of Python ints")


@pytest.mark.problem_2_4
@pytest.mark.criterion("2.4-arguments")
def test_the_callers_costs_are_left_as_they_were_and_every_result_is_new():
    costs = [3.0, 1.0, 2.0, 5.0, 0.5]
    sizes = balance_stages(costs, 3)
    assert costs == [3.0, 1.0, 2.0, 5.0, 0.5], f"contract (Args): balance_stages changed the caller's costs to {costs}"
    assert sizes is not costs and type(sizes) is list, "contract (Returns): a new list"
    right = list(sizes)
    sizes.append(99)  # the caller's to change
    again = balance_stages(list(costs), 3)
    assert again is not sizes and again == right, (
        f"contract (Returns): a second equal call returned {again}{' (the same list object)' if again is sizes else ''}; "
        f"expected a new list {right}: the caller changed the first result")
