"""The provided pipelined training step (forward and backward by a schedule)."""
import threading

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from minitorch.executor import run_schedule, sequential_step, stage_plans
from minitorch.runtime import StageWorkers
from minitorch.schedules import Action, format_schedule, simulate
from minitorch.timeline import generator

RTOL, ATOL = 1e-4, 1e-6


def gpipe_order(num_stages, num_microbatches):
    return [[f"F{m}" for m in range(num_microbatches)] + [f"B{m}" for m in range(num_microbatches)]] * num_stages


def one_f_one_b_order(num_stages, num_microbatches):
    """Warm-up K-s-1 forwards, then alternate, then the remaining backwards."""
    orders = []
    for stage in range(num_stages):
        warmup = min(num_stages - stage - 1, num_microbatches)
        order = [f"F{m}" for m in range(warmup)]
        for m in range(num_microbatches - warmup):
            order += [f"F{warmup + m}", f"B{m}"]
        order += [f"B{m}" for m in range(num_microbatches - warmup, num_microbatches)]
        orders.append(order)
    return orders


def make_stages(num_stages, seed):
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8)) for _ in range(num_stages)]


@pytest.mark.parametrize("order", [gpipe_order, one_f_one_b_order])
@pytest.mark.parametrize("num_stages, num_microbatches, batch", [(2, 4, 16), (3, 5, 13), (4, 8, 8), (2, 1, 3)])
def test_three_steps_match_the_sequential_step(order, num_stages, num_microbatches, batch):
    pipelined, reference = make_stages(num_stages, seed=3), make_stages(num_stages, seed=3)
    opt_p = torch.optim.SGD([p for s in pipelined for p in s.parameters()], lr=0.1)
    opt_r = torch.optim.SGD([p for s in reference for p in s.parameters()], lr=0.1)
    schedule = order(num_stages, num_microbatches)
    with StageWorkers(["cpu"] * num_stages) as workers:
        for _ in range(3):
            x, y = torch.randn(batch, 8), torch.randn(batch, 8)
            report = run_schedule(workers, pipelined, schedule, x, y, F.mse_loss)
            expected_loss = sequential_step(reference, ["cpu"] * num_stages, x, y, F.mse_loss)
            assert report.loss == pytest.approx(expected_loss, rel=RTOL)
            assert report.executed == schedule
            for ours, theirs in zip(opt_p.param_groups[0]["params"], opt_r.param_groups[0]["params"]):
                torch.testing.assert_close(ours.grad, theirs.grad, rtol=RTOL, atol=ATOL)
            opt_p.step(), opt_r.step(), opt_p.zero_grad(), opt_r.zero_grad()
    for ours, theirs in zip(opt_p.param_groups[0]["params"], opt_r.param_groups[0]["params"]):
        torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=ATOL)


def test_peak_live_activations_gpipe_m_and_1f1b_k_minus_s():
    num_stages, num_microbatches = 4, 8
    with StageWorkers(["cpu"] * num_stages) as workers:
        x, y = torch.randn(16, 8), torch.randn(16, 8)
        gpipe = run_schedule(workers, make_stages(4, 0), gpipe_order(4, 8), x, y, F.mse_loss)
        one_f_one_b = run_schedule(workers, make_stages(4, 0), one_f_one_b_order(4, 8), x, y, F.mse_loss)
    assert gpipe.peak_live == [num_microbatches] * num_stages
    assert one_f_one_b.peak_live == [4, 3, 2, 1]


class Boom(Exception):
    pass


class FailsInForward(nn.Module):
    def forward(self, x):
        raise Boom("stage 1 failed")


def test_a_failing_stage_raises_its_own_error_and_does_not_hang_the_others():
    stages = [nn.Linear(8, 8), FailsInForward(), nn.Linear(8, 8)]
    with StageWorkers(["cpu"] * 3, timeout=30) as workers:
        with pytest.raises(Boom, match="stage 1 failed"):
            run_schedule(workers, stages, gpipe_order(3, 2), torch.randn(4, 8), torch.randn(4, 8), F.mse_loss)
        report = run_schedule(
            workers, [nn.Linear(8, 8) for _ in range(3)], gpipe_order(3, 2), torch.randn(4, 8), torch.randn(4, 8), F.mse_loss
        )
    assert report.executed == gpipe_order(3, 2)


def test_a_deadlocking_schedule_is_refused_before_any_stage_runs():
    # Stage 0 waits for B0's gradient; stage 1 waits for F1's activation first.
    schedule = [["F0", "B0", "F1", "B1"], ["F1", "F0", "B0", "B1"]]
    stages = make_stages(2, 0)
    with StageWorkers(["cpu"] * 2, timeout=0.5) as workers:
        with pytest.raises(ValueError, match=r"deadlock.*device 0 step 1 \(B0\)"):
            run_schedule(workers, stages, schedule, torch.randn(4, 8), torch.randn(4, 8), F.mse_loss)
    assert all(p.grad is None for stage in stages for p in stage.parameters())


@pytest.mark.parametrize(
    "schedule, message",
    [
        ([["F0", "B0"], ["F0"]], "device 1: missing B0"),
        ([["F0", "B0", "F0"], ["F0", "B0"]], "device 0 step 2: F0 repeats step 0"),
        ([["F0", "X0"], ["F0", "B0"]], "device 0: cannot read action 'X0'"),
        ([["F0", "B0"]], "2 devices but the schedule has 1 device rows"),
        ([["B0", "F0"], ["F0", "B0"]], "deadlock"),
    ],
)
def test_bad_schedules_are_named_by_the_schedules_validator(schedule, message):
    with StageWorkers(["cpu"] * 2) as workers:
        with pytest.raises(ValueError, match=message):
            run_schedule(workers, make_stages(2, 0), schedule, torch.randn(4, 8), torch.randn(4, 8), F.mse_loss)


def test_stage_plans_take_strings_and_simulator_actions():
    plans = stage_plans([[Action(0, "F", 0), "B0"], ["F0", Action(1, "B", 0)]], 2)
    assert plans == [[(0, "F", 0), (0, "B", 0)], [(1, "F", 0), (1, "B", 0)]]
    chunked = stage_plans([["0F0", "1F0", "1B0", "0B0"], ["0F0", "1F0", "1B0", "0B0"]], 2)
    assert chunked[1] == [(1, "F", 0), (3, "F", 0), (3, "B", 0), (1, "B", 0)]
    with pytest.raises(ValueError, match="full backwards"):
        stage_plans([["F0", "I0", "W0"]], 1)


def interleaved_order(num_devices, num_microbatches, num_chunks):
    """Megatron's order, written out here so this test does not depend on the answer key."""
    total, rows = num_microbatches * num_chunks, []
    for device in range(num_devices):
        def kth(k, kind):
            group, rest = divmod(k, num_devices * num_chunks)
            chunk = rest // num_devices if kind == "F" else num_chunks - 1 - rest // num_devices
            return Action(chunk * num_devices + device, kind, group * num_devices + rest % num_devices)

        warmup = min(2 * (num_devices - device - 1) + (num_chunks - 1) * num_devices, total)
        row = [kth(k, "F") for k in range(warmup)]
        for k in range(total - warmup):
            row += [kth(warmup + k, "F"), kth(k, "B")]
        rows.append(row + [kth(k, "B") for k in range(total - warmup, total)])
    return rows


@pytest.mark.parametrize("num_devices, num_microbatches, num_chunks", [(2, 4, 2), (3, 6, 2), (2, 2, 3)])
def test_interleaved_schedules_run_chunks_round_the_devices(num_devices, num_microbatches, num_chunks):
    num_stages = num_devices * num_chunks
    pipelined, reference = make_stages(num_stages, seed=5), make_stages(num_stages, seed=5)
    schedule = interleaved_order(num_devices, num_microbatches, num_chunks)
    x, y = torch.randn(2 * num_microbatches, 8), torch.randn(2 * num_microbatches, 8)
    with StageWorkers(["cpu"] * num_devices) as workers:
        report = run_schedule(workers, pipelined, schedule, x, y, F.mse_loss)
    expected_loss = sequential_step(reference, ["cpu"] * num_stages, x, y, F.mse_loss)
    assert report.loss == pytest.approx(expected_loss, rel=RTOL)
    assert report.peak_live == simulate(schedule).peak_in_flight
    assert [" ".join(row) for row in report.executed] == format_schedule(schedule)
    for ours, theirs in zip(pipelined, reference):
        for p, q in zip(ours.parameters(), theirs.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL)


def test_stages_that_do_not_fill_the_devices_evenly_are_refused():
    with StageWorkers(["cpu"] * 2) as workers:
        with pytest.raises(ValueError, match="3 stages cannot be spread evenly over 2 devices"):
            run_schedule(workers, make_stages(3, 0), [["F0", "B0"], ["F0", "B0"]], torch.randn(4, 8),
                         torch.randn(4, 8), F.mse_loss)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_simulator_schedules_run_and_match_the_simulated_peak(name):
    schedule = generator(name)(3, 6)
    with StageWorkers(["cpu"] * 3) as workers:
        report = run_schedule(workers, make_stages(3, 0), schedule, torch.randn(12, 8), torch.randn(12, 8), F.mse_loss)
    assert report.executed == [[f"{a.kind}{a.microbatch}" for a in row] for row in schedule]
    assert report.peak_live == simulate(schedule).peak_in_flight


def test_stage_threads_do_the_backward():
    seen = set()

    class Spy(nn.Linear):
        def forward(self, x):
            out = super().forward(x)
            out.register_hook(lambda grad: seen.add(threading.current_thread().name))
            return out

    torch.manual_seed(0)
    with StageWorkers(["cpu"] * 2) as workers:
        run_schedule(workers, [Spy(8, 8), Spy(8, 8)], gpipe_order(2, 2), torch.randn(4, 8), torch.randn(4, 8), F.mse_loss)
    assert seen == {"stage-0", "stage-1"}
