"""2.3-speedup, parent side: the Pipe kept the clock-cycle schedule while it was timed, computed
the same update as the baseline, and was at least ``params["threshold"]`` (1.10) times faster.
Observed in ``observe.py`` (which says what the workload is)."""
from __future__ import annotations

from grader.checks.judging import Fail, Outside, within_outside
from grader.checks.problem2.expected import expected_calls


def judge_speedup(seed: int, params: dict, observation, outside: Outside | None = None) -> dict:
    details = {key: observation[key] for key in ("smoke", "workload", "devices", "timing", "gpus", "peer_access_0_1")
               if key in dict.keys(observation)}
    if "mismatch" in dict.keys(observation):
        raise Fail(f"the timed training step through your Pipe computed another update than the stages run one after "
                   f"the other ({observation['mismatch']}); see 2.2-backward", details)
    timing = observation["timing"]
    within_outside(sum(map(float, [*timing["baseline_seconds"], *timing["candidate_seconds"]])), outside,
                   "the timed training steps")
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
