"""2.2-transfers, parent side: between the first submit and the last receive the calling thread
makes no copy, transfer or computation, and before the first submit only views. Observed in
``observe.py``."""
from __future__ import annotations

from grader.checks.judging import Fail
from grader.checks.problem2.pipe_transfers.cases import TRANSFER_DEVICES

# Ops that move or copy data whatever their result: .to("cpu") on a CPU tensor returns the
# tensor itself, so on a CPU-only grader only the name gives a transfer away. Other ops
# count only when they make new data (x.contiguous() of a contiguous batch is x itself).
TRANSFER_OPS = {"to", "cuda", "cpu", "copy_", "clone", "pin_memory", "detach_copy", "new_tensor"}


def judge_transfers(seed: int, params: dict, observation) -> None:
    kinds = [entry[0] for entry in observation]
    if "submit" not in kinds:
        raise Fail("no submit was recorded on the calling thread; every stage must run through self.workers.submit")
    first_submit = kinds.index("submit")
    last_receive = len(kinds) - 1 - kinds[::-1].index("receive") if "receive" in kinds else len(kinds)
    for position, (kind, name, fresh) in enumerate(observation[:last_receive]):
        if kind != "op" or not (name in TRANSFER_OPS or fresh):
            continue
        submits = kinds[:position].count("submit")
        when = "before the first submit" if position < first_submit else f"after {submits} submits, before the last receive"
        raise Fail(
            f"Pipe.forward ran torch `{name}` on the calling thread {when} (stages on the devices "
            f"{', '.join(TRANSFER_DEVICES)}). Only views of the input (torch.split, slicing) may be made there before "
            "the first submit, and only torch.cat after the last receive; moving a microbatch (.to(device)), copying "
            "or computing on it belongs inside the submitted callable. On GPUs a copy on the calling thread blocks it, "
            "so the next stage's work is submitted late and the stages wait for each other (no pipeline speedup)"
        )
