"""The grader's own layers for 4.3 and the cases built from them, shared by both sides: the
child runs the student's recomputation on them, the parent runs them plainly for the expected
values. Every tensor they make is shown to the active :class:`Tracker` (the child's memory
measure), so that what autograd keeps inside the graph can be counted."""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from grader.checks.problem4.recompute.cases import BATCH, WIDTH, RecomputeCase, recompute_cases


class Tracker:
    """Weak references to the storages of every tensor the grader's layers create while a
    measurement runs (``Tracker.active``)."""

    active: Tracker | None = None

    def __init__(self):
        self.refs: dict[int, StorageWeakRef] = {}

    def add(self, *tensors: torch.Tensor) -> None:
        for tensor in tensors:
            storage = tensor.untyped_storage()
            self.refs[storage.data_ptr()] = StorageWeakRef(storage)


class PlainFunction:
    """``sin(x)``: a layer that is a plain callable, not an ``nn.Module`` (no parameters).
    ``on_call`` (set by the grader while it counts) is called on every call."""

    def __init__(self):
        self.on_call = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.on_call is not None:
            self.on_call()
        return torch.sin(x)


class GraderLayer(nn.Module):
    """``dropout(tanh(x @ weight + bias))``: a layer the grader builds, hooks and counts. With
    ``spare``, it also holds a parameter its forward never uses (one of a model's heads that
    this pass does not run): autograd finds no path to it."""

    def __init__(self, generator: torch.Generator, dropout: float, dtype: torch.dtype, spare: bool = False):
        super().__init__()
        scale = 1 / math.sqrt(WIDTH)
        self.weight = nn.Parameter(torch.randn(WIDTH, WIDTH, generator=generator, dtype=dtype) * scale)
        self.bias = nn.Parameter(torch.randn(WIDTH, generator=generator, dtype=dtype) * scale)
        if spare:
            self.spare = nn.Parameter(torch.randn(WIDTH, generator=generator, dtype=dtype) * scale)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tanh_dropout(x @ self.weight + self.bias, self.dropout)


class ParameterFreeLayer(nn.Module):
    """``dropout(tanh(1.5 x))``: a module without parameters."""

    def __init__(self, dropout: float):
        super().__init__()
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tanh_dropout(1.5 * x, self.dropout)


def tanh_dropout(pre: torch.Tensor, dropout: float) -> torch.Tensor:
    """Dropout written out, so that every tensor it keeps is one the tracker sees."""
    activation = torch.tanh(pre)
    if not dropout:
        if Tracker.active is not None:
            Tracker.active.add(pre, activation)
        return activation
    keep = torch.rand(activation.shape, dtype=activation.dtype) >= dropout
    output = activation * keep / (1 - dropout)
    if Tracker.active is not None:
        Tracker.active.add(pre, activation, keep, output)
    return output


CONTAINERS = {"list": list, "tuple": tuple, "ModuleList": nn.ModuleList, "Sequential": nn.Sequential}


def as_passed(layers: list, case: RecomputeCase):
    """The layers in the container ``case`` passes them in."""
    container = CONTAINERS[case.container]
    return container(*layers) if container is nn.Sequential else container(layers)


def parameters(layers) -> list:
    """Every parameter of the layers once, in order (a module or weight may appear twice)."""
    unique = {id(p): p for layer in layers if isinstance(layer, nn.Module) for p in layer.parameters()}
    return list(unique.values())


def shared_layers(generator: torch.Generator, case: RecomputeCase, dtype: torch.dtype) -> list:
    """kind "shared": the last layer is the one before it again (a module twice in a row), the
    third-last has that module's weight (a parameter of two modules) and, from five layers on,
    the fourth-last is the first layer again (the same module in the first and the last
    segment). The cases keep the last four layers in the last segment: every parameter is used
    in one segment only or once in each segment, where the contract promises the plain run's
    bits (autograd then sums its gradient in the plain run's order)."""
    layers = [GraderLayer(generator, case.dropout, dtype) for _ in range(case.layers)]
    if case.layers >= 2:
        layers[-1] = layers[-2]
    if case.layers >= 3:
        layers[-3].weight = layers[-2].weight
    if case.layers >= 5:
        layers[-4] = layers[0]
    return layers


def build_case(seed: int, index: int, case: RecomputeCase | None = None):
    """The layers (a plain list), input and RNG seed of recomputation case ``index``."""
    case = case or recompute_cases(seed)[index]
    dtype = getattr(torch, case.dtype)
    generator = torch.Generator().manual_seed(seed * 100 + index)
    layers: list = shared_layers(generator, case, dtype) if case.kind == "shared" else []
    for i in range(0 if case.kind == "shared" else case.layers):
        if case.kind == "functions" and i % case.function_every == case.function_every - 1:
            layers.append(PlainFunction())
        elif case.kind == "no-params":
            layers.append(ParameterFreeLayer(case.dropout))
        else:
            layer = GraderLayer(generator, case.dropout, dtype, spare=case.kind == "unused" and i % 2 == 0)
            if case.kind == "frozen" and i % 2 == 0:
                layer.requires_grad_(False)
            layers.append(layer)
    shape = (*case.shape, WIDTH)
    if case.transposed:
        x = torch.randn(shape[::-1], generator=generator, dtype=dtype).permute(*reversed(range(len(shape))))
    else:
        x = torch.randn(shape, generator=generator, dtype=dtype)
    return layers, x.requires_grad_(case.input_grad), seed * 100 + index + 1


def given_input(x: torch.Tensor, case: RecomputeCase) -> torch.Tensor:
    """The tensor a run is given: ``x`` itself or, for ``case.non_leaf``, a new non-leaf copy
    of it that retains its gradient (the output of an earlier layer, made afresh for each run)."""
    if not case.non_leaf:
        return x
    copy = x.clone()
    copy.retain_grad()
    return copy


def optimizer_step(layers) -> None:
    """What a ``repeat`` case does between the two calls: every parameter that requires grad
    moves by a fixed ramp (the same on both sides, whatever the gradients were)."""
    with torch.no_grad():
        for parameter in parameters(layers):
            if parameter.requires_grad:
                parameter.add_(torch.linspace(-0.25, 0.25, parameter.numel(), dtype=parameter.dtype).view(parameter.shape))


def preset_gradients(layers, x) -> None:
    """Gradients already there before the run (a caller accumulating over several backwards):
    every tensor that requires grad starts with ``.grad`` = a fixed ramp."""
    for tensor in [x, *parameters(layers)]:
        if tensor.requires_grad:
            tensor.grad = torch.linspace(-0.5, 0.5, tensor.numel(), dtype=tensor.dtype).reshape(tensor.shape)


def loss_weights(output: torch.Tensor) -> torch.Tensor:
    """The weights of the loss ``sum(weights * output)`` every run is differentiated with."""
    return torch.linspace(-1, 1, output.numel(), dtype=output.dtype).reshape(output.shape)


def plain_forward(layers, x) -> torch.Tensor:
    h = x
    for layer in layers:
        h = layer(h)
    return h


def activation_bytes() -> int:
    """Storages at least this large are activations (a 24 x 32 float64 batch), never weights."""
    return BATCH * WIDTH * 8
