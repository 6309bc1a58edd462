"""``make report``: measure what you built, on this computer's CPU (provided).

Runs YOUR code from ``minitorch/pipeline.py`` and ``minitorch/tensor_parallel.py`` and writes,
for each measurement, a figure (PNG) and its raw numbers (JSON) into ``report/``; REPORT.md
asks the written questions beside those figures (Q1-Q9)::

    pipe_speedup      Problem 2.2  your Pipe's forward speedup against M, stages that sleep
                                   and stages that compute, beside 2M/(M+1) and the bubble  (Q1, Q3)
    balance           Problem 2.4  your balanced split against the even split, simulated      (Q2)
    activations       Problems 4.1, 4.2  peak activations per device of GPipe, your 1F1B and
                                   your interleaved schedule against M: simulated and executed (Q4)
    recomputation     Problem 4.3  your checkpoint_sequential: stored activations (beside an
                                   upper bound), time and recomputed forwards against the
                                   number of segments                                        (Q5)
    tp_bytes          Problem 3    bytes your tensor-parallel layer moves per rank (gloo,
                                   t = 2), recorded against the formula; with and without
                                   sequence parallelism, and the activations each rank keeps (Q6)
    plan              Problem 5    your estimate of every plan and your best_plan: the 1T model
                                   at t = 4, 8, 16; the lecture's anchor on 8 and 64 GPUs      (Q7-Q9)

One progress line per measurement. A measurement whose code is still a stub (or fails) is one
line saying so; the others still run and the command exits 0. ``--quick`` (or the environment
variable MINITORCH_REPORT_QUICK=1) shrinks every measurement to a few seconds: its numbers are
for checking that the report runs, not for answering the questions. The full run takes about
1-2 minutes on a 2-core laptop. Times are wall-clock seconds on this machine's CPU, the median
of repeats drawn with their spread; they differ from run to run. Every JSON records the CPUs
and the load average, and the figures of timings say in their title what share of a core a
single-threaded run got: well below 1.0, other programs took the cores (close them, rerun).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from minitorch import cli
from minitorch import report_figures as figures
from minitorch import report_probes as probes

QUICK_VARIABLE = "MINITORCH_REPORT_QUICK"
DEFAULT_OUT = Path("report")
FIGURE_DPI = 110


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
    repeats = 3 if settings.quick else 5
    torch.manual_seed(0)
    kinds: dict[str, list[nn.Module]] = {
        "sleep": [SleepStage(stage_seconds / rows) for _ in range(2)],
        "compute": two_stages(width, 4),
    }
    inputs = torch.randn(rows, width)
    results = []
    sequential_cpu = probes.CpuShare()  # what the single-threaded sequential runs got of a core
    with probes.single_threaded(), torch.no_grad():
        for kind, stages in kinds.items():
            for num_microbatches in counts:
                outputs: dict[str, torch.Tensor] = {}
                with pipe_class(stages, ["cpu", "cpu"], split_size=-(-rows // num_microbatches)) as pipe:
                    def check():
                        torch.testing.assert_close(outputs["pipe"], outputs["sequential"])

                    def sequential():
                        outputs["sequential"] = stages[1](stages[0](inputs))

                    timing = time_paired(
                        sequential_cpu.timed(sequential) if kind == "compute" else sequential,
                        lambda: outputs.__setitem__("pipe", pipe(inputs)),
                        repeats=repeats, max_attempts=1 if settings.quick else 2, check=check)
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
            "intra_op_threads": 1, "repeats": repeats, "single_thread_cpu_share": sequential_cpu.share,
            "results": results}


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


# ---------------------------------------------------------------- Problems 4.1-4.2: activations


def run_activations(settings: Settings) -> dict:
    """Each schedule at every M of the sweep: the simulator's peaks and the executor's."""
    from minitorch import schedules

    num_stages, num_chunks, per_device_m = 4, 2, 8
    counts = (2, 4, 8) if settings.quick else (1, 2, 4, 8, 16, 32)
    candidates: list[tuple[str, int, Callable[[int], list]]] = [  # (name, chunks per device, schedule of M)
        ("GPipe", 1, lambda m: schedules.gpipe(num_stages, m)),
        ("1F1B (yours)", 1, lambda m: student("pipeline", "one_f_one_b", "4.1")(num_stages, m)),
        (f"interleaved v = {num_chunks} (yours)", num_chunks, lambda m: student(
            "pipeline", "interleaved_one_f_one_b", "4.2")(num_stages, m, num_chunks)),
    ]
    entries = []
    for name, chunks, make in candidates:
        # The interleaved schedule takes M in multiples of K (Problem 4.2).
        sweep = [m for m in counts if chunks == 1 or m % num_stages == 0]
        entries.append({"schedule": name, "chunks": chunks, **peaks_against_m(make, num_stages, chunks, sweep)})
    notes = [f"{entry['schedule']}: {note}" for entry in entries for note in entry["notes"]]
    return {"num_stages": num_stages, "num_chunks": num_chunks, "per_device_M": per_device_m, "notes": notes,
            "unit": "microbatches whose activations a device holds (a chunk of a v-chunk device counts 1/v)",
            "schedules": entries}


def peaks_against_m(make: Callable[[int], list], num_stages: int, chunks: int, sweep: list[int]) -> dict:
    """``{"by_M": [{"M", "predicted", "measured"}], "notes": [...]}``: stops at the first M whose
    schedule fails (one note), and records why the executor did not run one (another note)."""
    from minitorch import schedules
    from minitorch.executor import run_schedule
    from minitorch.runtime import StageWorkers

    width, rows_per_microbatch = 16, 4
    by_m: list[dict] = []
    notes: list[str] = []
    torch.manual_seed(0)
    for m in sweep:
        try:
            schedule = make(m)
            row: dict[str, Any] = {"M": m, "predicted": list(schedules.simulate(schedule).peak_in_flight)}
        except NotImplementedError as error:
            return {"by_M": by_m, "notes": [f"not implemented yet: {cli.blocked_by(error)}"]}
        except (Missing, ValueError, TypeError) as error:
            return {"by_M": by_m, "notes": [f"your schedule failed at M = {m}: {one_line(error)}"]}
        inputs, targets = torch.randn(rows_per_microbatch * m, width), torch.randn(rows_per_microbatch * m, width)
        stages = [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(num_stages * chunks)]
        try:
            with StageWorkers(["cpu"] * num_stages, timeout=20.0) as workers:
                row["measured"] = list(run_schedule(workers, stages, schedule, inputs, targets, F.mse_loss).peak_live)
        except Exception as error:  # the simulator accepted it; say why the executor did not run it
            if not notes:
                notes.append(f"not run by the executor at M = {m}: {type(error).__name__}: {one_line(error)}")
        by_m.append(row)
    return {"by_M": by_m, "notes": notes}


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
    rounds = 3 if settings.quick else 5
    torch.manual_seed(0)
    layers = [CountedLayer(width) for _ in range(num_layers)]
    parameters = [p for layer in layers for p in layer.parameters()]
    x = torch.randn(rows, width, requires_grad=True)
    activation_bytes = x.numel() * x.element_size()

    def step(segments: int | None) -> probes.SavedBytes:
        for layer in layers:
            layer.calls = 0
        with probes.SavedBytes(exclude=parameters) as saved:
            out = run_layers(layers, x) if segments is None else checkpoint_sequential(layers, x, segments)
            out.sum().backward()
        return saved

    candidates = [1, 2, 3, 4, num_layers] if settings.quick else [1, 2, 3, 4, 5, 6, 8, num_layers]
    plain_cpu = probes.CpuShare()
    with probes.single_threaded():
        plain = step(None)  # also the first, untimed run of each: a warm-up
        counted = {segments: (step(segments), [layer.calls for layer in layers]) for segments in candidates}
        runs: dict[int | None, Callable[[], Any]] = {None: plain_cpu.timed(lambda: step(None))}
        runs.update({segments: functools.partial(step, segments) for segments in candidates})
        seconds = probes.round_robin_seconds(runs, rounds)
    results = []
    for segments, (saved, forwards) in counted.items():
        ratios = [mine / base for mine, base in zip(seconds[segments], seconds[None])]
        results.append({"segments": segments, "peak_saved_bytes": saved.peak,
                        "peak_in_activations": saved.peak / activation_bytes,
                        "upper_bound_in_activations": segments + math.ceil(num_layers / segments),
                        "forwards_per_layer": statistics.mean(forwards), "seconds": statistics.median(seconds[segments]),
                        "time_over_plain": statistics.median(ratios),
                        "time_over_plain_min": min(ratios), "time_over_plain_max": max(ratios)})
    return {"num_layers": num_layers, "width": width, "rows": rows, "activation_bytes": activation_bytes,
            "rounds": rounds, "single_thread_cpu_share": plain_cpu.share,
            "plain": {"peak_saved_bytes": plain.peak, "peak_in_activations": plain.peak / activation_bytes,
                      "seconds": statistics.median(seconds[None])},
            "results": results}


# ---------------------------------------------------------------- Problem 3: tensor-parallel bytes

def _tp_rank(rank: int, world_size: int, sizes: dict, sequence_parallel: bool) -> dict:
    """One rank: the student's ParallelTransformerLayer forward and backward, recorded."""
    layer_class = student("tensor_parallel", "ParallelTransformerLayer", "3.3")
    log: list[dict] = []
    phase = ["setup"]
    probes.record_collectives(log, phase)
    s, b, h = sizes["s"], sizes["b"], sizes["h"]
    layer = layer_class(h, sizes["heads"], sizes["ffn"], sequence_parallel=sequence_parallel, seed=0,
                        dtype=torch.float32)
    x = torch.randn(s, b, h, generator=torch.Generator().manual_seed(1))
    if sequence_parallel:
        x = x.chunk(world_size)[rank]
    x = x.clone().requires_grad_()
    phase[0] = "forward"
    with probes.SavedBytes(exclude=list(layer.parameters())) as saved:
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
        recorded = {phase: sum(probes.RING_SHARE.get(c["kind"], lambda _t: 1.0)(t) * c["numel"] * c["element_bytes"]
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


# ---------------------------------------------------------------- the run

MEASUREMENTS = (
    Measurement("pipe_speedup", "Pipe forward speedup against M", "Problem 2.2",
                run_pipe_speedup, figures.plot_pipe_speedup),
    Measurement("balance", "balanced against even split", "Problem 2.4", run_balance, figures.plot_balance),
    Measurement("activations", "peak activations of GPipe, 1F1B, interleaved against M", "Problems 4.1-4.2",
                run_activations, figures.plot_activations),
    Measurement("recomputation", "recomputation: memory and time against segments", "Problem 4.3",
                run_recomputation, figures.plot_recomputation),
    Measurement("tp_bytes", "tensor-parallel bytes per layer, t = 2 on gloo", "Problem 3",
                run_tp_bytes, figures.plot_tp_bytes),
    Measurement("plan", "your (t, p, d) plan against the alternatives", "Problem 5", run_plan, figures.plot_plan),
)


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


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
        figure.savefig(out / f"{measurement.name}.png", dpi=FIGURE_DPI)
    finally:
        plt.close("all")


def plain(value: Any) -> Any:
    """What json cannot write (a tensor or numpy number from the student's code) as a number, else text."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return str(value)


def machine() -> dict:
    """The CPUs and how many programs wanted one (the 1-minute load average, where the system
    keeps one): a load above the CPU count means programs waited for a core."""
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has none
        load = None
    return {"cpus": os.cpu_count(), "load_average": load}


def run_one(measurement: Measurement, settings: Settings, out: Path) -> dict:
    """Run one measurement and write its numbers and figure; say in one line how it went."""
    start = time.perf_counter()
    print(f"{measurement.describe()} ...", end=" ", flush=True)
    numbers, figure = out / f"{measurement.name}.json", out / f"{measurement.name}.png"
    for old in (numbers, figure):  # never leave an older run's figure beside this run's status
        old.unlink(missing_ok=True)
    try:
        data = {"measurement": measurement.describe(), "quick": settings.quick, "machine": machine(),
                **measurement.run(settings)}
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
