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

import torch

from grader.checks import Fail
from grader.checks.compare import expected_calls
from minitorch.workload import FULL, SMOKE, StepMismatch, time_training_step


def _gpu_description() -> dict:
    count = torch.cuda.device_count()
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    peer = count >= 2 and torch.cuda.can_device_access_peer(0, 1)
    return {"gpus": names, "peer_access_0_1": bool(peer)}


def observe_speedup(seed: int, params: dict) -> dict:
    """Times the HW5 workload on two GPUs, one step on one device against the student's ``Pipe``, in paired runs."""
    from minitorch import runtime
    from minitorch.pipeline import Pipe

    smoke = bool(params.get("smoke", False))
    size = SMOKE if smoke else FULL
    devices = ["cuda:0", "cuda:0"] if smoke else ["cuda:0", "cuda:1"]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    events: list = []
    try:
        with runtime.observe(events.append):
            timing = time_training_step(Pipe, devices, size, seed)
    except StepMismatch as error:
        raise Fail(str(error)) from None
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
