"""The Pipes of 2.2-call-order, shared by the child and the parent: (stages, the batch size of each
call on one Pipe, split_size). M < K, M = 1, K = 1, an uneven last microbatch, 9 rows at 4 ([4, 4,
1], not torch.chunk's [3, 3, 3]), and later calls with other batch sizes."""
from __future__ import annotations

CALL_ORDER_CASES = [(3, [6, 5], 2), (2, [9], 2), (4, [2], 1), (1, [3], 1), (3, [5], 8), (3, [9, 12], 4), (5, [7], 1)]
