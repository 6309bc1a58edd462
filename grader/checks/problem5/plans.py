"""What Problem 5's checks share across the trust boundary: the fields of the provided data
types, the contract's validity rule (the docstring states it), and how the child records an
``Estimate`` the student's code returned: each field as a plain number with its kind, read
without running any method of the object."""
from __future__ import annotations

import dataclasses
import numbers

import torch

from grader.checks.recording import describe, provided, student_tensor

MODEL_FIELDS = ("layers", "hidden", "heads", "seq_len", "vocab")
CLUSTER_FIELDS = ("gpus", "gpus_per_node", "peak_flops", "efficiency", "memory_bytes", "nvlink_bytes_per_s",
                  "ib_bytes_per_s")
COUNT_FIELDS = ("t", "p", "d", "microbatches")
MEMORY_FIELDS = ("state_bytes", "activation_bytes", "memory_limit")
COMPUTE_FIELDS = ("flops_per_gpu", "compute_s", "bubble_s")
COMMUNICATION_FIELDS = ("tensor_parallel_s", "pipeline_s", "data_parallel_s")
TIME_FIELDS = ("compute_s", "bubble_s", *COMMUNICATION_FIELDS)


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def valid_plan(model: dict, cluster: dict, batch: int, t: int, p: int, microbatch: int) -> bool:
    """The contract's validity, for arguments that are ints >= 1: t p divides the GPUs, p the
    layers, t the heads, and the batch splits into d equal shares of whole microbatches."""
    if cluster["gpus"] % (t * p) or model["layers"] % p or model["heads"] % t:
        return False
    return batch % (cluster["gpus"] // (t * p) * microbatch) == 0


def valid_plans(model: dict, cluster: dict, batch: int, microbatch: int) -> list[tuple[int, int]]:
    """Every valid (t, p), t-major."""
    return [(t, p) for t in divisors(cluster["gpus"]) for p in divisors(model["layers"])
            if valid_plan(model, cluster, batch, t, p, microbatch)]


def objects(model: dict, cluster: dict, name: str = "hidden case"):
    """The provided ``Model`` and ``Cluster`` of a case (the grader's copy of the module). Every
    case's model has the same name: a result cached by name is a result of another model."""
    cost_model = provided("minitorch.cost_model")
    return cost_model.Model(name, **model), cost_model.Cluster(**cluster)


def kind(value) -> str:
    """A value's type, as a student reads it: ``int``, ``float``, ``numpy.int64``."""
    kind_of = type(value)
    return kind_of.__qualname__ if kind_of.__module__ == "builtins" else f"{kind_of.__module__}.{kind_of.__qualname__}"


def number(value) -> int | float | None:
    """``value`` as a plain int or float when it is a real number (a bool is not), else None.
    Read through the base classes' own conversions: no method the student's code defines runs."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, numbers.Integral) and type(value).__module__ == "numpy":
        return int(value)
    if isinstance(value, numbers.Real) and type(value).__module__ == "numpy":
        return float(value)
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_complex and value.dtype != torch.bool:
        return student_tensor(value, "a field").item()
    return None


def read_estimate(value) -> dict:
    """What the student's code returned where an ``Estimate`` is due: ``{"estimate": bool,
    "returned": its kind and start, "fields": {field: {"value", "kind"}} (Estimates only)}``."""
    estimate_class = provided("minitorch.cost_model").Estimate
    if not isinstance(value, estimate_class):
        return {"estimate": False, "returned": describe(value), "fields": None}
    fields = {}
    for field in dataclasses.fields(estimate_class):
        item = object.__getattribute__(value, field.name)
        fields[field.name] = {"value": number(item), "kind": kind(item), "shown": describe(item)}
    return {"estimate": True, "returned": kind(value), "fields": fields}
