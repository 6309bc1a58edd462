"""What ``make report`` measures with (provided): the bytes of the activations autograd saves,
the collectives a rank calls, the share of a core a run got, and timings taken in rounds.
:mod:`minitorch.measure` uses them on the student's code.
"""
from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist


class CpuShare:
    """CPU seconds this process used per wall-clock second while the calls it timed ran.

    Single-threaded work gets about 1.0 of a core on a machine where nothing else runs; less
    means other programs took the cores for part of the time (the report's "busy" signal).
    """

    def __init__(self) -> None:
        self.cpu_seconds = self.wall_seconds = 0.0

    def timed(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            cpu, wall = time.process_time(), time.perf_counter()
            try:
                return fn()
            finally:
                self.cpu_seconds += time.process_time() - cpu
                self.wall_seconds += time.perf_counter() - wall
        return run

    @property
    def share(self) -> float | None:
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds else None


def round_robin_seconds(runs: dict[Any, Callable[[], Any]], rounds: int) -> dict[Any, list[float]]:
    """Wall-clock seconds of every run in each of ``rounds`` rounds; a round runs each once, in
    an order that rotates from round to round, so that a burst of load from other programs
    falls on every run of a round alike and the ratios within a round stay comparable."""
    keys = list(runs)
    seconds: dict[Any, list[float]] = {key: [] for key in keys}
    for number in range(rounds):
        for key in keys[number % len(keys):] + keys[:number % len(keys)]:
            start = time.perf_counter()
            runs[key]()
            seconds[key].append(time.perf_counter() - start)
    return seconds


@contextmanager
def single_threaded():
    """One intra-op thread: a stage thread then computes on one core, as in `make bench`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- saved activations


class SavedBytes:
    """Bytes of the tensors autograd saves for backward that are alive, and their peak.

    ``with SavedBytes(exclude=params) as saved: ...`` counts every tensor saved while the
    block runs (forward and, for recomputation, backward), once per storage; a storage
    stops counting when autograd lets the last saved reference go. Parameters are excluded:
    they are not activations.
    """

    def __init__(self, exclude: Sequence[torch.Tensor] = ()):
        self._excluded = {p.untyped_storage().data_ptr() for p in exclude}
        self._references: dict[int, int] = {}
        self._sizes: dict[int, int] = {}
        self.live = 0
        self.peak = 0

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self._excluded or tensor.device.type != "cpu":
            return tensor
        if key not in self._references:
            self._sizes[key] = storage.nbytes()
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
        self._references[key] = self._references.get(key, 0) + 1
        holder = _Holder(tensor)
        weakref.finalize(holder, self._release, key)
        return holder  # type: ignore[return-value]  # unpack gives the tensor back

    def _release(self, key: int) -> None:
        self._references[key] -= 1
        if not self._references[key]:
            del self._references[key]
            self.live -= self._sizes.pop(key)

    @staticmethod
    def _unpack(value: Any) -> torch.Tensor:
        return value.tensor if isinstance(value, _Holder) else value

    def __enter__(self) -> SavedBytes:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self._hooks.__exit__(*exc_info)


class _Holder:
    """What autograd keeps for a saved tensor: freed exactly when autograd frees it."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


# ---------------------------------------------------------------- collectives

_COLLECTIVES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
                "_all_gather_base": "all_gather", "reduce_scatter": "reduce_scatter",
                "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
                "all_to_all": "all_to_all", "all_to_all_single": "all_to_all", "broadcast": "broadcast",
                "send": "send", "recv": "recv", "isend": "send", "irecv": "recv"}
# Bytes one rank sends, per element of the largest tensor of the call, ring algorithms (tp_comm).
RING_SHARE = {"all_reduce": lambda t: 2 * (t - 1) / t, "all_gather": lambda t: (t - 1) / t,
              "reduce_scatter": lambda t: (t - 1) / t, "all_to_all": lambda t: (t - 1) / t}


def record_collectives(log: list[dict], phase: list[str]) -> None:
    """Wrap torch.distributed's collectives (in this rank only) to append what they move to ``log``."""
    for name, kind in _COLLECTIVES.items():
        original = getattr(dist, name, None)
        if original is None:
            continue

        def recorded(*args, _original=original, _kind=kind, **kwargs):
            tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
            for a in list(args) + list(kwargs.values()):
                if isinstance(a, (list, tuple)) and all(isinstance(item, torch.Tensor) for item in a) and a:
                    tensors.append(torch.empty(sum(item.numel() for item in a), dtype=a[0].dtype, device="meta"))
            largest = max(tensors, key=lambda tensor: tensor.numel(), default=None)
            log.append({"phase": phase[0], "kind": _kind,
                        "numel": largest.numel() if largest is not None else 0,
                        "element_bytes": largest.element_size() if largest is not None else 0})
            return _original(*args, **kwargs)

        setattr(dist, name, recorded)
