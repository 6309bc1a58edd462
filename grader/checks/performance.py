"""Problem 2.3: the timed two-GPU training step (HW5's 1.10x target).

Workload (HW5): FP32 residual blocks ``x + 0.1 * gelu(linear(x))`` of width 2048,
8 blocks split into two stages of 4 on ``cuda:0`` and ``cuda:1``, a batch of 8192 rows
in microbatches of 1024, TF32 off. One training step is forward, MSE loss, backward and
an SGD update. The baseline sends the whole batch through stage 0, then stage 1; the
candidate is the student's ``Pipe``. Both are timed with ``minitorch.timing.time_paired``
(paired runs, alternating order, median ratio, parameters compared after every pair).

The harness reports this criterion ``blocked`` unless two CUDA GPUs are visible. With
``params["smoke"] = true`` both stages go on ``cuda:0`` with a small workload: that
exercises the CUDA code paths on one GPU; its ratio means nothing and is not judged.
"""
from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from grader.checks import Fail
from grader.checks.compare import expected_calls

FULL = {"width": 2048, "blocks": 8, "rows": 8192, "split_size": 1024, "repeats": 5}
SMOKE = {"width": 256, "blocks": 4, "rows": 1024, "split_size": 128, "repeats": 5}


class _Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + 0.1 * F.gelu(self.linear(x))


def _gpu_description() -> dict:
    count = torch.cuda.device_count()
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    peer = count >= 2 and torch.cuda.can_device_access_peer(0, 1)
    return {"gpus": names, "peer_access_0_1": bool(peer)}


def observe_speedup(seed: int, params: dict) -> dict:
    """Times the HW5 workload on two GPUs, one step on one device against the student's ``Pipe``, in paired runs."""
    from minitorch import runtime
    from minitorch.pipeline import Pipe
    from minitorch.timing import time_paired

    smoke = bool(params.get("smoke", False))
    size = SMOKE if smoke else FULL
    devices = ["cuda:0", "cuda:0"] if smoke else ["cuda:0", "cuda:1"]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(seed)
    half = size["blocks"] // 2
    stages = [nn.Sequential(*(_Block(size["width"]) for _ in range(half))) for _ in range(2)]
    baseline_stages = [copy.deepcopy(s).to(d) for s, d in zip(stages, devices)]
    inputs = torch.randn(size["rows"], size["width"], device=devices[0])
    targets = torch.randn(size["rows"], size["width"], device=devices[1])

    def sgd(parameters):
        return torch.optim.SGD(list(parameters), lr=1e-3)

    baseline_optimizer = sgd(p for s in baseline_stages for p in s.parameters())

    def baseline_step():
        hidden = baseline_stages[0](inputs).to(devices[1])
        F.mse_loss(baseline_stages[1](hidden), targets).backward()
        baseline_optimizer.step()
        baseline_optimizer.zero_grad()

    events = []
    with Pipe(stages, devices, split_size=size["split_size"]) as pipe:
        pipe_optimizer = sgd(pipe.parameters())

        def pipe_step():
            F.mse_loss(pipe(inputs), targets).backward()
            pipe_optimizer.step()
            pipe_optimizer.zero_grad()

        def same_parameters():
            for ours, theirs in zip(pipe.parameters(), (p for s in baseline_stages for p in s.parameters())):
                if not torch.allclose(ours, theirs, rtol=1e-4, atol=1e-5):
                    raise Fail("after a timed pair the Pipe's parameters differ from the baseline's: "
                               "the timed step must compute the same update")

        with runtime.observe(events.append):
            timing = time_paired(baseline_step, pipe_step, repeats=size["repeats"], check=same_parameters)
    calls = [(e.kind, e.stage) for e in events if e.kind in ("submit", "receive")]
    return {
        "smoke": smoke,
        "workload": size,
        "devices": devices,
        "timing": timing.to_json(),
        "calls": calls,
        **_gpu_description(),
    }


def judge_speedup(seed: int, params: dict, observation: dict) -> dict:
    timing = observation["timing"]
    details = {key: observation[key] for key in ("smoke", "workload", "devices", "timing", "gpus", "peer_access_0_1")
               if key in observation}
    if observation["smoke"]:
        return details
    threshold = float(params.get("threshold", 1.10))
    details["threshold"] = threshold
    num_microbatches = observation["workload"]["rows"] // observation["workload"]["split_size"]
    expected = [call for wave in expected_calls(num_microbatches, 2) for call in wave]
    calls = [f"{kind}({stage})" for kind, stage in observation["calls"]]
    forwards = [calls[start : start + len(expected)] for start in range(0, len(calls), len(expected))]
    for number, order in enumerate(forwards):
        if order != expected:
            raise Fail(f"during the timed run, forward call {number}'s submit/receive order differs "
                       "from the clock-cycle schedule (see criterion 2.2-call-order)", details)
    ratios = ", ".join(f"{r:.2f}" for r in timing["ratios"])
    if not timing["conclusive"]:
        raise Fail(f"timing was inconclusive after {timing['attempts']} attempts (ratios {ratios}); "
                   "the machine may be busy: ask a TA to rerun this criterion", details)
    if timing["median_ratio"] < threshold:
        raise Fail(f"training step speedup {timing['median_ratio']:.2f}x is below {threshold:.2f}x "
                   f"(paired ratios {ratios}). Are the .to(device) copies inside the submitted callables?", details)
    return details
