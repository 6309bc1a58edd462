"""The Problem 2 grader checks, in process, along the grader's path (observe, plain data,
save/load, judge): the answer key passes every check, and each wrong variant of the
student's code fails the check that targets it, saying what went wrong.
"""
from __future__ import annotations

import pytest
import torch
from grading_helpers import observe_and_judge

from grader.checks import Fail
from grader.checks import problem2 as checks
from grader.rubric import load_rubric

SEED = 7
PARAMS = {c.name: c.params for c in load_rubric().criteria if c.module == "grader.checks.problem2"}


@pytest.fixture(autouse=True)
def student(monkeypatch):
    """Replaces attributes of the answer key's pipeline module for one test. The 2.2 checks
    swap the grader's own clock_cycles into the module: that is undone after each test too."""
    from minitorch import pipeline

    monkeypatch.setattr(pipeline, "clock_cycles", pipeline.clock_cycles)
    return lambda name, value: monkeypatch.setattr(pipeline, name, value)


def wrong_forward(student, forward):
    """A Pipe whose forward is ``forward(original_forward, self, x)``."""
    from minitorch import pipeline

    original = pipeline.Pipe.forward
    student("Pipe", type("Pipe", (pipeline.Pipe,), {"forward": lambda self, x: forward(original, self, x)}))


def fails(name: str, match: str) -> None:
    with pytest.raises(Fail, match=match):
        observe_and_judge(checks, name, SEED, PARAMS[name])


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_answer_key_passes(name):
    observe_and_judge(checks, name, SEED, PARAMS[name])


def test_every_problem2_check_is_in_the_rubric():
    observed = {name[len("observe_"):] for name in vars(checks) if name.startswith("observe_")}
    assert observed == set(PARAMS)


def test_a_missing_last_wave_fails_the_schedule(student):
    from minitorch import pipeline

    right = pipeline.clock_cycles
    student("clock_cycles", lambda m, k: iter(list(right(m, k))[:-1]))
    fails("schedule", "wave")


def test_the_wrong_exception_type_fails_the_errors_check(student):
    def clock_cycles(m, k):
        if m < 0 or k < 1:
            raise TypeError("bad sizes")
        yield from ()

    student("clock_cycles", clock_cycles)
    fails("errors", "ValueError")


def test_rows_out_of_order_fail_the_forward(student):
    wrong_forward(student, lambda original, self, x: original(self, x).flip(0))
    fails("forward", "out of order")


def test_a_serial_forward_fails_the_call_order(student):
    def serial(original, self, x):
        outputs = []
        for batch in torch.split(x, self.split_size):
            for j, stage in enumerate(self.stages):
                self.workers.submit(j, lambda stage=stage, batch=batch: stage(batch))
                batch = self.workers.receive(j)
            outputs.append(batch)
        return torch.cat(outputs)

    wrong_forward(student, serial)
    fails("call_order", "wave")


def test_enabling_grad_inside_fails_no_grad(student):
    def forward(original, self, x):
        with torch.enable_grad():
            return original(self, x)

    wrong_forward(student, forward)
    fails("no_grad", "no_grad|inference_mode|grad")


def test_a_swallowed_stage_exception_fails(student):
    def forward(original, self, x):
        try:
            return original(self, x)
        except Exception:
            return torch.zeros_like(x)

    wrong_forward(student, forward)
    fails("exceptions", "exception")


def test_detaching_the_output_fails_backward(student):
    wrong_forward(student, lambda original, self, x: original(self, x).detach().requires_grad_())
    fails("backward", "grad")


def test_a_copy_on_the_calling_thread_fails_transfers(student):
    wrong_forward(student, lambda original, self, x: original(self, x.clone()))
    fails("transfers", "calling thread|clone")


# ---- 2.1: the schedule apart from its conventions (each convention costs its own criterion only)

def right_waves(m, k):
    """The right waves, one at a time (lazily: 2.1-generator times a long schedule's first wave)."""
    for wave in range(m + k - 1):
        yield [(wave - j, j) for j in range(max(0, wave - m + 1), min(wave, k - 1) + 1)]


def only_fails(student, clock_cycles, failing: str, match: str) -> None:
    student("clock_cycles", clock_cycles)
    for name in ("schedule", "stage_order", "generator", "no_microbatches"):
        if name == failing:
            fails(name, match)
        else:
            observe_and_judge(checks, name, SEED, PARAMS[name])


def test_stages_listed_descending_fail_only_the_stage_order(student):
    def clock_cycles(m, k):
        yield from (wave[::-1] for wave in right_waves(m, k) if m)

    only_fails(student, clock_cycles, "stage_order", r"clock_cycles\(2, 2\), wave 1 is \[\(0, 1\), \(1, 0\)\]: not ordered")


def test_a_list_fails_only_the_generator(student):
    only_fails(student, lambda m, k: list(right_waves(m, k)) if m else [], "generator", "returned a list; expected a generator")


def test_one_shared_list_fails_only_the_generator(student):
    def clock_cycles(m, k):
        shared = []
        for wave in right_waves(m, k) if m else []:
            shared[:] = wave
            yield shared

    only_fails(student, clock_cycles, "generator", "the same list object is reused for every wave")


def test_empty_waves_without_microbatches_fail_only_that_criterion(student):
    def clock_cycles(m, k):
        yield from (right_waves(m, k) if m else [[] for _ in range(k - 1)])

    only_fails(student, clock_cycles, "no_microbatches", r"clock_cycles\(0, 2\) yielded 1 wave \(\[\]\); expected none")


def test_a_value_error_for_no_microbatches_fails_only_that_criterion(student):
    def clock_cycles(m, k):
        if m < 1:
            raise ValueError("M must be >= 1")
        yield from right_waves(m, k)

    only_fails(student, clock_cycles, "no_microbatches", r"clock_cycles\(0, 1\) raised ValueError: M must be >= 1")


def test_nothing_yielded_passes_no_convention(student):
    def clock_cycles(m, k):
        yield from ()

    student("clock_cycles", clock_cycles)
    for name in ("schedule", "stage_order", "generator", "no_microbatches"):
        with pytest.raises(Fail):
            observe_and_judge(checks, name, SEED, PARAMS[name])


def test_eager_and_lazy_value_errors_both_pass(student):
    def eager(m, k):
        if type(m) is not int or type(k) is not int or m < 0 or k < 1:
            raise ValueError("bad sizes")
        return iter(list(right_waves(m, k)) if m else [])

    student("clock_cycles", eager)
    observe_and_judge(checks, "errors", SEED, PARAMS["errors"])


# ---- 2.2: the student's terms

def test_chunked_rows_fail_forward_and_call_order_naming_the_sizes(student):
    def chunked(original, self, x):
        microbatches = list(torch.chunk(x, -(-x.shape[0] // self.split_size)))
        for wave in checks.reference_clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                self.workers.submit(j, lambda stage=self.stages[j], batch=microbatches[i]: stage(batch))
            for i, j in wave:
                microbatches[i] = self.workers.receive(j)
        return torch.cat(microbatches)

    wrong_forward(student, chunked)
    fails("forward", r"stage 0 was given microbatches of \[3, 3, 3\] rows; expected \[4, 4, 1\]")
    fails("call_order", r"stage 0 was given microbatches of \[3, 3, 3\] rows; expected \[4, 4, 1\]")


def test_wrong_row_count_fails_backward_before_the_graders_loss(student):
    wrong_forward(student, lambda original, self, x: torch.cat([original(self, x), original(self, x)[:2]]))
    fails("backward", r"Pipe returned a tensor of shape \[12, 6\]; expected \[10, 6\]")


def test_a_copy_of_the_stage_exception_fails_only_the_convention(student):
    def forward(original, self, x):
        try:
            return original(self, x)
        except checks.GraderStageError as error:
            raise type(error)(*error.args) from None

    wrong_forward(student, forward)
    fails("exception_unchanged", "not the object the stage raised")
    observe_and_judge(checks, "exceptions", SEED, PARAMS["exceptions"])  # it still reaches the caller


def test_a_move_guarded_by_the_device_fails_transfers(student):
    def forward(original, self, x):
        if x.device != self.devices[0]:
            x = x.to(self.devices[0])
        return original(self, x)

    wrong_forward(student, forward)
    fails("transfers", r"ran torch `to` on the calling thread before the first submit \(stages on the devices cpu:0")


def test_contiguous_of_a_contiguous_batch_keeps_transfers(student):
    wrong_forward(student, lambda original, self, x: original(self, x.contiguous()))
    observe_and_judge(checks, "transfers", SEED, PARAMS["transfers"])
