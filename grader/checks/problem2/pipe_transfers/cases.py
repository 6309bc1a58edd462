"""The forward of 2.2-transfers, shared by the child and the parent: (stages, rows, split_size) on
distinct devices that are all the CPU, so a move guarded by ``if x.device != device`` (or by the
device of the previous stage) happens here as it would between GPUs, and is seen."""
from __future__ import annotations

TRANSFER_CASE = (3, 6, 2)
TRANSFER_DEVICES = ["cpu:0", "cpu", "cpu:0"]
