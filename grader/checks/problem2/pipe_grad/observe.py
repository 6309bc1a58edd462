"""2.2-no-grad and 2.2-backward, child side: the grad mode every grader stage ran in, and the
gradients, losses and parameters of training through the student's ``Pipe``. Judged in ``judge.py``."""
from __future__ import annotations

import torch

from grader.checks.problem2.pieces import student_pipeline
from grader.checks.problem2.pipe_grad.cases import GRAD_CASE, GRAD_MODES
from grader.checks.problem2.pipe_grad.training import BACKWARD_CASE, FROZEN_CASE, frozen_stages, through_frozen, train
from grader.checks.problem2.recorded import error_text
from grader.checks.problem2.stages import build_stages, make_batch
from grader.checks.recording import student_tensor


def _pipe(pipeline, stages, split_size: int):
    for stage in stages:
        stage.split_size = split_size
    return pipeline.Pipe(stages, devices=["cpu"] * len(stages), split_size=split_size)


def _under(mode, pipe, x, log: list) -> dict:
    del log[:]
    try:
        with mode():
            out = student_tensor(pipe(x), "Pipe forward")
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - e.g. a graph over inference tensors
        return {"error": error_text(error)}
    return {"stages": [(r["stage"], r["graph"]) for r in log], "requires_grad": bool(out.requires_grad),
            "grad_fn": out.grad_fn is not None, "grad_enabled_after": torch.is_grad_enabled(),
            "inference_after": torch.is_inference_mode_enabled()}


def observe_no_grad(seed: int, params: dict):
    """Runs the ``Pipe`` under ``torch.no_grad()`` and ``torch.inference_mode()`` and records the grad mode each stage saw."""
    pipeline, _ = student_pipeline(params)
    count, rows, split_size = GRAD_CASE
    log: list = []
    pipe = _pipe(pipeline, build_stages(seed, 0, count, log), split_size)
    try:
        modes = [{"case": name, **_under(getattr(torch, name), pipe, make_batch(seed, index, rows), log)}
                 for index, name in enumerate(GRAD_MODES)]
        after = _under(torch.enable_grad, pipe, make_batch(seed, 9, rows), log)
    finally:
        pipe.close()
    return {"modes": modes, "after": after}


def observe_backward(seed: int, params: dict):
    """Runs forward, backward (twice) and SGD steps through the ``Pipe`` and records outputs,
    gradients and parameters; then a Pipe of frozen stages."""
    pipeline, _ = student_pipeline(params)
    count, rows, split_size = BACKWARD_CASE
    stages = build_stages(seed, 0, count)
    pipe = _pipe(pipeline, stages, split_size)
    try:
        trained = train(seed, pipe, stages, list(pipe.parameters()))
    finally:
        pipe.close()
    frozen = _pipe(pipeline, frozen_stages(seed), FROZEN_CASE[2])
    try:
        return {"case": list(BACKWARD_CASE), **trained, "frozen": through_frozen(seed, frozen)}
    finally:
        frozen.close()
