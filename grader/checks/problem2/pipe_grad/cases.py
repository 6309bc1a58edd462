"""The forwards of 2.2-no-grad, shared by the child and the parent: (stages, rows, split_size), and
the grad modes (``torch.<name>()``) each forward runs under."""
from __future__ import annotations

GRAD_CASE = (3, 6, 2)
GRAD_MODES = ("no_grad", "inference_mode")
