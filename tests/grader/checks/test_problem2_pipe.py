"""The 2.2 checks (grader/checks/problem2/pipe_*/), in process along the grader's path: each wrong
Pipe fails the criterion of its mistake (and the conventions only their own), saying what went
wrong in the student's terms."""
from __future__ import annotations

import pytest
import torch
from problem2_helpers import CHECKS, fails, patcher, run

from grader.checks.judging import Fail, Outside
from grader.checks.problem2.pipe_concurrency.cases import concurrency_params
from grader.checks.problem2.pipe_concurrency.judge import judge_concurrency
from grader.checks.problem2.stages import GraderStageError
from minitorch.runtime import StageWorkers


@pytest.fixture
def student(monkeypatch):
    return patcher(monkeypatch)


def with_forward(student, forward):
    """The answer key's Pipe with ``forward(original_forward, self, x)`` as its forward."""
    from minitorch import pipeline

    original = pipeline.Pipe.forward
    student("Pipe", type("Pipe", (pipeline.Pipe,), {"forward": lambda self, x: forward(original, self, x)}))


KEPT = {  # which of a wave's errors (microbatch, error), in the order received, a Pipe raises
    "first": lambda errors: errors[0][1],
    "last": lambda errors: errors[-1][1],
    "lowest microbatch": lambda errors: min(errors, key=lambda error: error[0])[1],
}


def written_out(student, catch=BaseException, receive=None, restart=False, keep="first", split=None):
    """A Pipe forward written out as a student would, with one thing changed: the exceptions it
    catches, how it receives (``receive(workers, j)``), new workers after an error, which error of
    a wave it raises (``keep``, a key of ``KEPT``), or how it splits the batch (``split(x, size)``)."""
    from minitorch import pipeline

    def forward(self, x):
        microbatches = split(x, self.split_size) if split else list(torch.split(x, self.split_size))
        for wave in pipeline.clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                self.workers.submit(j, lambda stage=self.stages[j], batch=microbatches[i], device=self.devices[j]:
                                    stage(batch.to(device)))
            errors = []
            for i, j in wave:
                try:
                    microbatches[i] = receive(self.workers, j) if receive else self.workers.receive(j)
                except catch as error:
                    errors.append((i, error))
            if errors:
                if restart:
                    self.workers = StageWorkers(self.devices)
                raise KEPT[keep](errors)
        return torch.cat(microbatches)

    student("Pipe", type("Pipe", (pipeline.Pipe,), {"forward": forward}))


def serial(original, self, x):
    """A Pipe forward that runs each microbatch through every stage before the next one starts."""
    outputs = []
    for batch in torch.split(x, self.split_size):
        for j, stage in enumerate(self.stages):
            self.workers.submit(j, lambda stage=stage, batch=batch: stage(batch))
            batch = self.workers.receive(j)
        outputs.append(batch)
    return torch.cat(outputs)


# ---- 2.2-forward, 2.2-input-unchanged

def test_rows_out_of_order_fail_the_forward(student):
    with_forward(student, lambda original, self, x: original(self, x).flip(0))
    fails("forward", "out of order")


def test_chunked_rows_fail_forward_and_call_order_naming_the_sizes(student):
    from minitorch import pipeline

    def chunked(original, self, x):
        microbatches = list(torch.chunk(x, -(-x.shape[0] // self.split_size)))
        for wave in pipeline.clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                self.workers.submit(j, lambda stage=self.stages[j], batch=microbatches[i]: stage(batch))
            for i, j in wave:
                microbatches[i] = self.workers.receive(j)
        return torch.cat(microbatches)

    with_forward(student, chunked)
    fails("forward", r"stage 0 was given microbatches of \[3, 3, 3\] rows; expected \[4, 4, 1\]")
    fails("call_order", r"stage 0 was given microbatches of \[3, 3, 3\] rows; expected \[4, 4, 1\]")


def test_a_microbatch_count_kept_from_the_first_call_fails_the_forward(student):
    def forward(original, self, x):
        self.__dict__.setdefault("first_rows", x.shape[0])
        return original(self, x[: self.first_rows]) if x.shape[0] >= self.first_rows else original(self, x)

    with_forward(student, forward)
    fails("forward", "call 2 of")


def test_a_fixed_dtype_fails_the_forward(student):
    with_forward(student, lambda original, self, x: original(self, x).to(torch.float32))
    fails("forward", r"Pipe returned a tensor of shape .* \(torch.float32\); expected .* \(torch.float64\)")


def test_requires_grad_switched_on_the_input_fails_only_input_unchanged(student):
    with_forward(student, lambda original, self, x: original(self, x.requires_grad_()))
    fails("input_unchanged", "requires_grad=True")
    for name in ("forward", "call_order", "backward"):
        run(name)


def test_an_input_changed_in_place_fails_input_unchanged(student):
    def forward(original, self, x):
        out = original(self, x)
        with torch.no_grad():
            x.mul_(1.5)
        return out

    with_forward(student, forward)
    fails("input_unchanged", "changed the caller's x in place")


def test_an_input_changed_in_place_only_when_it_is_one_microbatch_fails_input_unchanged(student):
    def forward(original, self, x):
        out = original(self, x)
        if x.shape[0] <= self.split_size and not x.requires_grad:
            x.copy_(out)  # "the output of the only microbatch": written back into the caller's tensor
        return out

    with_forward(student, forward)
    fails("input_unchanged", r"a batch of 4 rows, split_size=8 .* changed the caller's x in place")


def test_an_input_kept_in_the_graph_under_no_grad_fails_input_unchanged(student):
    def forward(original, self, x):
        if not torch.is_grad_enabled() and x.requires_grad:
            with torch.enable_grad():
                x.grad = torch.zeros_like(x)  # "ready for backward"
        return original(self, x)

    with_forward(student, forward)
    fails("input_unchanged", r"under torch.no_grad\(\): after a forward alone \(no backward\) the caller's x has a .grad")


# ---- 2.2-call-order, 2.2-concurrency, 2.2-transfers

def test_a_serial_forward_fails_the_call_order(student):
    with_forward(student, serial)
    fails("call_order", "wave")


def test_a_late_binding_lambda_fails_the_call_order_saying_so(student):
    from minitorch import pipeline

    def forward(self, x):
        microbatches = list(torch.split(x, self.split_size))
        for wave in pipeline.clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                self.workers.submit(j, lambda: self.stages[j](microbatches[i]))  # noqa: B023 - the mistake
            for i, j in wave:
                microbatches[i] = self.workers.receive(j)
        return torch.cat(microbatches)

    student("Pipe", type("Pipe", (pipeline.Pipe,), {"forward": forward}))
    fails("call_order", r"\(late binding\)")


def test_a_serial_pipe_that_shortens_the_grader_stages_sleep_fails_concurrency(student):
    def forward(original, self, x):
        for stage in self.stages:
            if hasattr(stage, "sleep"):
                stage.sleep = 0.001
        return serial(original, self, x)

    with_forward(student, forward)
    fails("concurrency", "the grader's stages must run as given")


def concurrency_attempt(elapsed, intervals):
    return [{"elapsed": elapsed, "intervals": [list(interval) for interval in intervals]}]


def pipelined_calls():
    """A pipelined forward's stage calls as the child reports them, and its makespan."""
    count, microbatches, sleep, _ = concurrency_params(CHECKS["concurrency"].params)
    calls = [(stage, (step + stage) * sleep, (step + stage + 1) * sleep)
             for stage in range(count) for step in range(microbatches)]
    return calls, (microbatches + count - 1) * sleep


def test_stage_calls_outside_the_timed_forward_fail_as_tampered():
    """The stage calls' times (the clock read in the child) must lie inside the forward the
    grader timed with its own clock: both sides of the rule, at its edge."""

    pipelined, makespan = pipelined_calls()
    judge_concurrency(0, CHECKS["concurrency"].params, concurrency_attempt(makespan, pipelined))
    with pytest.raises(Fail, match="the times recorded inside your process were changed") as failure:
        judge_concurrency(0, CHECKS["concurrency"].params, concurrency_attempt(makespan / 2, pipelined))
    assert failure.value.details["tampered"]


def test_forward_times_longer_than_the_run_measured_outside_fail_as_tampered():

    pipelined, makespan = pipelined_calls()
    judge_concurrency(0, CHECKS["concurrency"].params, concurrency_attempt(makespan, pipelined), Outside(makespan + 0.5))
    with pytest.raises(Fail, match="measured it from outside"):
        judge_concurrency(0, CHECKS["concurrency"].params, concurrency_attempt(makespan, pipelined), Outside(makespan / 2))


def test_a_copy_on_the_calling_thread_fails_transfers(student):
    with_forward(student, lambda original, self, x: original(self, x.clone()))
    fails("transfers", "calling thread|clone")


def test_a_move_guarded_by_the_device_fails_transfers(student):
    def forward(original, self, x):
        if x.device != self.devices[0]:
            x = x.to(self.devices[0])
        return original(self, x)

    with_forward(student, forward)
    fails("transfers", r"ran torch `to` on the calling thread before the first submit \(stages on the devices cpu:0, cpu, cpu:0\)\. Only")


def test_contiguous_of_a_contiguous_batch_keeps_transfers(student):
    def forward(original, self, x):
        return original(self, x.contiguous()) if x.is_contiguous() else original(self, x)

    with_forward(student, forward)
    run("transfers")


@pytest.mark.parametrize("copy, layout", [
    (lambda x: x.contiguous(), "rows and columns swapped"),
    (lambda x: x.clone() if x.stride(-1) != 1 else x, "rows and columns swapped"),
    (lambda x: x if x.is_contiguous() else torch.cat(list(x.split(2))), "rows and columns swapped"),
    (lambda x: x.contiguous() if x.stride(-1) == 1 and not x.is_contiguous() else x, r"x\[::2\]"),
    (lambda x: x.contiguous() if x.stride(0) == 0 else x, r"x\.expand"),
], ids=["contiguous", "clone-guarded-by-stride", "cat", "contiguous-guarded-by-row-stride", "contiguous-of-expanded"])
def test_a_copy_of_a_batch_that_is_not_contiguous_fails_transfers(student, copy, layout):
    with_forward(student, lambda original, self, x: original(self, copy(x)))
    fails("transfers", rf"on the calling thread before the first submit \(stages on .*\), on a batch that is not contiguous .*{layout}"
          ".* if a stage needs contiguous memory, make the microbatch contiguous inside the submitted callable")


def test_contiguous_microbatches_on_the_calling_thread_fail_transfers(student):
    written_out(student, split=lambda x, size: [microbatch.contiguous() for microbatch in torch.split(x, size)])
    fails("transfers", r"ran torch `contiguous` on the calling thread before the first submit \(stages on .*\), on a batch "
          r"that is not contiguous \(rows and columns swapped")


def test_refusing_a_batch_that_is_not_contiguous_keeps_transfers(student):
    def forward(original, self, x):
        return original(self, x.view(x.shape[0], -1))  # a .view raises on one that is not contiguous

    with_forward(student, forward)
    run("transfers")


# ---- 2.2-no-grad, 2.2-backward

def test_enabling_grad_inside_fails_no_grad(student):
    def forward(original, self, x):
        with torch.enable_grad():
            return original(self, x)

    with_forward(student, forward)
    fails("no_grad", "built an autograd graph")


def test_detaching_the_output_fails_backward(student):
    with_forward(student, lambda original, self, x: original(self, x).detach().requires_grad_())
    fails("backward", "x.grad is None|graph is cut")


def test_wrong_row_count_fails_backward_before_the_graders_loss(student):
    with_forward(student, lambda original, self, x: torch.cat([original(self, x), original(self, x)[:2]]))
    fails("backward", r"Pipe returned a tensor of shape \[12, 6\]; expected \[10, 6\]")


def test_gradients_reset_at_every_forward_fail_backward(student):
    def forward(original, self, x):
        for parameter in self.parameters():
            parameter.grad = None  # "a fresh step": but two backwards must add up
        return original(self, x)

    with_forward(student, forward)
    fails("backward", r"a second forward and backward on the same batch \(gradients add up\): the gradient of stage 0's weight")


def test_an_output_that_always_requires_grad_fails_backward_on_frozen_stages(student):
    def forward(original, self, x):
        out = original(self, x)
        return out if out.requires_grad else out.requires_grad_()

    with_forward(student, forward)
    fails("backward", "every stage frozen, a batch without requires_grad: the output requires grad")


# ---- 2.2-exceptions, 2.2-exception-unchanged, 2.2-base-exception

def test_a_swallowed_stage_exception_fails(student):
    def forward(original, self, x):
        try:
            return original(self, x)
        except Exception:
            return torch.zeros_like(x)

    with_forward(student, forward)
    fails("exceptions", "the stage's exception must reach the caller")


def test_a_copy_of_the_stage_exception_fails_only_the_convention(student):
    def forward(original, self, x):
        try:
            return original(self, x)
        except GraderStageError as error:
            raise type(error)(*error.args) from None

    with_forward(student, forward)
    fails("exception_unchanged", "not the object the stage raised")
    run("exceptions")  # it still reaches the caller


def test_raising_after_the_whole_schedule_fails_only_the_convention(student):
    from minitorch import pipeline

    def forward(self, x):
        microbatches, errors = list(torch.split(x, self.split_size)), []
        for wave in pipeline.clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                if microbatches[i] is not None:
                    self.workers.submit(j, lambda stage=self.stages[j], batch=microbatches[i]: stage(batch))
            for i, j in wave:
                if microbatches[i] is not None:
                    try:
                        microbatches[i] = self.workers.receive(j)
                    except BaseException as error:
                        errors.append(error)
                        microbatches[i] = None
        if errors:
            raise errors[0]
        return torch.cat(microbatches)

    student("Pipe", type("Pipe", (pipeline.Pipe,), {"forward": forward}))
    fails("exception_unchanged", "no later wave runs")
    run("exceptions")


def test_keeping_the_last_error_of_a_wave_fails_only_the_convention(student):
    written_out(student, keep="last")  # right wherever one stage fails
    fails("exception_unchanged", r"2 stages, a batch of 2 rows, split_size=1 .*, stage 1 raising .* and stage 0 raising "
          r".*: the caller got the exception stage 1 raised on microbatch 0; expected the first exception in schedule "
          r"order, the one stage 0 raised on microbatch 1")
    run("exceptions")


def test_the_error_of_the_lowest_microbatch_fails_only_the_convention(student):
    written_out(student, keep="lowest microbatch")  # "first" read as the earliest rows, not the schedule's order
    fails("exception_unchanged", "the caller got the exception stage 1 raised on microbatch 0; expected the first")
    run("exceptions")


def test_microbatches_astray_cost_no_first_exception(student):
    written_out(student, split=lambda x, size: list(torch.chunk(x, size)))  # 2.2-call-order's mistake, not "first"'s
    fails("call_order", "split_size=2 rows per microbatch")
    run("exception_unchanged")


def test_taking_back_the_rest_of_a_wave_outside_the_try_fails_the_exceptions(student):
    from minitorch import pipeline

    def forward(self, x):  # after the first error the rest of the wave is received unguarded
        microbatches = list(torch.split(x, self.split_size))
        for wave in pipeline.clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                self.workers.submit(j, lambda stage=self.stages[j], batch=microbatches[i]: stage(batch))
            for n, (i, j) in enumerate(wave):
                try:
                    microbatches[i] = self.workers.receive(j)
                except BaseException:
                    for _, rest in wave[n + 1:]:
                        self.workers.receive(rest)
                    raise
        return torch.cat(microbatches)

    student("Pipe", type("Pipe", (pipeline.Pipe,), {"forward": forward}))
    fails("exceptions", "stage 0 raising .*: the next forward on a good batch raised GraderStageError: stage 2 refuses "
          r"microbatch 0; .*; perhaps results of the failed call were left in the workers \(receive the rest of the wave, "
          "whatever else raises in it")
    fails("exception_unchanged", "the caller got the exception stage 1 raised on microbatch 0; expected the first")


def test_catching_only_exception_fails_only_the_base_exception_convention(student):
    written_out(student, catch=Exception)  # torchgpipe's choice: a BaseException goes straight through, the wave half received
    fails("base_exception", r"GraderInterrupt .* the next forward on a good batch is wrong .*catch BaseException")
    for name in ("exceptions", "exception_unchanged", "forward", "call_order"):
        run(name)


@pytest.mark.parametrize("resubmit", [True, False], ids=["resubmitted", "received-again"])
def test_a_timeout_retried_fails_the_exceptions(student, resubmit):
    def receive(workers, j):
        try:
            return workers.receive(j)
        except TimeoutError:
            if resubmit:  # "try again": the stage's call is sent once more
                workers.submit(j, lambda: None)
            return workers.receive(j)

    written_out(student, receive=receive)
    if resubmit:
        fails("exceptions", r"timeout=0.5\) whose stage 1 does not finish microbatch 1 in time: after the TimeoutError the "
                            r"Pipe submitted to stage 1 again")
    else:  # the second receive raises RuntimeError (nothing pending), which carries the TimeoutError
        fails("exception_unchanged", r"the caller got RuntimeError: .*nothing pending.*, not the TimeoutError")


def test_a_timeout_swallowed_fails_the_exceptions(student):
    def forward(original, self, x):
        try:
            return original(self, x)
        except TimeoutError:
            return torch.zeros_like(x)

    with_forward(student, forward)
    fails("exceptions", r"timeout=0.5\) .*: the forward returned normally; the TimeoutError that StageWorkers.receive raised must reach")


def test_new_workers_after_an_error_fail_the_exceptions(student):
    written_out(student, restart=True)
    fails("exceptions", "the next forward ran on other workers than the first: self.workers serves every call until close()")
    run("exception_unchanged")


def test_a_view_that_needs_contiguous_memory_costs_only_the_input_convention(student):
    """Code right on contiguous batches (a .view of the rows) loses the convention, not 2.2-forward."""
    def forward(original, self, x):
        return original(self, x.view(x.shape[0], -1)).view(x.shape) if x.dim() > 1 else original(self, x)

    with_forward(student, forward)
    fails("input_unchanged", r"not contiguous .*: the forward raised RuntimeError: .*view.*; on a contiguous copy of the same "
                             r"batch it worked")
    run("forward")


def test_a_later_case_that_raises_does_not_hide_an_earlier_wrong_one(student):
    def forward(original, self, x):
        if x.dim() == 1:
            raise RuntimeError("1-D batches are not supported")
        return original(self, x).flip(0) if x.dim() == 4 else original(self, x)

    with_forward(student, forward)  # the rank-4 case comes before the 1-D one
    fails("forward", r"a batch of shape \[rows, 2, 1, 3\].*rows are out of order")


def test_a_forward_that_always_raises_is_run_once(student):
    calls = []

    def forward(original, self, x):
        calls.append(x.shape)
        raise MemoryError("out of memory")

    with_forward(student, forward)
    fails("forward", r"call 1 of 2 on one Pipe: the forward raised MemoryError: out of memory")
    assert len(calls) == 1
