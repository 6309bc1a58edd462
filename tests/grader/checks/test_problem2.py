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
