"""Torch on one thread while a check's code runs (either side of the trust boundary): the
checks' tensors are tiny, and on a busy machine a pool of threads makes each of their matrix
products wait for cores (ten to fifty times slower, measured in Problems 3 and 4)."""
from __future__ import annotations

import functools

import torch


def single_threaded(function):
    """``function`` run with ``torch.set_num_threads(1)``, the previous count put back."""
    @functools.wraps(function)
    def run(*args, **kwargs):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return function(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return run
