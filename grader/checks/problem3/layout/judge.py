"""3.0-layout, parent side: every part gives the same results (outputs and every gradient) on
a non-contiguous input, and with a non-contiguous gradient handed to its backward, as on the
same values laid out contiguously. Code that is right on contiguous tensors and wrong on the
others loses this convention criterion only; a part that raised either way is its own
criterion's failure."""
from __future__ import annotations

import torch

from grader.checks.judging import Fail
from grader.checks.problem3 import cases
from grader.checks.problem3.judge_tools import close, world_sizes
from grader.checks.threads import single_threaded


@single_threaded
def judge_layout(seed: int, params: dict, observation) -> None:
    ran, stubs = 0, []
    for t, values in world_sizes(observation, params, "the layout convention", cases.CONVENTION_SIZES).items():
        for r, o in enumerate(values):
            for part, runs in o.items():
                contiguous, strided = runs["contiguous"], runs["non-contiguous"]
                if "raised" in contiguous:
                    stubs += [contiguous["raised"]] if contiguous["raised"].startswith("NotImplementedError") else []
                    continue
                ran += 1
                where = f"t={t}, rank {r}: {part}"
                if "raised" in strided:
                    raise Fail(f"{where} works on contiguous tensors but, given the same values in a non-contiguous "
                               f"layout (a transposed copy), raised {strided['raised']}\nInputs may be non-contiguous "
                               "(the conventions at the top of tensor_parallel.py): .reshape, not .view, or "
                               ".contiguous() first")
                judge_same(where, contiguous, strided)
    if not ran:
        raise Fail("not implemented yet (Problem 3.0): every part it runs still raises NotImplementedError"
                   if stubs else "no op, layer, loss or model of Problem 3 ran (each raised); nothing to check")


def tensors(result, path: str = "") -> dict[str, torch.Tensor | None]:
    """Every tensor of a part's result, by where it is."""
    if isinstance(result, dict):
        return {k: v for key, item in result.items() if key not in ("kind", "input_changed", "grad_changed")
                for k, v in tensors(item, f"{path} {key}".strip()).items()}
    if isinstance(result, list):
        return {k: v for index, item in enumerate(result) for k, v in tensors(item, f"{path}[{index}]").items()}
    return {path: result} if result is None or isinstance(result, torch.Tensor) else {}


NAMES = {"out": "the output", "grad": "the input's gradient", "grads[0]": "the first argument's gradient",
         "grads[1]": "the second argument's gradient"}


def judge_same(where: str, contiguous, strided) -> None:
    wanted, got = tensors(contiguous), tensors(strided)
    for path, value in wanted.items():
        other = got.get(path)
        if value is None and other is None:
            continue
        if value is None or other is None or not close(other, value):
            what = NAMES.get(path, f"the gradient of parameter {path.split(' ', 1)[-1]}" if path.startswith("param")
                             else path)
            hint = (" (dist.all_reduce(x.contiguous()) sums a copy when x is not contiguous and leaves x as it was)"
                    if "grad" in path else "")
            raise Fail(f"{where}: {what} differs between a contiguous input and the same values in a non-contiguous "
                       f"layout (the gradient handed to the backward non-contiguous too){hint}; inputs and gradients "
                       "may be non-contiguous")
