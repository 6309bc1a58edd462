"""Torch on one thread while a Problem 4 check runs (either side): the layers are tiny, and on
a busy machine a pool of threads makes each of their matrix products wait for cores (ten
times slower, measured)."""
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
