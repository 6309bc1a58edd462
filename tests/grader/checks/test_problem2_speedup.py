"""Problem 2.3's judge (grader/checks/problem2/speedup/judge.py) on synthetic observations, and the one-GPU smoke rubric.

The observe side needs CUDA GPUs and cannot run here; see scripts/ and README for the GPU run.
"""
import pytest

from grader.checks.judging import Fail, Outside
from grader.checks.problem2.speedup.judge import judge_speedup
from grader.layout import DEFAULT_RUBRIC
from grader.rubric import load_rubric
from minitorch.workload import FULL


def expected_calls(num_microbatches):
    calls = []
    for wave in range(num_microbatches + 1):
        stages = [s for s in (0, 1) if 0 <= wave - s < num_microbatches]
        calls += [["submit", s] for s in stages] + [["receive", s] for s in stages]
    return calls


def observation(ratios, conclusive=True, forwards=3, calls=None):
    num_microbatches = FULL["rows"] // FULL["split_size"]
    return {
        "smoke": False,
        "workload": FULL,
        "timing": {"ratios": ratios, "median_ratio": sorted(ratios)[len(ratios) // 2],
                   "baseline_seconds": [0.3 * ratio for ratio in ratios], "candidate_seconds": [0.3] * len(ratios),
                   "conclusive": conclusive, "attempts": 1},
        "calls": calls if calls is not None else expected_calls(num_microbatches) * forwards,
    }


def test_a_fast_pipe_with_the_schedule_passes_and_keeps_the_raw_timings():
    details = judge_speedup(0, {"threshold": 1.10}, observation([1.45, 1.5, 1.48, 1.52, 1.47]))
    assert details["timing"]["ratios"] == [1.45, 1.5, 1.48, 1.52, 1.47] and details["threshold"] == 1.10


def test_below_threshold_fails_with_the_ratios_and_a_hint():
    with pytest.raises(Fail, match=r"1\.06x is below 1\.10x.*\.to\(device\)") as failure:
        judge_speedup(0, {"threshold": 1.10}, observation([1.05, 1.06, 1.07, 1.06, 1.04]))
    assert failure.value.details["timing"]["median_ratio"] == 1.06


def test_threshold_comes_from_the_rubric_params():
    judge_speedup(0, {"threshold": 1.05}, observation([1.05, 1.06, 1.07, 1.06, 1.04]))


def test_inconclusive_timing_is_not_a_pass():
    with pytest.raises(Fail, match="inconclusive"):
        judge_speedup(0, {}, observation([0.9, 1.6, 1.2, 2.0, 1.1], conclusive=False))


def test_wrong_call_order_during_the_timed_run_fails():
    calls = expected_calls(8)
    serial = calls[:4] + [calls[5], calls[4]] + calls[6:]
    with pytest.raises(Fail, match="forward call 1"):
        judge_speedup(0, {}, observation([1.5] * 5, calls=calls + serial))


def test_timed_steps_longer_than_the_run_measured_outside_fail_as_tampered():
    """The steps' times (here 0.3 s per candidate, 0.3 * ratio per baseline: 3.3 s in all) must
    fit in the child's run as the grader timed it from outside: a baseline made to look slow
    inside the child cannot be slower than the whole run."""
    timed = observation([1.2] * 5)
    judge_speedup(0, {}, timed, Outside(wall_seconds=3.4))
    with pytest.raises(Fail, match="the times recorded inside your process were changed") as failure:
        judge_speedup(0, {}, timed, Outside(wall_seconds=3.0))
    assert failure.value.details["tampered"]


def test_smoke_runs_are_never_judged():
    judge_speedup(0, {}, {**observation([0.5] * 5), "smoke": True})


def test_gpu_smoke_rubric_keeps_only_gpu_criteria_unscored_on_one_gpu():
    smoke = load_rubric(DEFAULT_RUBRIC).gpu_smoke()
    assert [c.id for c in smoke.criteria] == ["2.3-speedup"]
    (criterion,) = smoke.criteria
    assert criterion.needs == "cuda1" and criterion.points == 0 and criterion.params["smoke"] is True


def test_judge_details_reach_the_json_report():
    from grader.grading import judge_observation
    from grader.protocol import Report, Result, as_json

    criterion = next(c for c in load_rubric(DEFAULT_RUBRIC).criteria if c.id == "2.3-speedup")
    status, message, details = judge_observation(criterion, 0, observation([1.05] * 5))
    assert status == "failed" and "below 1.10x" in message
    result = Result(id=criterion.id, problem="2.3", title="", points=10, earned=0, status=status,
                    message=message, seconds=1.0, details=details)
    report = as_json(Report(submission="x", files={}, environment={}, seed=0, planned=1, results=[result]))
    assert report["criteria"][0]["details"]["timing"]["ratios"] == [1.05] * 5


def test_another_update_than_the_baseline_fails_saying_so():
    with pytest.raises(Fail, match="computed another update than the stages run one after the other"):
        judge_speedup(0, {}, {"smoke": False, "workload": FULL, "mismatch": "after a timed pair the Pipe's parameters differ"})


def test_the_child_side_records_the_timed_calls_and_a_mismatch_on_a_cpu(monkeypatch):
    """observe_speedup without GPUs: the workload's timing replaced by one forward of the student's Pipe on
    CPU stages (what the timing runs), so the recorded calls, the pieces and a mismatch can be checked here."""
    from grader.checks.problem2.pieces import grader_clock_cycles
    from grader.checks.problem2.speedup import observe
    from minitorch import pipeline
    from minitorch.timing import PairedTiming
    from minitorch.workload import SMOKE, StepMismatch

    monkeypatch.setattr(pipeline, "clock_cycles", pipeline.clock_cycles)
    seen = {}

    def timed(pipe_class, devices, size, seed):
        import torch

        seen["clock_cycles"] = pipeline.clock_cycles
        with pipe_class([torch.nn.Identity(), torch.nn.Identity()], ["cpu", "cpu"], size["split_size"]) as pipe:
            pipe(torch.zeros(size["rows"], 1))
        if seen.get("mismatch"):
            raise StepMismatch("the parameters differ")
        return PairedTiming(ratios=[1.2] * 5, attempts=1, conclusive=True)

    monkeypatch.setattr(observe, "time_training_step", timed)
    found = observe.observe_speedup(0, {"smoke": True, "pieces": "grader"})
    assert seen["clock_cycles"] is grader_clock_cycles and found["workload"] == SMOKE
    assert found["calls"][:4] == [("submit", 0), ("receive", 0), ("submit", 0), ("submit", 1)]
    judge_speedup(0, {}, found)  # a smoke run is never judged
    seen["mismatch"] = True
    with pytest.raises(Fail, match="computed another update"):
        judge_speedup(0, {}, observe.observe_speedup(0, {"smoke": False}))
