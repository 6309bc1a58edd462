"""2.2-transfers, parent side: between the first submit and the last receive the calling thread
makes no copy, transfer or computation, and before the first submit only views. Observed in
``observe.py``.

The batch comes in every memory layout. Layout is a convention for the VALUES (2.2-input-unchanged
judges a batch that is not contiguous against the same forward on a contiguous copy; an error on
such a batch is its, not this criterion's), but not for the COST: ``x.contiguous()`` (or
``.clone()``, ``torch.cat``) of a batch that is not contiguous copies the whole batch on the
calling thread before any stage starts, which holds up the first stage like a move there does,
and the contract lets the calling thread make only views. So a Pipe that is right on contiguous
batches and copies only the others loses this point (its values and its input convention keep
theirs); making a microbatch contiguous inside the submitted callable keeps it.
"""
from __future__ import annotations

from grader.checks.judging import Fail, expect_cases
from grader.checks.problem2.pipe_transfers.cases import TRANSFER_DEVICES, TRANSFER_LAYOUTS

# Ops that move or copy data whatever their result: .to("cpu") on a CPU tensor returns the
# tensor itself, so on a CPU-only grader only the name gives a transfer away. Other ops
# count only when they make new data (x.contiguous() of a contiguous batch is x itself).
TRANSFER_OPS = {"to", "cuda", "cpu", "copy_", "clone", "pin_memory", "detach_copy", "new_tensor"}
LAYOUTS = {  # what the message says of each batch
    "contiguous": "",
    "transposed": ", on a batch that is not contiguous (rows and columns swapped in memory, as x.t() of a 6 x 6 batch)",
    "every other row": ", on a batch that is not contiguous (every other row of a larger batch, x[::2])",
    "expanded": ", on a batch that is not contiguous (one row expanded to 6, x.expand(6, -1))",
}
NOT_CONTIGUOUS = (" x.contiguous() (or .clone(), torch.cat) of a batch that is not contiguous copies all of it there: "
                  "if a stage needs contiguous memory, make the microbatch contiguous inside the submitted callable")


def _judge_log(layout: str, log) -> None:
    kinds = [entry[0] for entry in log]
    if "submit" not in kinds:
        if layout == "contiguous":
            raise Fail("no submit was recorded on the calling thread; every stage must run through self.workers.submit")
        first_submit = len(kinds)  # it raised before any submit: what it ran until then is still judged
    else:
        first_submit = kinds.index("submit")
    last_receive = len(kinds) - 1 - kinds[::-1].index("receive") if "receive" in kinds else len(kinds)
    for position, (kind, name, fresh) in enumerate(log[:last_receive]):
        if kind != "op" or not (name in TRANSFER_OPS or fresh):
            continue
        submits = kinds[:position].count("submit")
        when = "before the first submit" if position < first_submit else f"after {submits} submits, before the last receive"
        raise Fail(
            f"Pipe.forward ran torch `{name}` on the calling thread {when} (stages on the devices "
            f"{', '.join(TRANSFER_DEVICES)}){LAYOUTS[layout]}. Only views of the input (torch.split, slicing) may be made there before "
            "the first submit, and only torch.cat after the last receive; moving a microbatch (.to(device)), copying "
            "or computing on it belongs inside the submitted callable. On GPUs a copy on the calling thread blocks it, "
            "so the next stage's work is submitted late and the stages wait for each other (no pipeline speedup)."
            + (NOT_CONTIGUOUS if layout != "contiguous" else "")
        )


def judge_transfers(seed: int, params: dict, observation) -> None:
    entries = expect_cases(observation, TRANSFER_LAYOUTS, "Pipe forward of a batch in each memory layout")
    for layout, seen in zip(TRANSFER_LAYOUTS, entries):
        _judge_log(layout, seen["log"])
