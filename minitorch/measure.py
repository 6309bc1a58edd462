"""``make report``: measure what you built, on this computer's CPU (provided).

Runs YOUR code from ``minitorch/pipeline.py`` and ``minitorch/tensor_parallel.py`` and writes,
for each measurement, a figure (PNG) and its raw numbers (JSON) into ``report/``; REPORT.md
asks the written questions beside those figures (Q1-Q9)::

    pipe_speedup      Problem 2.2  your Pipe's forward speedup against M, stages that sleep
                                   and stages that compute, beside 2M/(M+1) and the bubble  (Q1, Q3)
    balance           Problem 2.4  your balanced split against the even split, simulated      (Q2)
    activations       Problems 4.1, 4.2  peak activations per device of GPipe, your 1F1B and
                                   your interleaved schedule: simulated and executed            (Q4)
    recomputation     Problem 4.3  your checkpoint_sequential: stored activations, time and
                                   recomputed forwards against the number of segments        (Q5)
    tp_bytes          Problem 3    bytes your tensor-parallel layer moves per rank (gloo,
                                   t = 2), recorded against the formula; with and without
                                   sequence parallelism, and the activations each rank keeps (Q6)
    plan              Problem 5    your estimate of every plan and your best_plan: the 1T model
                                   at t = 4, 8, 16; the lecture's anchor on 8 and 64 GPUs      (Q7-Q9)

One progress line per measurement. A measurement whose code is still a stub (or fails) is one
line saying so; the others still run and the command exits 0. ``--quick`` (or the environment
variable MINITORCH_REPORT_QUICK=1) shrinks every measurement to a few seconds: its numbers are
for checking that the report runs, not for answering the questions. The full run takes about
1-2 minutes on a 2-core laptop. Times are wall-clock seconds on this machine's CPU; the numbers
differ from run to run (close other programs first).
"""
from __future__ import annotations

import functools
import json
import math
import os
import statistics
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from minitorch import cli

QUICK_VARIABLE = "MINITORCH_REPORT_QUICK"
DEFAULT_OUT = Path("report")


class Missing(Exception):
    """A student function the measurement needs is not in the student file yet."""


@dataclass(frozen=True)
class Settings:
    quick: bool


@dataclass(frozen=True)
class Measurement:
    name: str            # report/<name>.png and report/<name>.json
    title: str           # what the progress line says
    problems: str        # whose code it runs: "Problem 2.2"
    run: Callable[[Settings], dict]
    plot: Callable[[dict, Any], Any]    # (data, matplotlib.pyplot) -> the figure of the data

    def describe(self) -> str:
        return f"{self.title} ({self.problems})"


def student(module_name: str, name: str, problem: str) -> Any:
    """``minitorch.<module_name>.<name>``, imported now (never at module level)."""
    import importlib

    module = importlib.import_module(f"minitorch.{module_name}")
    if not hasattr(module, name):
        raise Missing(f"minitorch/{module_name}.py has no {name} yet (Problem {problem})")
    return getattr(module, name)


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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


# ---------------------------------------------------------------- Problem 2.2: Pipe speedup


class SleepStage(nn.Module):
    """A stage that takes ``seconds_per_row`` per row and computes nothing (no CPU used)."""

    def __init__(self, seconds_per_row: float):
        super().__init__()
        self.seconds_per_row = seconds_per_row

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds_per_row * x.shape[0])
        return x + 1


def run_pipe_speedup(settings: Settings) -> dict:
    from minitorch.timing import time_paired
    from minitorch.workload import two_stages

    pipe_class = student("pipeline", "Pipe", "2.2")
    counts = (1, 4) if settings.quick else (1, 2, 4, 8, 16)
    rows, width = (64, 64) if settings.quick else (1024, 512)
    stage_seconds = 0.01 if settings.quick else 0.08
    torch.manual_seed(0)
    kinds: dict[str, list[nn.Module]] = {
        "sleep": [SleepStage(stage_seconds / rows) for _ in range(2)],
        "compute": two_stages(width, 4),
    }
    inputs = torch.randn(rows, width)
    results = []
    with single_threaded(), torch.no_grad():
        for kind, stages in kinds.items():
            for num_microbatches in counts:
                outputs: dict[str, torch.Tensor] = {}
                with pipe_class(stages, ["cpu", "cpu"], split_size=-(-rows // num_microbatches)) as pipe:
                    def check():
                        torch.testing.assert_close(outputs["pipe"], outputs["sequential"])

                    timing = time_paired(
                        lambda: outputs.__setitem__("sequential", stages[1](stages[0](inputs))),
                        lambda: outputs.__setitem__("pipe", pipe(inputs)),
                        repeats=3 if settings.quick else 5, max_attempts=1 if settings.quick else 2, check=check)
                speedup = timing.median_ratio
                results.append({
                    "stages": kind, "M": num_microbatches, "speedup": speedup,
                    "speedup_min": min(timing.ratios), "speedup_max": max(timing.ratios),
                    "sequential_s": statistics.median(timing.baseline_seconds),
                    "pipe_s": statistics.median(timing.candidate_seconds),
                    "limit_2M_over_M_plus_1": 2 * num_microbatches / (num_microbatches + 1),
                    "bubble_formula": 1 / (num_microbatches + 1),
                    "bubble_measured": 1 - speedup / 2,
                })
    return {"num_stages": 2, "rows": rows, "width": width, "stage_seconds_sleep": stage_seconds,
            "intra_op_threads": 1, "cpus": os.cpu_count(), "results": results}


def plot_pipe_speedup(data: dict, plt) -> Any:
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.3))
    results = data["results"]
    counts = sorted({row["M"] for row in results})
    left.plot(counts, [2 * m / (m + 1) for m in counts], "k--", label="2M/(M+1): K = 2 stages, only the fill-and-drain bubble")
    right.plot(counts, [1 / (m + 1) for m in counts], "k--", label="formula (K-1)/(M+K-1), K = 2")
    for kind, marker in (("sleep", "o-"), ("compute", "s-")):
        rows = [row for row in results if row["stages"] == kind]
        label = "stages that sleep" if kind == "sleep" else f"stages that compute (width {data['width']}, 1 thread each)"
        left.errorbar([r["M"] for r in rows], [r["speedup"] for r in rows], fmt=marker, capsize=3, label=label,
                      yerr=[[r["speedup"] - r["speedup_min"] for r in rows],
                            [r["speedup_max"] - r["speedup"] for r in rows]])
        right.plot([r["M"] for r in rows], [r["bubble_measured"] for r in rows], marker, label=f"{label}: 1 - speedup/K")
    left.set(title="Your Pipe, forward only, K = 2 stages", xlabel="microbatches M",
             ylabel="speedup over sequential (x, median; bars: min-max)")
    right.set(title="Bubble: idle share of the 2 stages' time", xlabel="microbatches M",
              ylabel="bubble fraction of total time")
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xticks(counts, [str(m) for m in counts])
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    return figure


# ---------------------------------------------------------------- Problem 2.4: balance


def stage_costs(costs: Sequence[float], sizes: Sequence[int]) -> list[float]:
    """The cost of each stage when consecutive layers are cut into stages of ``sizes``."""
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    return [sum(costs[start:stop]) for start, stop in zip(bounds, bounds[1:])]


def simulated_forward(stage_times: Sequence[float], num_microbatches: int) -> float:
    """Makespan of the GPipe forward when stage j takes ``stage_times[j]`` per microbatch:
    microbatch i starts on stage j when it left stage j-1 and stage j finished microbatch i-1."""
    finish = [0.0] * len(stage_times)
    for _ in range(num_microbatches):
        ready = 0.0
        for stage, duration in enumerate(stage_times):
            ready = max(ready, finish[stage]) + duration
            finish[stage] = ready
    return finish[-1]


def run_balance(settings: Settings) -> dict:
    balance_stages = student("pipeline", "balance_stages", "2.4")
    # The write-up's case (Q2): 15 layers of cost 1 and the output layer, about 3.3 layers (lecture).
    num_stages, output_layer = 4, 3.3
    costs = [1.0] * 15 + [output_layer]
    num_layers = len(costs)
    even = [num_layers // num_stages] * num_stages
    balanced = [int(size) for size in balance_stages(list(costs), num_stages)]
    if sum(balanced) != num_layers or len(balanced) != num_stages or min(balanced) < 1:
        raise ValueError(f"balance_stages({num_layers} costs, {num_stages}) returned {balanced}: "
                         f"need {num_stages} stage sizes >= 1 that sum to {num_layers}")
    splits = {}
    for name, sizes in (("even", even), ("balanced", balanced)):
        per_stage = stage_costs(costs, sizes)
        rows = []
        for num_microbatches in (1, 2, 4, 8, 16, 32, 64):
            makespan = simulated_forward(per_stage, num_microbatches)
            rows.append({"M": num_microbatches, "makespan": makespan,
                         "bubble": 1 - num_microbatches * sum(per_stage) / (num_stages * makespan)})
        splits[name] = {"sizes": sizes, "stage_costs": per_stage, "slowest": max(per_stage), "by_M": rows}
    counts = [row["M"] for row in rows]
    return {"costs": costs, "num_stages": num_stages, "output_layer_cost": output_layer, "splits": splits,
            "uniform_bubble": [{"M": m, "bubble": (num_stages - 1) / (m + num_stages - 1)} for m in counts]}


def plot_balance(data: dict, plt) -> Any:
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.3))
    num_stages = data["num_stages"]
    positions = range(num_stages)
    for offset, (name, split) in zip((-0.2, 0.2), data["splits"].items()):
        bars = left.bar([p + offset for p in positions], split["stage_costs"], width=0.4,
                        label=f"{name} split {split['sizes']}: slowest {split['slowest']:g}")
        left.bar_label(bars, labels=[str(size) for size in split["sizes"]], fontsize=7, padding=1)
    left.set(title=f"{len(data['costs']) - 1} layers of cost 1 and an output layer of {data['output_layer_cost']:g}",
             xlabel="stage (bar label: layers in it)", ylabel="stage time per microbatch (layer units)")
    left.set_xticks(list(positions))
    for name, split in data["splits"].items():
        rows = split["by_M"]
        right.plot([r["M"] for r in rows], [r["bubble"] for r in rows], "o-", label=f"{name} split, simulated")
    rows = data["uniform_bubble"]
    right.plot([r["M"] for r in rows], [r["bubble"] for r in rows], "k--", label="(K-1)/(M+K-1), equal stages")
    right.set(title=f"Bubble of the forward, K = {num_stages}", xlabel="microbatches M",
              ylabel="idle share of total stage time")
    right.set_xscale("log", base=2)
    right.set_xticks([r["M"] for r in rows], [str(r["M"]) for r in rows])
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    return figure


# ---------------------------------------------------------------- Problems 4.1-4.2: activations


def run_activations(settings: Settings) -> dict:
    from minitorch import schedules
    from minitorch.executor import run_schedule
    from minitorch.runtime import StageWorkers

    num_stages, num_microbatches, num_chunks = 4, 8, 2
    candidates: list[tuple[str, int, Callable[[], list]]] = [  # (name, chunks per device, schedule)
        ("GPipe", 1, lambda: schedules.gpipe(num_stages, num_microbatches)),
        ("1F1B (yours)", 1, lambda: student("pipeline", "one_f_one_b", "4.1")(num_stages, num_microbatches)),
        (f"interleaved v = {num_chunks} (yours)", num_chunks, lambda: student(
            "pipeline", "interleaved_one_f_one_b", "4.2")(num_stages, num_microbatches, num_chunks)),
    ]
    width, rows = 16, 4 * num_microbatches
    torch.manual_seed(0)
    inputs, targets = torch.randn(rows, width), torch.randn(rows, width)
    entries = []
    for name, chunks, make in candidates:
        entry: dict[str, Any] = {"schedule": name}
        try:
            schedule = make()
            entry["predicted"] = schedules.simulate(schedule).peak_in_flight
        except NotImplementedError as error:
            entry["note"] = f"not implemented yet: {cli.blocked_by(error)}"
        except (Missing, ValueError, TypeError) as error:
            entry["note"] = f"your schedule failed: {one_line(error)}"
        if "predicted" in entry:
            stages = [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(num_stages * chunks)]
            try:
                with StageWorkers(["cpu"] * num_stages, timeout=20.0) as workers:
                    report = run_schedule(workers, stages, schedule, inputs, targets, F.mse_loss)
                entry["measured"] = list(report.peak_live)
            except Exception as error:  # the simulator accepted it; say why the executor did not run it
                entry["measured_note"] = f"not run by the executor: {type(error).__name__}: {one_line(error)}"
        entries.append(entry)
    notes = [f"{entry['schedule']}: {entry['note']}" for entry in entries if "note" in entry]
    return {"num_stages": num_stages, "num_microbatches": num_microbatches, "num_chunks": num_chunks, "notes": notes,
            "unit": "microbatches whose activations a device holds (a chunk of a v-chunk device counts 1/v)",
            "schedules": entries}


def plot_activations(data: dict, plt) -> Any:
    entries = data["schedules"]
    figure, axes = plt.subplots(1, len(entries), figsize=(4.2 * len(entries), 4.2), sharey=True, squeeze=False)
    devices = list(range(data["num_stages"]))
    for axis, entry in zip(axes[0], entries):
        series = [("simulator (predicted)", entry.get("predicted")), ("executor (measured)", entry.get("measured"))]
        drawn = [(label, values) for label, values in series if values]
        for index, (label, values) in enumerate(drawn):
            offset = (index - (len(drawn) - 1) / 2) * 0.36
            axis.bar([d + offset for d in devices], values, width=0.36, label=label)
        notes = [entry[key] for key in ("note", "measured_note") if key in entry]
        axis.set_xlabel("\n".join(["device", *(wrap(note, 60) for note in notes)]), fontsize=8 if notes else None)
        axis.set(title=f"{entry['schedule']}, K = {data['num_stages']}, M = {data['num_microbatches']}",
                 xticks=devices)
        axis.grid(alpha=0.3, axis="y")
        if drawn:
            axis.legend(fontsize=8, loc="upper right")
    axes[0][0].set_ylabel("peak in-flight microbatches (activations held)")
    axes[0][0].set_ylim(0, 1.4 * data["num_microbatches"])  # room for the legends above the bars
    return figure


# ---------------------------------------------------------------- Problem 4.3: recomputation


class CountedLayer(nn.Module):
    """``tanh(linear(x))`` that counts its forward calls."""

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tanh(self.linear(x))


def run_recomputation(settings: Settings) -> dict:
    from minitorch.pipeline import run_layers

    checkpoint_sequential = student("pipeline", "checkpoint_sequential", "4.3")
    num_layers, width, rows = (9, 64, 64) if settings.quick else (16, 256, 512)
    repeats = 2 if settings.quick else 5
    torch.manual_seed(0)
    layers = [CountedLayer(width) for _ in range(num_layers)]
    parameters = [p for layer in layers for p in layer.parameters()]
    x = torch.randn(rows, width, requires_grad=True)
    activation_bytes = x.numel() * x.element_size()

    def step(segments: int | None) -> SavedBytes:
        for layer in layers:
            layer.calls = 0
        with SavedBytes(exclude=parameters) as saved:
            out = run_layers(layers, x) if segments is None else checkpoint_sequential(layers, x, segments)
            out.sum().backward()
        return saved

    with single_threaded():
        plain = step(None)
        plain_seconds = median_seconds(lambda: step(None), repeats)
        results = []
        candidates = [1, 2, 3, 4, num_layers] if settings.quick else [1, 2, 3, 4, 5, 6, 8, num_layers]
        for segments in candidates:
            saved = step(segments)
            forwards = [layer.calls for layer in layers]
            seconds = median_seconds(functools.partial(step, segments), repeats)
            results.append({"segments": segments, "peak_saved_bytes": saved.peak,
                            "peak_in_activations": saved.peak / activation_bytes,
                            "predicted_in_activations": segments + math.ceil(num_layers / segments),
                            "forwards_per_layer": statistics.mean(forwards), "seconds": seconds,
                            "time_over_plain": seconds / plain_seconds})
    return {"num_layers": num_layers, "width": width, "rows": rows, "activation_bytes": activation_bytes,
            "plain": {"peak_saved_bytes": plain.peak, "peak_in_activations": plain.peak / activation_bytes,
                      "seconds": plain_seconds},
            "results": results}


def plot_recomputation(data: dict, plt) -> Any:
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.3))
    results = data["results"]
    segments = [r["segments"] for r in results]
    n = data["num_layers"]
    left.plot(segments, [r["peak_in_activations"] for r in results], "o-", label="measured (your checkpoint_sequential)")
    left.plot(segments, [r["predicted_in_activations"] for r in results], "k--", label=f"segments + ceil({n}/segments)")
    left.axhline(data["plain"]["peak_in_activations"], color="grey", linestyle=":", label="no recomputation (measured)")
    left.axvline(math.sqrt(n), color="grey", linewidth=0.8)
    left.set(title=f"Activations saved for backward, peak ({n} layers)", xlabel="segments (grey line: sqrt(n))",
             ylabel=f"peak saved, in activations of {data['rows']}x{data['width']} float32")
    right.plot(segments, [r["time_over_plain"] for r in results], "o-", label="forward + backward time / without recomputation")
    right.plot(segments, [r["forwards_per_layer"] for r in results], "s-", label="forward calls per layer")
    right.axhline(4 / 3, color="k", linestyle="--", label="4/3: one more forward (F : B = 1 : 2)")
    right.set(title="The price: recomputed forwards", xlabel="segments", ylabel="ratio / calls")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    return figure


# ---------------------------------------------------------------- Problem 3: tensor-parallel bytes

_COLLECTIVES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
                "_all_gather_base": "all_gather", "reduce_scatter": "reduce_scatter",
                "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
                "all_to_all": "all_to_all", "all_to_all_single": "all_to_all", "broadcast": "broadcast",
                "send": "send", "recv": "recv", "isend": "send", "irecv": "recv"}
# Bytes one rank sends, per element of the largest tensor of the call, ring algorithms (tp_comm).
_RING_SHARE = {"all_reduce": lambda t: 2 * (t - 1) / t, "all_gather": lambda t: (t - 1) / t,
               "reduce_scatter": lambda t: (t - 1) / t, "all_to_all": lambda t: (t - 1) / t}


def _record_collectives(log: list[dict], phase: list[str]) -> None:
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


def _tp_rank(rank: int, world_size: int, sizes: dict, sequence_parallel: bool) -> dict:
    """One rank: the student's ParallelTransformerLayer forward and backward, recorded."""
    layer_class = student("tensor_parallel", "ParallelTransformerLayer", "3.3")
    log: list[dict] = []
    phase = ["setup"]
    _record_collectives(log, phase)
    s, b, h = sizes["s"], sizes["b"], sizes["h"]
    layer = layer_class(h, sizes["heads"], sizes["ffn"], sequence_parallel=sequence_parallel, seed=0,
                        dtype=torch.float32)
    x = torch.randn(s, b, h, generator=torch.Generator().manual_seed(1))
    if sequence_parallel:
        x = x.chunk(world_size)[rank]
    x = x.clone().requires_grad_()
    phase[0] = "forward"
    with SavedBytes(exclude=list(layer.parameters())) as saved:
        out = layer(x)
        stored = saved.live
    phase[0] = "backward"
    out.sum().backward()
    return {"collectives": log, "saved_activation_bytes": stored}


def run_tp_bytes(settings: Settings) -> dict:
    from minitorch import distributed, tp_comm

    t = 2
    sizes = {"s": 16, "b": 2, "h": 64, "heads": 4, "ffn": 256} if not settings.quick else \
        {"s": 8, "b": 2, "h": 16, "heads": 4, "ffn": 64}
    student("tensor_parallel", "ParallelTransformerLayer", "3.3")  # missing: say so before launching
    variants = []
    for sequence_parallel in (False, True):
        ranks = distributed.launch(_tp_rank, t, sizes, sequence_parallel, backend="gloo", timeout=60.0)
        log = ranks[0]["collectives"]
        recorded = {phase: sum(_RING_SHARE.get(c["kind"], lambda _t: 1.0)(t) * c["numel"] * c["element_bytes"]
                               for c in log if c["phase"] == phase) for phase in ("forward", "backward")}
        formula = tp_comm.layer_comm(sizes["b"], sizes["s"], sizes["h"], t, bytes_per_element=4,
                                     sequence_parallel=sequence_parallel)
        formula_by_phase = {phase: sum(
            (tp_comm.all_reduce_bytes if kind == "all_reduce" else tp_comm.all_gather_bytes)(numel, t, 4)
            for p, kind, numel in formula.collectives if p == phase) for phase in ("forward", "backward")}
        variants.append({"sequence_parallel": sequence_parallel, "recorded_bytes": recorded,
                         "formula_bytes": formula_by_phase, "collectives_rank0": log,
                         "saved_activation_bytes_per_rank": [r["saved_activation_bytes"] for r in ranks]})
    return {"t": t, **sizes, "dtype": "float32", "variants": variants,
            "formula": "tp_comm.layer_comm: 2 all-reduces of [s, b, h] forward, 2 backward (ring: 2(t-1)/t of the "
                       "bytes); sequence parallel: each a reduce-scatter + all-gather, (t-1)/t each"}


def plot_tp_bytes(data: dict, plt) -> Any:
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.3))
    labels, recorded, formula = [], [], []
    for variant in data["variants"]:
        name = "TP + SP" if variant["sequence_parallel"] else "TP"
        for phase in ("forward", "backward"):
            labels.append(f"{name}\n{phase}")
            recorded.append(variant["recorded_bytes"][phase] / 1e3)
            formula.append(variant["formula_bytes"][phase] / 1e3)
    positions = range(len(labels))
    left.bar([p - 0.2 for p in positions], recorded, width=0.4, label="recorded (your layer, gloo)")
    left.bar([p + 0.2 for p in positions], formula, width=0.4, label="formula (tp_comm.layer_comm)")
    left.set_xticks(list(positions), labels, fontsize=8)
    left.set_ylim(0, 1.3 * max(recorded + formula + [1e-3]))  # room for the legend
    left.set(title=f"Bytes one rank sends per layer (SP: sequence parallel)\nt = {data['t']}, s = {data['s']}, "
                   f"b = {data['b']}, h = {data['h']}, float32",
             ylabel="kB per rank (ring all-reduce / all-gather / reduce-scatter)")
    names = ["TP + sequence parallel" if v["sequence_parallel"] else "TP" for v in data["variants"]]
    saved = [statistics.mean(v["saved_activation_bytes_per_rank"]) / 1e3 for v in data["variants"]]
    bars = right.bar(names, saved, color=["tab:blue", "tab:orange"])
    right.bar_label(bars, fmt="%.1f kB", fontsize=8)
    right.set(title="Activations one rank keeps for backward (measured)", ylabel="kB per rank (float32)")
    for axis in (left, right):
        axis.grid(alpha=0.3, axis="y")
    left.legend(fontsize=8)
    return figure


# ---------------------------------------------------------------- Problem 5: the plan


def plan_cases() -> list[dict]:
    """The write-up's cases: the 1T model at t = 4, 8, 16 (Q7); the anchor on 8 and on 64 GPUs
    with every t inside a node (Q8, Q9), as ``python -m minitorch.cost_model`` prints them."""
    from minitorch import cost_model

    anchor = cost_model.ANCHOR

    layer_splits = [p for p in range(1, anchor.layers + 1) if anchor.layers % p == 0]
    return [
        {"question": "Q7", "model": cost_model.MEGATRON_1T, "cluster": cost_model.Cluster(gpus=3072), "batch": 3072,
         "plans": [(t, p) for t in (4, 8, 16) for p in (16, 32, 64, 128)]},
        *({"question": "Q8, Q9", "model": anchor, "cluster": cost_model.anchor_cluster(gpus), "batch": 64,
           "plans": [(t, p) for t in (1, 2, 4, 8) for p in layer_splits]} for gpus in (8, 64)),
    ]


def run_plan(settings: Settings) -> dict:
    estimate = student("pipeline", "estimate", "5")
    best_plan = student("pipeline", "best_plan", "5")
    cases = []
    for case in plan_cases():
        model, cluster, batch = case["model"], case["cluster"], case["batch"]
        plans = []
        for t, p in case["plans"]:
            try:
                plans.append(plan_row(estimate(model, cluster, batch, t, p)))
            except ValueError:  # t * p does not divide the GPUs, p the layers, ...: not a plan
                continue
        best = best_plan(model, cluster, batch)
        cases.append({"question": case["question"], "model": vars(model), "cluster": vars(cluster), "batch": batch,
                      "plans": plans, "best": None if best is None else plan_row(best)})
    return {"microbatch": 1, "cases": cases}


def plan_row(found) -> dict:
    """The plain numbers of an Estimate (its fields and properties)."""
    return {"t": found.t, "p": found.p, "d": found.d, "microbatches": found.microbatches,
            "compute_s": found.compute_s, "bubble_s": found.bubble_s, "tensor_parallel_s": found.tensor_parallel_s,
            "pipeline_s": found.pipeline_s, "data_parallel_s": found.data_parallel_s, "step_s": found.step_s,
            "memory_gb": found.memory_bytes / 1e9, "limit_gb": found.memory_limit / 1e9, "fits": bool(found.fits)}


_OVERHEADS = (("bubble_s", "bubble"), ("tensor_parallel_s", "TP comm"), ("pipeline_s", "PP comm"),
              ("data_parallel_s", "DP comm"))


def plot_plan(data: dict, plt) -> Any:
    """Per plan, the time beyond compute (compute is the same for every plan of a case)."""
    cases = data["cases"]
    tallest = max(len(case["plans"]) for case in cases)
    figure, axes = plt.subplots(1, len(cases), figsize=(6.2 * len(cases), 1.8 + 0.3 * tallest), squeeze=False)
    for axis, case in zip(axes[0], cases):
        plot_case(axis, case)
    figure.suptitle("Your estimate of every (t, p) it accepts: time beyond compute, stacked; "
                    "hatched: does not fit in memory", fontsize=10)
    return figure


def plot_case(axis, case: dict) -> None:
    plans = sorted(case["plans"], key=lambda row: (not row["fits"], row["step_s"]))
    best, per_node = case["best"], case["cluster"]["gpus_per_node"]
    names = []
    for row in plans:
        mark = "  <- best_plan" if best and (row["t"], row["p"]) == (best["t"], best["p"]) else ""
        fit = f"{row['memory_gb']:.0f} GB" + ("" if row["fits"] else ", does not fit")
        names.append(f"t={row['t']} p={row['p']} d={row['d']} ({fit}){mark}")
    left = [0.0] * len(plans)
    for (key, label), colour in zip(_OVERHEADS, ("tab:orange", "tab:red", "tab:purple", "tab:green")):
        values = [row[key] for row in plans]
        bars = axis.barh(range(len(plans)), values, left=left, color=colour, label=label)
        for bar, row in zip(bars, plans):
            if not row["fits"]:
                bar.set_alpha(0.35)
                bar.set_hatch("//")
        left = [a + b for a, b in zip(left, values)]
    # A plan with t across nodes can be many times slower: clipped, its step time written.
    inside = [total for total, row in zip(left, plans) if row["t"] <= per_node] or left or [1.0]
    limit = 1.3 * max(max(inside), 1e-9)
    axis.set_xlim(0, limit)
    for index, (total, row) in enumerate(zip(left, plans)):
        axis.text(min(total, limit * 0.98), index, f" step {row['step_s']:.2f} s", va="center",
                  ha="left" if total < limit * 0.75 else "right", fontsize=7)
    axis.set_yticks(range(len(plans)), names, fontsize=7)
    axis.invert_yaxis()
    compute = plans[0]["compute_s"] if plans else 0.0
    cluster = case["cluster"]
    axis.set_title(f"{case['question']}: {case['model']['name']}, {cluster['gpus']} GPUs ({per_node} per node), "
                   f"batch {case['batch']}" + ("" if best else "\nyour best_plan: nothing fits"), fontsize=9)
    axis.set_xlabel(f"estimated time beyond compute (s); compute: {compute:.2f} s in every plan", fontsize=8)
    axis.grid(alpha=0.3, axis="x")
    axis.legend(fontsize=7, loc="lower right")


# ---------------------------------------------------------------- the run

MEASUREMENTS = (
    Measurement("pipe_speedup", "Pipe forward speedup against M", "Problem 2.2", run_pipe_speedup, plot_pipe_speedup),
    Measurement("balance", "balanced against even split", "Problem 2.4", run_balance, plot_balance),
    Measurement("activations", "peak activations of GPipe, 1F1B, interleaved", "Problems 4.1-4.2",
                run_activations, plot_activations),
    Measurement("recomputation", "recomputation: memory and time against segments", "Problem 4.3",
                run_recomputation, plot_recomputation),
    Measurement("tp_bytes", "tensor-parallel bytes per layer, t = 2 on gloo", "Problem 3", run_tp_bytes, plot_tp_bytes),
    Measurement("plan", "your (t, p, d) plan against the alternatives", "Problem 5", run_plan, plot_plan),
)


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def why_skipped(error: BaseException) -> str:
    """One line for a measurement that could not run, in the student's terms."""
    if isinstance(error, NotImplementedError):
        stub = cli.STUB_MESSAGE.search(str(error))
        what = f"Problem {stub[1]} {stub[2]}" if stub else f"NotImplementedError({one_line(error)!r}):"
        return f"skipped: {what} not implemented yet"
    if isinstance(error, Missing):
        return f"skipped: {error}"
    frames = traceback.extract_tb(error.__traceback__)
    where = next((f" (minitorch/{Path(f.filename).name}:{f.lineno})" for f in reversed(frames)
                  if Path(f.filename).name in ("pipeline.py", "tensor_parallel.py")), "")
    return f"failed: {type(error).__name__}: {one_line(error)}{where}"


def write_figure(measurement: Measurement, data: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    try:
        figure = measurement.plot(data, plt)
        figure.tight_layout()
        figure.savefig(out / f"{measurement.name}.png", dpi=110)
    finally:
        plt.close("all")


def plain(value: Any) -> Any:
    """What json cannot write (a tensor or numpy number from the student's code) as a number, else text."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return str(value)


def run_one(measurement: Measurement, settings: Settings, out: Path) -> dict:
    """Run one measurement and write its numbers and figure; say in one line how it went."""
    start = time.perf_counter()
    print(f"{measurement.describe()} ...", end=" ", flush=True)
    numbers, figure = out / f"{measurement.name}.json", out / f"{measurement.name}.png"
    for old in (numbers, figure):  # never leave an older run's figure beside this run's status
        old.unlink(missing_ok=True)
    try:
        data = {"measurement": measurement.describe(), "quick": settings.quick, **measurement.run(settings)}
        numbers.write_text(json.dumps(data, indent=1, default=plain) + "\n")
        write_figure(measurement, data, out)
    except Exception as error:  # the student's code, or numbers it gave that cannot be drawn: one line
        for partial in (numbers, figure):
            partial.unlink(missing_ok=True)
        line = why_skipped(error)
        print(line, flush=True)
        return {"name": measurement.name, "status": line.split(":")[0], "line": line}
    seconds = time.perf_counter() - start
    print(f"done in {seconds:.1f} s: {figure}, {numbers}", flush=True)
    for note in data.get("notes", []):  # parts of it that could not run
        print(f"    {note}", flush=True)
    return {"name": measurement.name, "status": "done", "seconds": seconds, "files": [str(figure), str(numbers)]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("measure", __doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the folder to write (default {DEFAULT_OUT})")
    parser.add_argument("--quick", action="store_true", default=os.environ.get(QUICK_VARIABLE, "") not in ("", "0"),
                        help=f"tiny sizes, a few seconds each (also {QUICK_VARIABLE}=1); not for answering")
    parser.add_argument("--only", nargs="+", choices=[m.name for m in MEASUREMENTS], metavar="NAME",
                        help="run only these measurements: " + ", ".join(m.name for m in MEASUREMENTS))
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("python -m minitorch.measure needs matplotlib: run `make report` (it installs it)", file=sys.stderr)
        return 1
    settings = Settings(quick=args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = [m for m in MEASUREMENTS if not args.only or m.name in args.only]
    start = time.perf_counter()
    print(f"measuring your code on {os.cpu_count()} CPUs{' (quick: not for answering)' if settings.quick else ''}; "
          f"writing {args.out}/")
    statuses = [run_one(measurement, settings, args.out) for measurement in chosen]
    summary = {"quick": settings.quick, "seconds": time.perf_counter() - start, "measurements": statuses}
    (args.out / "status.json").write_text(json.dumps(summary, indent=1) + "\n")
    done = sum(status["status"] == "done" for status in statuses)
    print(f"{done} of {len(statuses)} measurements written in {summary['seconds']:.0f} s; "
          "answer the questions in REPORT.md beside the figures")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run(main, "python -m minitorch.measure"))
