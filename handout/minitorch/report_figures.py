"""The figures of ``make report`` (provided): ``plot_<name>(data, plt)`` draws the figure of
the measurement ``<name>`` of :mod:`minitorch.measure` from the numbers it wrote to
``report/<name>.json`` (``plt`` is ``matplotlib.pyplot``; this module imports no matplotlib).

Every figure follows the same rules, so that it says what it shows:

- every series drawn has a legend entry, and the legends sit outside the axes: measured
  numbers land anywhere, and a legend inside the axes would cover some of them;
- the axes fit their data (nothing runs off an axis); a bound is labelled as a bound;
- a time is the median of repeats, drawn with bars from the lowest to the highest;
- a figure of timings says in its title how busy the machine was while they ran.
"""
from __future__ import annotations

import math
import statistics
import textwrap
from typing import Any

# A single-threaded run that gets less of a core than this shared it with other programs.
BUSY_CPU_SHARE = 0.9
DASHED, DOTTED = {"color": "black", "linestyle": "--"}, {"color": "black", "linestyle": ":"}


def new_figure(plt, panels: int, width: float, height: float) -> tuple[Any, list]:
    """A row of ``panels`` axes laid out by matplotlib (legends and titles get their room)."""
    figure, axes = plt.subplots(1, panels, figsize=(width, height), layout="constrained", squeeze=False)
    return figure, list(axes[0])


def legend_below(figure, axes: list, columns: int, extra: dict[str, Any] | None = None) -> None:
    """One legend for the whole figure, under the axes: every labelled series once, then
    ``extra`` (label -> handle: what a style means, such as a hatching)."""
    entries: dict[str, Any] = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    entries.update(extra or {})
    figure.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=columns, fontsize=8)


def machine_line(data: dict) -> str:
    """How busy the machine was while the timings ran, and what that means for them."""
    machine, share = data.get("machine", {}), data.get("single_thread_cpu_share")
    load = machine.get("load_average")
    parts = [f"{machine.get('cpus', '?')} CPUs"]
    if load is not None:
        parts.append(f"load average {load:.1f} (1 min)")
    if share is None or not math.isfinite(share):
        return "Machine: " + ", ".join(parts)
    parts.append(f"a single-threaded run got {share:.2f} of a core (about 1.0 when nothing else runs)")
    verdict = ("BUSY: other programs took the cores, so these times measure them too; close them and rerun"
               if share < BUSY_CPU_SHARE else "quiet enough to read the times")
    return wrap("Machine: " + ", ".join(parts) + f": {verdict}", 150)


def wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))


def error_bars(rows: list[dict], key: str, low: str, high: str) -> list[list[float]]:
    """matplotlib's ``yerr`` for a median ``key`` with its lowest and highest repeat."""
    return [[row[key] - row[low] for row in rows], [row[high] - row[key] for row in rows]]


def log2_axis(axis, counts: list[int]) -> None:
    axis.set_xscale("log", base=2)
    axis.set_xticks(counts, [str(count) for count in counts])
    axis.minorticks_off()


# ---------------------------------------------------------------- Problem 2.2


def plot_pipe_speedup(data: dict, plt) -> Any:
    figure, (left, right) = new_figure(plt, 2, 11, 5.2)
    results = data["results"]
    counts = sorted({row["M"] for row in results})
    left.plot(counts, [2 * m / (m + 1) for m in counts], **DASHED, label="2M/(M+1): the ideal speedup for K = 2 (left)")
    right.plot(counts, [1 / (m + 1) for m in counts], **DOTTED, label="(K-1)/(M+K-1): the bubble for K = 2 (right)")
    for kind, marker, colour in (("sleep", "o-", "tab:blue"), ("compute", "s-", "tab:orange")):
        rows = [row for row in results if row["stages"] == kind]
        label = ("stages that sleep" if kind == "sleep" else
                 f"stages that compute (width {data['width']}, one thread each)")
        left.errorbar([r["M"] for r in rows], [r["speedup"] for r in rows], fmt=marker, color=colour, capsize=3,
                      label=label, yerr=error_bars(rows, "speedup", "speedup_min", "speedup_max"))
        bubble = [{"b": 1 - r["speedup"] / 2, "low": 1 - r["speedup_max"] / 2, "high": 1 - r["speedup_min"] / 2}
                  for r in rows]
        right.errorbar([r["M"] for r in rows], [b["b"] for b in bubble], fmt=marker, color=colour, capsize=3,
                       label=label, yerr=error_bars(bubble, "b", "low", "high"))
    left.set(title="Your Pipe's speedup, forward only, K = 2 stages", xlabel="microbatches M",
             ylabel="speedup over sequential (x)")
    right.set(title="Bubble: idle share of the 2 stages' time", xlabel="microbatches M",
              ylabel="1 - speedup/K (if nothing else slows the stages)")
    for axis in (left, right):
        log2_axis(axis, counts)
        axis.grid(alpha=0.3)
    figure.suptitle(f"Points: median of {data['repeats']} paired runs, bars: lowest to highest.\n"
                    + machine_line(data), fontsize=9)
    legend_below(figure, [left, right], columns=2)
    return figure


# ---------------------------------------------------------------- Problem 2.4


def plot_balance(data: dict, plt) -> Any:
    figure, (left, right) = new_figure(plt, 2, 11, 5.0)
    num_stages = data["num_stages"]
    positions = range(num_stages)
    colours = {"even": "tab:blue", "balanced": "tab:orange"}
    for offset, (name, split) in zip((-0.2, 0.2), data["splits"].items()):
        bars = left.bar([p + offset for p in positions], split["stage_costs"], width=0.4, color=colours[name],
                        label=f"{name} split {split['sizes']}: slowest stage {split['slowest']:g}")
        left.bar_label(bars, labels=[str(size) for size in split["sizes"]], fontsize=7, padding=1)
    tallest = max(max(split["stage_costs"]) for split in data["splits"].values())
    left.set_ylim(0, 1.12 * tallest)  # room for the bar labels
    left.set(title=f"{len(data['costs']) - 1} layers of cost 1 and an output layer of {data['output_layer_cost']:g}",
             xlabel="stage (bar label: layers in it)", ylabel="stage time per microbatch (layer units)")
    left.set_xticks(list(positions))
    for name, split in data["splits"].items():
        rows = split["by_M"]
        right.plot([r["M"] for r in rows], [r["bubble"] for r in rows], "o-", color=colours[name],
                   label=f"{name} split: bubble, simulated")
    rows = data["uniform_bubble"]
    right.plot([r["M"] for r in rows], [r["bubble"] for r in rows], **DASHED,
               label="(K-1)/(M+K-1): the bubble of equal stages")
    right.set(title=f"Bubble of the forward, K = {num_stages}", xlabel="microbatches M",
              ylabel="idle share of total stage time")
    log2_axis(right, [r["M"] for r in rows])
    for axis in (left, right):
        axis.grid(alpha=0.3)
    legend_below(figure, [left, right], columns=2)
    return figure


# ---------------------------------------------------------------- Problems 4.1-4.2


_SCHEDULE_COLOURS = ("tab:blue", "tab:orange", "tab:green")


def plot_activations(data: dict, plt) -> Any:
    """Left: each device's peak at one M; right: the largest peak of any device against M."""
    figure, (left, right) = new_figure(plt, 2, 11.5, 5.6)
    entries, shown_m = data["schedules"], data["per_device_M"]
    devices = list(range(data["num_stages"]))
    drawn = [entry for entry in entries if entry["by_M"]]
    width = 0.8 / max(len(drawn), 1)
    for index, (entry, colour) in enumerate(zip(entries, _SCHEDULE_COLOURS)):
        by_m = [row for row in entry["by_M"] if "predicted" in row]
        if not by_m:
            continue
        offset = (index - (len(drawn) - 1) / 2) * width
        at_m = next((row for row in by_m if row["M"] == shown_m), None)
        if at_m:
            left.bar([d + offset for d in devices], at_m["predicted"], width=width, color=colour, alpha=0.6,
                     label=f"{entry['schedule']}: simulated")
        right.plot([row["M"] for row in by_m], [max(row["predicted"]) for row in by_m], "-", color=colour,
                   alpha=0.6, linewidth=4, label=f"{entry['schedule']}: simulated")
        executed = [row for row in by_m if "measured" in row]
        if at_m and "measured" in at_m:
            left.plot([d + offset for d in devices], at_m["measured"], "o", color="black", markersize=5,
                      label="executed (the executor, measured)")
        right.plot([row["M"] for row in executed], [max(row["measured"]) for row in executed], "o",
                   color="black", markersize=5, label="executed (the executor, measured)")
    left.set(title=f"Each device at M = {shown_m}, K = {data['num_stages']}", xticks=devices,
             ylabel="peak microbatches whose activations it holds")
    notes = data.get("notes", [])
    left.set_xlabel("\n".join(["device", *(wrap(note, 70) for note in notes)]), fontsize=8 if notes else None)
    counts = sorted({row["M"] for entry in entries for row in entry["by_M"]})
    right.set(title="The most any device holds, against M", xlabel="microbatches M",
              ylabel="peak microbatches held (largest over devices)")
    if counts:
        log2_axis(right, counts)
    for axis in (left, right):
        axis.grid(alpha=0.3, axis="y")
        axis.set_ylim(bottom=0)
    legend_below(figure, [right, left], columns=2)  # the right's lines show each schedule's colour
    return figure


# ---------------------------------------------------------------- Problem 4.3


def plot_recomputation(data: dict, plt) -> Any:
    figure, (left, right) = new_figure(plt, 2, 11, 5.6)
    results = data["results"]
    segments = [r["segments"] for r in results]
    n = data["num_layers"]
    left.plot(segments, [r["peak_in_activations"] for r in results], "o-", color="tab:blue",
              label="activations saved, measured (your checkpoint_sequential)")
    left.plot(segments, [r["upper_bound_in_activations"] for r in results], **DASHED,
              label=f"upper bound: segments + ceil({n}/segments) (a correct solution may stay below it)")
    left.axhline(data["plain"]["peak_in_activations"], color="grey", linestyle=":",
                 label="no recomputation (measured)")
    left.axvline(math.sqrt(n), color="grey", linewidth=0.8, label=f"sqrt(n) = {math.sqrt(n):.3g} segments")
    left.set(title=f"Activations saved for backward, peak ({n} layers)", xlabel="segments",
             ylabel=f"peak saved, in activations of {data['rows']}x{data['width']} float32")
    right.errorbar(segments, [r["time_over_plain"] for r in results], fmt="o-", color="tab:green", capsize=3,
                   yerr=error_bars(results, "time_over_plain", "time_over_plain_min", "time_over_plain_max"),
                   label=f"time / time without recomputation (median of {data['rounds']} rounds, "
                         "bars: lowest to highest)")
    right.plot(segments, [r["forwards_per_layer"] for r in results], "s-", color="tab:orange",
               label="forward calls per layer (counted)")
    right.axhline(4 / 3, color="black", linestyle="-.", label="4/3: the time predicted (one more forward, F : B = 1 : 2)")
    right.set(title="The price: recomputed forwards", xlabel="segments", ylabel="ratio / calls")
    for axis in (left, right):
        axis.grid(alpha=0.3)
    figure.suptitle(machine_line(data), fontsize=9)
    legend_below(figure, [left, right], columns=2)
    return figure


# ---------------------------------------------------------------- Problem 3


def plot_tp_bytes(data: dict, plt) -> Any:
    figure, (left, right) = new_figure(plt, 2, 11, 5.0)
    labels, recorded, formula = [], [], []
    for variant in data["variants"]:
        name = "TP + SP" if variant["sequence_parallel"] else "TP"
        for phase in ("forward", "backward"):
            labels.append(f"{name}\n{phase}")
            recorded.append(variant["recorded_bytes"][phase] / 1e3)
            formula.append(variant["formula_bytes"][phase] / 1e3)
    positions = range(len(labels))
    left.bar([p - 0.2 for p in positions], recorded, width=0.4, color="tab:blue", label="recorded (your layer, gloo)")
    left.bar([p + 0.2 for p in positions], formula, width=0.4, color="tab:orange", label="formula (tp_comm.layer_comm)")
    left.set_xticks(list(positions), labels, fontsize=8)
    left.set(title=f"Bytes one rank sends per layer (SP: sequence parallel)\nt = {data['t']}, s = {data['s']}, "
                   f"b = {data['b']}, h = {data['h']}, float32",
             ylabel="kB per rank (ring all-reduce / all-gather / reduce-scatter)")
    names = ["TP + sequence parallel" if v["sequence_parallel"] else "TP" for v in data["variants"]]
    saved = [statistics.mean(v["saved_activation_bytes_per_rank"]) / 1e3 for v in data["variants"]]
    bars = right.bar(names, saved, color=["tab:blue", "tab:orange"])
    right.bar_label(bars, fmt="%.1f kB", fontsize=8)
    right.set_ylim(0, 1.12 * max(saved + [1e-3]))  # room for the bar labels
    right.set(title="Activations one rank keeps for backward (measured)", ylabel="kB per rank (float32)")
    for axis in (left, right):
        axis.grid(alpha=0.3, axis="y")
    legend_below(figure, [left], columns=2)
    return figure


# ---------------------------------------------------------------- Problem 5


_OVERHEADS = (("bubble_s", "bubble", "tab:orange"), ("tensor_parallel_s", "TP comm", "tab:red"),
              ("pipeline_s", "PP comm", "tab:purple"), ("data_parallel_s", "DP comm", "tab:green"))


def plot_plan(data: dict, plt) -> Any:
    """Per plan, the time beyond compute (compute is the same for every plan of a case)."""
    cases = data["cases"]
    tallest = max((len(case["plans"]) for case in cases), default=1)
    figure, axes = new_figure(plt, len(cases), 6.4 * len(cases), 2.4 + 0.3 * tallest)
    for axis, case in zip(axes, cases):
        plot_case(axis, case)
    figure.suptitle("Your estimate of every (t, p) it accepts: time beyond compute, stacked", fontsize=10)
    hatched = {}
    if any(not row["fits"] for case in cases for row in case["plans"]):
        hatched["hatched: does not fit in memory"] = plt.Rectangle((0, 0), 1, 1, facecolor="white",
                                                                   edgecolor="grey", hatch="//")
    legend_below(figure, axes, columns=5, extra=hatched)
    return figure


def plot_case(axis, case: dict) -> None:
    plans = sorted(case["plans"], key=lambda row: (not row["fits"], row["step_s"]))
    best, per_node = case["best"], case["cluster"]["gpus_per_node"]
    names = []
    for row in plans:
        mark = "  <- best_plan" if best and (row["t"], row["p"]) == (best["t"], best["p"]) else ""
        fit = f"{row['memory_gb']:.0f} GB" + ("" if row["fits"] else ", does not fit")
        names.append(f"t={row['t']} p={row['p']} d={row['d']}: step {row['step_s']:.2f} s ({fit}){mark}")
    left = [0.0] * len(plans)
    for key, label, colour in _OVERHEADS:
        values = [row[key] for row in plans]
        bars = axis.barh(range(len(plans)), values, left=left, color=colour, label=label)
        for bar, row in zip(bars, plans):
            if not row["fits"]:
                bar.set_alpha(0.35)
                bar.set_hatch("//")
        left = [a + b for a, b in zip(left, values)]
    axis.set_xlim(0, 1.05 * max(left + [1e-9]))  # every plan's bar, however long
    axis.set_yticks(range(len(plans)), names, fontsize=7)
    axis.invert_yaxis()
    compute = plans[0]["compute_s"] if plans else 0.0
    cluster = case["cluster"]
    axis.set_title(f"{case['question']}: {case['model']['name']}, {cluster['gpus']} GPUs ({per_node} per node), "
                   f"batch {case['batch']}" + ("" if best else "\nyour best_plan: nothing fits"), fontsize=9)
    axis.set_xlabel(f"estimated time beyond compute (s); compute: {compute:.2f} s in every plan", fontsize=8)
    axis.grid(alpha=0.3, axis="x")
