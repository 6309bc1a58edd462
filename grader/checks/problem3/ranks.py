"""Running the student's code on every world size (child side), and making what it returns
plain data.

:func:`observe` launches ``rank_fn(rank, t, seed, params)`` with the grader's own
``minitorch.distributed.launch`` on gloo for each t > 1 (t = 1 runs in the observing process
itself, with no process group) and returns one entry per world size:
``{"case": {"t": t}, "ranks": [rank 0's value, ...]}``, or ``{"case": ..., "raised": text}``
where the student's code raised (the exception and the frames of the student's file: facts,
the judge words the failure). The stub's ``NotImplementedError`` is raised on, so the child
reports "not implemented". After a world size raised, the larger ones are not run
(``"not_run": True``): their ranks would wait for the same failure.
"""
from __future__ import annotations

import re
import traceback
from pathlib import Path

import torch

from grader.checks.problem3 import recorder
from grader.checks.recording import in_every_rank, rank_values, student_tensor
from grader.layout import PACKAGE, STUDENT_FILES

LAUNCH_TIMEOUT = 10.0


def observe(rank_fn, seed: int, params: dict, default: tuple[int, ...]) -> list[dict]:
    """One entry per world size of ``params["world_sizes"]`` (else ``default``), the student's
    module imported first, here, before any process group exists (module state computed at
    import must not break anything)."""
    import minitorch.tensor_parallel  # noqa: F401 - imported before init_process_group, on purpose
    from minitorch.distributed import launch

    sizes = [int(t) for t in params.get("world_sizes", default)]
    params = {**params, "world_sizes": sizes}
    recorder.install()
    checked = in_every_rank(rank_fn)  # the child's tamper check never runs in the forked ranks
    entries: list[dict] = []
    for t in sizes:
        if entries and "ranks" not in entries[-1]:
            entries.append({"case": {"t": t}, "not_run": True})
            continue
        try:
            if t == 1:
                values = [single_threaded(rank_fn, seed, params)]
            else:
                values = rank_values(launch(checked, t, seed, params, backend="gloo", timeout=LAUNCH_TIMEOUT))
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - the student's exception is the finding
            entries.append({"case": {"t": t}, "raised": student_error(error)})
            continue
        entries.append({"case": {"t": t}, "ranks": values})
    return entries


def single_threaded(rank_fn, seed: int, params: dict):
    """``rank_fn(0, 1, seed, params)`` in this process on one thread, as every rank runs
    (``launch`` sets it): torch's threads on tiny tensors on a busy machine cost 50 times the
    work."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return rank_fn(0, 1, seed, params)
    finally:
        torch.set_num_threads(threads)


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<name>.+)$')


def student_error(error: BaseException) -> str:
    """``Type: message`` and the frames of the student's file in its traceback: this process's
    traceback, or the rank's (``launch`` attaches it as a note), never the grader's frames."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    text += "\n".join(getattr(error, "__notes__", []))
    lines, frames = text.splitlines(), []
    for number, line in enumerate(lines):
        frame = _FRAME.match(line)
        if frame and Path(frame["path"]).name in STUDENT_FILES and Path(frame["path"]).parent.name == PACKAGE:
            code = lines[number + 1].strip() if number + 1 < len(lines) and not _FRAME.match(lines[number + 1]) else ""
            frames.append(f'  File "{Path(frame["path"]).name}", line {frame["line"]}, in {frame["name"]}'
                          + (f"\n    {code}" if code else ""))
    frames = list(dict.fromkeys(frames))  # Python 3.11 prints the notes with the traceback too
    return "\n".join([f"{type(error).__name__}: {str(error)[:500]}", *frames[-6:]])


def attempt(run) -> dict:
    """``run()``'s value, or ``{"raised": text}`` naming what the student's code raised (the
    stub's NotImplementedError is raised on)."""
    try:
        return run()
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - the student's exception is the finding
        return {"raised": student_error(error)}


def outcome(run):
    """``run()``'s tensor made plain data (:func:`out`), or ``{"raised": text}``."""
    value = attempt(run)
    return value if isinstance(value, dict) and "raised" in value else out(value)


def raised(build) -> str:
    """Name of the exception ``build()`` raised, or ``"no exception"``."""
    try:
        build()
    except Exception as error:  # reported by name; the judge says what was expected
        return type(error).__name__
    return "no exception"


def backward(output, grad) -> None:
    """``output.backward(grad)`` without its one-off import of sympy (0.4 s in every rank)."""
    (output * grad).sum().backward()


def strided(tensor: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout (for the layout convention); a 0-d tensor
    has one layout only."""
    if tensor.dim() == 0:
        return tensor.clone()
    if tensor.dim() == 1:
        return tensor.repeat_interleave(2)[::2]
    return tensor.transpose(0, -1).contiguous().transpose(0, -1)


def out(tensor):
    """A tensor fit to travel back to the parent, read as a plain tensor first (no method of a
    Tensor subclass the student returned runs); None when it is not a tensor."""
    if not isinstance(tensor, torch.Tensor):
        return None
    return student_tensor(tensor, "a value your code returned").detach().cpu().clone()


def kind(tensor) -> dict:
    """What the contract says about a result besides its values: its dtype, shape and whether
    it requires grad (``{"type": ...}`` for something that is not a tensor)."""
    if not isinstance(tensor, torch.Tensor):
        return {"type": type(tensor).__name__}
    plain = student_tensor(tensor, "a value your code returned")
    return {"type": "Tensor", "dtype": str(plain.dtype).replace("torch.", ""), "shape": list(plain.shape),
            "requires_grad": bool(plain.requires_grad)}


def grads(module) -> dict:
    return {name: out(p.grad) for name, p in module.named_parameters()}


def values(module) -> dict:
    return {name: out(p) for name, p in module.named_parameters()}


def sgd_step(module, lr: float) -> None:
    """``p -= lr * p.grad`` on every parameter with a gradient."""
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.grad is not None:
                parameter -= lr * parameter.grad


def matrix_numel(module) -> int:
    """Elements of the module's parameters with two or more dimensions (its weight matrices)."""
    return sum(p.numel() for p in module.parameters() if p.dim() >= 2)


def run_op(op, x: torch.Tensor, grad: torch.Tensor, phase: str, layout=torch.clone) -> dict:
    """Forward ``op`` on ``layout(x)`` and backward ``grad`` into it, the gradient handed to
    the op's backward in ``layout`` too (:func:`strided` for the layout convention): output,
    its kind, input grad, and whether the op changed its input or the gradient handed to its
    backward (both belong to the caller). The phases are ``<phase>.forward`` and ``.backward``."""
    x = layout(x).requires_grad_()
    x_before = x.detach().clone()
    handed: list[tuple[torch.Tensor, torch.Tensor]] = []  # (gradient handed on, its value then)

    def hand_on(incoming):
        copy = layout(incoming)
        handed.append((copy, copy.clone()))
        return copy

    with recorder.Phase(f"{phase}.forward"):
        y = op(x)
    result = {"out": out(y), "kind": kind(y), "grad": None}
    if isinstance(y, torch.Tensor) and y.requires_grad:
        y.register_hook(hand_on)
        with recorder.Phase(f"{phase}.backward"):
            backward(y, grad)
        result["grad"] = out(x.grad)
    # exact: the input and the handed gradients against their own copies taken before
    result["input_changed"] = not torch.equal(x.detach(), x_before)
    # exact: the input and the handed gradients against their own copies taken before
    result["grad_changed"] = any(not torch.equal(now, then) for now, then in handed)
    return result
