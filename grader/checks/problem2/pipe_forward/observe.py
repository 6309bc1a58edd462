"""2.2-forward and 2.2-input-unchanged, child side: the student's ``Pipe`` on the grader's
stages, recording its outputs, the microbatches every stage was given, and the caller's batch
afterwards. Judged in ``judge.py``."""
from __future__ import annotations

import torch

from grader.checks.problem2.pieces import student_pipeline
from grader.checks.problem2.pipe_forward.cases import FORWARD_CASES, INPUT_CASES, container
from grader.checks.problem2.recorded import error_text
from grader.checks.problem2.stages import case_input, case_stages
from grader.checks.recording import student_tensor


def _output(out) -> dict:
    """What a forward returned: the tensor (a plain copy) with its device, or what it was instead."""
    out = student_tensor(out, "Pipe forward")
    return {"output": out.detach().clone(), "device": str(out.device), "requires_grad": bool(out.requires_grad)}


def observe_forward(seed: int, params: dict):
    """Runs the student's ``Pipe`` on the grader's stages for every FORWARD_CASE and records outputs
    and stage logs, up to the first call that raises (the cases before it are judged first)."""
    pipeline, _ = student_pipeline(params)
    cases = []
    for index, case in enumerate(FORWARD_CASES):
        log: list = []
        stages = case_stages(seed, index, case, log)
        for stage in stages:
            stage.split_size = case["split"]
        pipe = pipeline.Pipe(container(stages, case), devices=["cpu"] * len(stages), split_size=case["split"])
        try:
            stage_params = {id(p) for stage in stages for p in stage.parameters()}
            registered = {id(p) for p in pipe.parameters()} & stage_params
            runs: list = []
            for call, rows in enumerate(case["rows"]):
                del log[:]
                try:
                    seen = _output(pipe(case_input(seed, 100 * index + call, rows, case)))
                except NotImplementedError:
                    raise
                except Exception as error:  # noqa: BLE001 - judged with its case, after the cases before it
                    seen = {"error": error_text(error)}
                runs.append({**seen, "sizes": [[r["rows"] for r in log if r["stage"] == j] for j in range(len(stages))]})
                if "error" in seen:
                    break
        finally:
            pipe.close()
        cases.append({"case": index, "runs": runs, "registered": len(registered), "parameters": len(stage_params)})
        if "error" in runs[-1]:
            break  # a forward that raises (out of memory, say) is not run again on every later case
    return cases


def input_batch(seed: int, index: int) -> torch.Tensor:
    """The caller's batch of INPUT_CASES[index], as the caller made it."""
    case = INPUT_CASES[index]
    return case_input(seed, 500 + index, case["rows"], case).requires_grad_(case.get("requires_grad", False))


def _forward(pipe, x, no_grad: bool) -> dict:
    try:
        with torch.no_grad() if no_grad else torch.enable_grad():
            return {"output": student_tensor(pipe(x), "Pipe forward").detach().clone()}
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - judged against the same forward on a contiguous copy
        return {"error": error_text(error)}


def observe_input_unchanged(seed: int, params: dict):
    """Runs the ``Pipe`` on each batch of INPUT_CASES and records the batch afterwards (its values,
    requires_grad, whether it became part of a graph, its ``.grad``); for a batch that is not
    contiguous, the output, and the output for a contiguous copy of it."""
    pipeline, _ = student_pipeline(params)
    entries = []
    for index, case in enumerate(INPUT_CASES):
        x = input_batch(seed, index)
        stages = case_stages(seed, 500 + index, case)
        for stage in stages:
            stage.split_size = case["split"]
        pipe = pipeline.Pipe(stages, devices=["cpu"] * len(stages), split_size=case["split"])
        no_grad = case.get("mode") == "no_grad"
        try:
            seen = _forward(pipe, x, no_grad)
            entry = {"case": index, "values": x.detach().clone(), "requires_grad": bool(x.requires_grad),
                     "grad_fn": x.grad_fn is not None, "grad": x.is_leaf and x.grad is not None}
            if case.get("layout") == "transposed":
                entry.update(forward=seen, contiguous=_forward(pipe, input_batch(seed, index).contiguous(), no_grad))
        finally:
            pipe.close()
        entries.append(entry)
    return entries
