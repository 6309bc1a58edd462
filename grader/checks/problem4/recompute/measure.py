"""CHILD side of 4.3 (the parent uses it too, on plain runs): the activations alive after the
forward, during and after the backward, and how often and in which order each layer ran,
counted by the grader itself (weak references to every tensor its layers make, the young
tensors the garbage collector sees, forward hooks on its layers). Nothing the student's
code says about itself is used."""
from __future__ import annotations

import gc

import torch
from torch import nn

from grader.checks.problem4.recompute.layers import Tracker, activation_bytes, parameters


def alive(tracker: Tracker, exclude: list) -> int:
    """Activation-sized storages alive now, other than those of ``exclude``: the grader's
    layers' tensors, and any tensor object created since the measurement began (copies kept
    in lists or on ``ctx``; ``gc.freeze`` put all older objects out of sight)."""
    excluded = {t.untyped_storage().data_ptr() for t in exclude if t is not None}
    found = {ptr for ptr, ref in tracker.refs.items() if not ref.expired()}
    for thing in gc.get_objects():
        if isinstance(thing, torch.Tensor) and thing.untyped_storage().nbytes() >= activation_bytes():
            found.add(thing.untyped_storage().data_ptr())
    return len(found - excluded)


def measure(run, layers, x) -> dict:
    """Stored activations after forward, peak during backward, what is still alive after it
    (the output still held, as a caller holds it), layer calls per phase, and the order in
    which backward ran the layers (it shows the segments: last segment first)."""
    tracker = Tracker()
    phase = ["forward"]
    calls = {"forward": [0] * len(layers), "backward": [0] * len(layers)}
    order: list[int] = []
    peak = [0]

    def exclude():
        found = parameters(layers)
        return found + [p.grad for p in found] + [x, x.grad]

    def count(index):
        calls[phase[0]][index] += 1
        if phase[0] == "backward":
            order.append(index)
            peak[0] = max(peak[0], alive(tracker, exclude()))

    handles = _hook(layers, count)
    gc.freeze()  # every object made so far is out of the tracker's sight: it sees what the run keeps
    Tracker.active = tracker
    try:
        output = run()
        stored = alive(tracker, exclude() + [output])
        phase[0] = "backward"
        if output.requires_grad:
            output.sum().backward()
        after = alive(tracker, exclude() + [output])
    finally:
        Tracker.active = None
        gc.unfreeze()
        _unhook(layers, handles)
    return {"stored_after_forward": stored, "peak_during_backward": peak[0], "stored_after_backward": after,
            "calls": calls, "order": order}


def _hook(layers, count) -> list:
    handles = []
    for index, layer in enumerate(layers):
        if isinstance(layer, nn.Module):
            handles.append(layer.register_forward_hook(lambda module, inputs, output, index=index: count(index)))
        else:
            layer.on_call = lambda index=index: count(index)
    return handles


def _unhook(layers, handles) -> None:
    for handle in handles:
        handle.remove()
    for layer in layers:
        if not isinstance(layer, nn.Module):
            layer.on_call = None
