"""2.2-transfers, child side: every torch call the calling thread makes while the student's
``Pipe`` forwards a batch in each memory layout (a torch function mode is thread-local: stage
threads are not seen), in order with the submits and receives it makes. Judged in ``judge.py``."""
from __future__ import annotations

from torch.overrides import TorchFunctionMode

from grader.checks.problem2.pieces import student_pipeline
from grader.checks.problem2.pipe_transfers.cases import TRANSFER_CASE, TRANSFER_DEVICES, TRANSFER_LAYOUTS
from grader.checks.problem2.recorded import error_text
from grader.checks.problem2.stages import build_stages, case_input, make_batch
from grader.checks.recording import trusted


def _storages(value, found: set) -> set:
    import torch

    if isinstance(value, torch.Tensor):
        try:
            found.add(value.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):
            pass
    elif isinstance(value, (list, tuple)):
        for item in value:
            _storages(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _storages(item, found)
    return found


class CallingThreadOps(TorchFunctionMode):
    """Records every torch call made on the thread that entered it: its name and whether its
    result is new data (not a view of an argument)."""

    def __init__(self, log: list):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        fresh = bool(_storages(result, set()) - _storages((args, kwargs or {}), set()))
        self.log.append(("op", getattr(func, "__name__", str(func)), fresh))
        return result


def _batch(seed: int, rows: int, layout: str):
    """The grader's batch of ``rows`` rows in ``layout`` (a name in ``TRANSFER_LAYOUTS``)."""
    if layout == "every other row":
        return make_batch(seed, 0, 2 * rows)[::2]
    if layout == "expanded":
        return make_batch(seed, 0, 1).expand(rows, -1)
    return case_input(seed, 0, rows, {"layout": layout})


def _forward(seed: int, pipeline, runtime, layout: str) -> dict:
    """The calling thread's torch calls, submits and receives while a new ``Pipe`` forwards the
    batch in ``layout``; an error on a batch that is not contiguous is recorded (on a contiguous
    one it is the check's failure)."""
    count, rows, split_size = TRANSFER_CASE
    stages = build_stages(seed, 0, count)
    for stage in stages:
        stage.split_size = split_size
    pipe = pipeline.Pipe(stages, devices=TRANSFER_DEVICES, split_size=split_size)
    log: list = []
    caller = trusted.get_ident()

    def on_event(event) -> None:
        if event.kind in ("submit", "receive") and trusted.get_ident() == caller:
            log.append((event.kind, event.stage, False))

    x, error = _batch(seed, rows, layout), None
    try:
        with runtime.observe(on_event), CallingThreadOps(log):
            pipe(x)
    except NotImplementedError:
        raise
    except Exception as failure:  # noqa: BLE001 - a layout the Pipe refuses is 2.2-input-unchanged's
        if layout == "contiguous":
            raise
        error = error_text(failure)
    finally:
        pipe.close()
    return {"case": layout, "log": log, "error": error}


def observe_transfers(seed: int, params: dict):
    """Records which tensor operations the calling thread ran while a ``Pipe`` forwarded a batch in
    each layout (work belongs on stage threads)."""
    pipeline, runtime = student_pipeline(params)
    return [_forward(seed, pipeline, runtime, layout) for layout in TRANSFER_LAYOUTS]
