"""2.2-transfers, child side: every torch call the calling thread makes while the student's
``Pipe`` forwards a batch (a torch function mode is thread-local: stage threads are not seen), in
order with the submits and receives it makes. Judged in ``judge.py``."""
from __future__ import annotations

from torch.overrides import TorchFunctionMode

from grader.checks.problem2.pieces import student_pipeline
from grader.checks.problem2.pipe_transfers.cases import TRANSFER_CASE, TRANSFER_DEVICES
from grader.checks.problem2.stages import build_stages, make_batch
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


def observe_transfers(seed: int, params: dict):
    """Records which tensor operations the calling thread ran while the ``Pipe`` forwarded a batch (work belongs on stage threads)."""
    pipeline, runtime = student_pipeline(params)
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

    x = make_batch(seed, 0, rows)
    try:
        with runtime.observe(on_event), CallingThreadOps(log):
            pipe(x)
    finally:
        pipe.close()
    return log
