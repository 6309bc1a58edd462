"""Tests of the provided runtime (StageWorkers) and of Pipe's provided constructor."""
import re
import threading
import time

import pytest
import torch
from torch import nn

from minitorch import runtime
from minitorch.pipeline import Pipe
from minitorch.runtime import StageWorkers


@pytest.fixture
def workers():
    with StageWorkers(["cpu", "cpu"], timeout=5) as stage_workers:
        yield stage_workers


def test_results_come_back_in_submit_order_per_stage(workers):
    for value in range(5):
        workers.submit(0, lambda v=value: v * 10)
    workers.submit(1, lambda: "other stage")
    assert [workers.receive(0) for _ in range(5)] == [0, 10, 20, 30, 40]
    assert workers.receive(1) == "other stage"


def test_one_thread_per_stage_even_on_one_device(workers):
    names = []
    workers.submit(0, lambda: names.append(threading.current_thread().name))
    workers.submit(1, lambda: names.append(threading.current_thread().name))
    workers.receive(0), workers.receive(1)
    assert sorted(names) == ["stage-0", "stage-1"]
    assert len({t.ident for t in workers.threads()}) == 2


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_grad_mode_is_captured_at_submit(workers, mode):
    weight = torch.ones(2, requires_grad=True)
    with mode():
        workers.submit(0, lambda: (torch.is_grad_enabled(), (weight * 2).requires_grad))
    workers.submit(1, lambda: (torch.is_grad_enabled(), (weight * 2).requires_grad))
    assert workers.receive(0) == (False, False)
    assert workers.receive(1) == (True, True)


def test_inference_mode_is_replayed(workers):
    with torch.inference_mode():
        workers.submit(0, torch.is_inference_mode_enabled)
    assert workers.receive(0) is True


class Custom(Exception):
    pass


def test_receive_reraises_the_same_exception_object(workers):
    raised = Custom("boom")

    def fails():
        raise raised

    workers.submit(0, fails)
    with pytest.raises(Custom) as info:
        workers.receive(0)
    assert info.value is raised
    assert any(frame.name == "fails" for frame in info.traceback), "the stage's frame was lost"
    workers.submit(0, lambda: "still alive")
    assert workers.receive(0) == "still alive"


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(3)])
def test_base_exceptions_do_not_kill_the_stage_thread(workers, error):
    def fails():
        raise error

    workers.submit(0, fails)
    with pytest.raises(type(error)):
        workers.receive(0)
    workers.submit(0, lambda: 7)
    assert workers.receive(0) == 7


def test_receive_with_nothing_pending_fails_at_once(workers):
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="nothing pending on stage 1"):
        workers.receive(1)
    assert time.monotonic() - start < 1


def test_stuck_stage_times_out_naming_the_stage_and_late_result_is_dropped():
    release = threading.Event()
    with StageWorkers(["cpu", "cpu"], timeout=0.2) as stage_workers:
        stage_workers.submit(1, lambda: release.wait(5) and "late")
        with pytest.raises(TimeoutError, match="stage 1"):
            stage_workers.receive(1)
        release.set()
        stage_workers.submit(1, lambda: "fresh")
        assert stage_workers.receive(1) == "fresh"


def test_close_is_idempotent_and_joins_every_thread():
    stage_workers = StageWorkers(["cpu"] * 3)
    threads = stage_workers.threads()
    stage_workers.close()
    stage_workers.close()
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(RuntimeError, match="closed"):
        stage_workers.submit(0, lambda: None)


def test_close_raises_when_a_stage_never_returns():
    release = threading.Event()
    stage_workers = StageWorkers(["cpu", "cpu"], timeout=0.2)
    stage_workers.submit(1, lambda: release.wait(5))
    with pytest.raises(RuntimeError, match=r"\[1\] still running"):
        stage_workers.close()
    release.set()
    stage_workers.threads()[1].join(5)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda w: w.submit(2, lambda: None), ValueError, r"stage must be an int in \[0, 1\], got 2"),
        (lambda w: w.submit(-1, lambda: None), ValueError, "got -1"),
        (lambda w: w.receive("0"), ValueError, "got '0'"),
        (lambda w: w.submit(0, 42), TypeError, "callable"),
    ],
)
def test_bad_arguments_are_named(workers, call, error, message):
    with pytest.raises(error, match=message):
        call(workers)


@pytest.mark.parametrize(
    "kwargs, message",
    [(dict(devices=[]), "at least one device"), (dict(devices=["cpu"], timeout=0), "timeout must be > 0")],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StageWorkers(**kwargs)


def test_observer_sees_every_event_in_order(workers):
    events = []
    with runtime.observe(events.append):
        workers.submit(0, lambda: 1)
        workers.submit(1, lambda: 2)
        workers.receive(0)
        workers.receive(1)
    workers.submit(0, lambda: 3)
    workers.receive(0)
    calls = [(e.kind, e.stage) for e in events if e.kind in ("submit", "receive")]
    assert calls == [("submit", 0), ("submit", 1), ("receive", 0), ("receive", 1)]
    worker_side = [e for e in events if e.kind in ("start", "finish")]
    assert {e.thread for e in worker_side} == {"stage-0", "stage-1"}
    assert len(events) == 8, "events after the with block must not be recorded"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(stages=[], split_size=1), "at least one stage"),
        (dict(stages=[nn.Linear(2, 2)], split_size=0), "split_size must be an int >= 1"),
        (dict(stages=[nn.Linear(2, 2)], split_size=2.5), "split_size must be an int >= 1"),
        (dict(stages=[nn.Linear(2, 2)], split_size=True), "split_size must be an int >= 1"),
        (dict(stages=[lambda x: x], split_size=1), "stage 0 must be an nn.Module"),
        (dict(stages=[nn.Linear(2, 2)], split_size=1, devices=["cpu", "cpu"]), "one device per stage"),
    ],
)
def test_bad_pipe_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Pipe(**kwargs)


def test_pipe_keeps_stages_as_module_list_and_closes():
    stages = [nn.Linear(2, 2), nn.Linear(2, 2)]
    with Pipe(stages, split_size=1) as pipe:
        assert isinstance(pipe.stages, nn.ModuleList)
        assert pipe.devices == [torch.device("cpu")] * 2
        threads = pipe.workers.threads()
    assert not any(t.is_alive() for t in threads)


def test_pipeline_demo_prints_the_lecture_call_order(capsys):
    from minitorch.demos import pipeline_demo

    pipeline_demo()
    out = capsys.readouterr().out
    assert "k = 2: [(2, 0), (1, 1), (0, 2)]" in out
    assert "wave 2: submit(0)  submit(1)  submit(2)  receive(0)  receive(1)  receive(2)" in out
    # Not 0.0: the Pipe multiplies 2-row microbatches and the sequential run one 6-row batch, and
    # a CPU's kernels may round the two shapes differently (6.0e-08 on an AVX-512 machine).
    (difference,) = re.findall(r"max \|Pipe - sequential\| = (\S+)", out)
    assert float(difference) < 1e-5, out
