"""The judges' shared toolkit: exact cases before values, and plain views of student tensors."""
import pytest
import torch

from grader.checks.judging import Malformed, expect_cases, observed
from grader.checks.recording import Unusable, student_tensor

ASKED = [(4, 2), (1, 3), (0, 2)]


def _entries(cases):
    return observed([{"case": list(case), "value": 1} for case in cases])


def test_exact_cases_pass_whatever_the_container():
    assert len(expect_cases(_entries(ASKED), ASKED, "2.1")) == 3


@pytest.mark.parametrize("sent", [ASKED[:1], ASKED[2:], ASKED + [(5, 5)], ASKED[::-1], [(4, 2), (1, 3), (0, 3)], []])
def test_other_cases_are_malformed(sent):
    with pytest.raises(Malformed, match="2.1"):
        expect_cases(_entries(sent), ASKED, "2.1")


@pytest.mark.parametrize("sent", [{"case": 1}, "cases", [1, 2, 3], [{"value": 1}] * 3])
def test_wrong_shapes_are_malformed(sent):
    with pytest.raises(Malformed):
        expect_cases(observed(sent), ASKED, "2.1")


class Sorting(torch.Tensor):
    def detach(self):
        return torch.sort(torch.Tensor.detach(self), dim=0).values

    def __eq__(self, other):
        return True

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.allclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_student_tensor_runs_no_method_of_a_subclass():
    rows = torch.tensor([[3.0], [1.0], [2.0]], requires_grad=True)
    sneaky = rows.as_subclass(Sorting)
    view = student_tensor(sneaky, "Pipe output")
    assert type(view) is torch.Tensor
    assert view.detach().flatten().tolist() == [3.0, 1.0, 2.0]
    # exact: integer-valued floats against zeros
    assert not torch.equal(view, torch.zeros(3, 1))
    view.sum().backward()
    assert rows.grad is not None


def test_student_tensor_names_what_is_not_a_tensor():
    with pytest.raises(Unusable, match="Pipe output: your code returned a list"):
        student_tensor([1, 2], "Pipe output")


@pytest.mark.timeout(30)
def test_a_cpu_cut_swallowed_by_a_gc_callback_is_raised_again():
    """Python ignores an exception raised inside a gc callback (or a ``__del__``): the first cut
    may land there. The timer fires again until the call ends, so an endless call is still cut."""
    import gc
    import time

    from grader.checks.problem2.cpu_cut import call_with_cut

    def burn_in_gc(phase, info):
        if phase == "start":
            until = time.process_time() + 0.4
            while time.process_time() < until:
                pass

    def endless():
        gc.collect()  # the callback burns past the cut: its signal is swallowed there
        while True:
            pass

    gc.callbacks.append(burn_in_gc)
    try:
        outcome = call_with_cut(endless, 0.1)
    finally:
        gc.callbacks.remove(burn_in_gc)
    assert outcome.cut and outcome.seconds < 5
