"""The forwards of 2.2-transfers, shared by the child and the parent: (stages, rows, split_size) on
distinct devices that are all the CPU, so a move guarded by ``if x.device != device`` (or by the
device of the previous stage) happens here as it would between GPUs, and is seen; one forward per
memory layout of the batch, so a copy made only of a batch that is not contiguous is seen too
("transposed": rows and columns swapped in memory; "every other row": ``x[::2]`` of a larger
batch; "expanded": one row expanded to every row)."""
from __future__ import annotations

TRANSFER_CASE = (3, 6, 2)
TRANSFER_DEVICES = ["cpu:0", "cpu", "cpu:0"]
TRANSFER_LAYOUTS = ["contiguous", "transposed", "every other row", "expanded"]
