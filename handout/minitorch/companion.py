"""Lecture companion: each section's tables and timelines, computed (provided).

``python -m minitorch.companion [SECTION ...]`` with SECTION among ``1 2 4 5 6 bubble all``: LECTURE
sections, not problem numbers (lecture section 4 is Problem 4's, lecture 5 is Problem 3's,
lecture 6 Problem 5's):

- ``1``  why model parallelism: GPT-3 cut by layers, the naive pipeline, communication intensity
- ``2``  GPipe: timeline, bubble vs M, throughput, and the micro-batch cost fit (timed ⏱)
- ``4``  1F1B, interleaving, transfers, activation recomputation (runs your Problem 4 code)
- ``5``  activation memory per layer with and without sequence parallelism (section 5.6)
- ``6``  the (t, p, d) cost model
- ``bubble``  the bubble lesson: two conventions, interleaved v = 4, ZB-H1, DualPipe

Everything is deterministic except the parts marked ⏱, which time this machine. The
``*_table`` / ``*_rows`` functions return the numbers (tests check them); ``SECTIONS``
maps a section to the function that prints it. Each section runs in well under 5 s.
"""
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from minitorch import cli, cost_model, schedules
from minitorch.schedules import simulate


def _pipeline():
    """The student's ``minitorch.pipeline``, imported only by the sections that run it
    (provided modules never import a student file at module level)."""
    from minitorch import pipeline

    return pipeline


def _draw(timeline: schedules.Timeline) -> str:
    return schedules.render_ascii(timeline, width=cli.terminal_width())


A100_PEAK = 312e12  # FLOP/s, 16-bit
GPT3 = dict(layers=96, hidden=12288, heads=96, seq_len=2048, vocab=50257)  # the real vocabulary


# ---------------------------------------------------------------- section 1


def gpt3_layer_split(stage_counts=(1, 2, 4, 8, 16, 32, 48, 96), gpu_bytes: float = 80e9) -> dict:
    """Parameters of GPT-3 per pipeline stage, for inference (2 B/param) and training (16 B/param).

    The first stage also holds the token and position embeddings, worth
    ``(V + s) h / (12 h^2 + 13 h)`` layers (the lecture's 0.35).
    """
    h, layers = GPT3["hidden"], GPT3["layers"]
    per_layer = 12 * h**2 + 13 * h
    embedding_layers = (GPT3["vocab"] + GPT3["seq_len"]) * h / per_layer
    rows = []
    for stages in stage_counts:
        first = (layers / stages + embedding_layers) * per_layer
        rows.append({"stages": stages, "layers_per_stage": layers / stages,
                     "inference_gb": 2 * first / 1e9, "training_gb": 16 * first / 1e9})
    fits = {kind: min(r["stages"] for r in rows if r[f"{kind}_gb"] * 1e9 <= gpu_bytes) for kind in ("inference", "training")}
    return {"embedding_layers": embedding_layers, "rows": rows, "fewest_stages": fits}


def naive_pipeline(num_stages: int = 4, t_comm: float = 0.5) -> dict:
    """The whole batch as one microbatch (F = 1, B = 2): utilisation 1/K, less with transfers."""
    timeline = simulate(schedules.gpipe(num_stages, 1), 1.0, 2.0)
    with_transfers = simulate(schedules.gpipe(num_stages, 1), 1.0, 2.0, t_comm=t_comm)
    return {
        "timeline": timeline,
        "utilisation": 1 - timeline.bubble_fraction_of_total,
        "utilisation_with_transfers": 1 - with_transfers.bubble_fraction_of_total,
    }


def communication_intensity(size: int = 8, sequences_per_gpu=(1, 8)) -> list[dict]:
    """Bytes each GPU must send per second of (peak A100) compute to keep up, GPT-3, s = 2048.

    Pipeline: ``size`` stages; per sequence a stage sends one ``s x h`` 16-bit activation and
    one gradient. Tensor: ``t = size``; 4 all-reduces of ``s x h`` per layer per sequence
    (ring: ``2(t-1)/t`` of it sent). Data: ``d = size``; one all-reduce of the 16-bit
    gradients per step, with ``b`` sequences per GPU.
    """
    h, s, L = GPT3["hidden"], GPT3["seq_len"], GPT3["layers"]
    layer_flops = 72 * s * h**2 * (1 + s / (6 * h))  # forward + backward, one sequence
    activation = 2 * s * h
    ring = 2 * (size - 1) / size
    parameters = L * (12 * h**2 + 13 * h) + (GPT3["vocab"] + s) * h
    rows: list[dict[str, Any]] = [
        {"scheme": f"pipeline (p = {size})", "bytes": 2 * activation, "seconds": L / size * layer_flops / A100_PEAK},
        {"scheme": f"tensor (t = {size})", "bytes": 4 * ring * activation, "seconds": layer_flops / size / A100_PEAK},
    ]
    for b in sequences_per_gpu:
        rows.append({"scheme": f"data (d = {size}, {b} seq/GPU)", "bytes": ring * 2 * parameters,
                     "seconds": b * L * layer_flops / A100_PEAK})
    for row in rows:
        row["gb_per_s"] = row["bytes"] / row["seconds"] / 1e9
    return rows


def section_1() -> None:
    split = gpt3_layer_split()
    print(f"lecture 1.1: GPT-3 (96 layers, h = 12288) cut by layers; embeddings = {split['embedding_layers']:.2f} layers on stage 0")
    print(" stages  layers/stage  stage 0 inference (2 B/param)  training (16 B/param)")
    for r in split["rows"]:
        print(f"{r['stages']:7d}  {r['layers_per_stage']:12g}  {r['inference_gb']:21.1f} GB  {r['training_gb']:15.1f} GB")
    print(f"fits in 80 GB from: inference {split['fewest_stages']['inference']} stages, "
          f"training {split['fewest_stages']['training']} stages (activations not counted)\n")
    naive = naive_pipeline()
    print("lecture 1.2: the naive pipeline, K = 4, one batch (F = 1, B = 2; one cell = half a unit):")
    print(schedules.render_ascii(naive["timeline"], cells_per_unit=2))
    print(f"utilisation {naive['utilisation']:.0%}; with 0.5-unit transfers {naive['utilisation_with_transfers']:.0%}\n")
    print("lecture 1.3: communication intensity (GPT-3, one 2048-token sequence, A100 peak):")
    for r in communication_intensity():
        print(f"  {r['scheme']:26s} {r['bytes'] / 1e6:10.1f} MB per {r['seconds'] * 1e3:8.2f} ms = {r['gb_per_s']:8.2f} GB/s")
    print("  (NVLink ~300 GB/s per GPU inside a node, InfiniBand ~25 GB/s per GPU between nodes)")


# ---------------------------------------------------------------- section 2


def bubble_vs_microbatches(num_stages: int = 4, counts=(1, 2, 4, 8, 16, 32, 64)) -> list[dict]:
    """GPipe's simulated bubble next to ``(K-1)/(M+K-1)`` (and ``(K-1)/M``) for each M."""
    rows = []
    for m in counts:
        timeline = simulate(schedules.gpipe(num_stages, m), 1.0, 2.0)
        rows.append({"M": m, "simulated": timeline.bubble_fraction_of_total,
                     "formula": schedules.bubble_fraction_of_total(num_stages, m),
                     "over_ideal": timeline.bubble_over_ideal})
    return rows


def throughput_table(stage_counts=(1, 2, 4, 8), counts=(1, 4, 8, 32), t_comm: float = 0.5) -> list[dict]:
    """Speed-up over one device: ``K M / (M + K - 1)``, and simulated with transfers of ``t_comm`` F."""
    rows = []
    for k in stage_counts:
        for m in counts:
            slow = simulate(schedules.gpipe(k, m), 1.0, 2.0, t_comm=t_comm)
            rows.append({"K": k, "M": m, "formula": schedules.speedup(k, m),
                         "with_transfers": k * m * 3.0 / slow.makespan})
    return rows


def step_time(num_microbatches: int, num_stages: int, alpha: float, beta: float, batch: int) -> float:
    """``3 (M + K - 1)(alpha + beta N / M)``: one GPipe step when B = 2F and t(b) = alpha + beta b."""
    return 3 * (num_microbatches + num_stages - 1) * (alpha + beta * batch / num_microbatches)


def best_microbatches(num_stages: int, alpha: float, beta: float, batch: int) -> float:
    """``M* = sqrt((K - 1) beta N / alpha)``, the minimum of ``step_time`` over M."""
    return math.sqrt((num_stages - 1) * beta * batch / alpha)


def fit_line(xs, ys) -> tuple[float, float]:
    """Least-squares ``y = alpha + beta x``."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - beta * mx, beta


def measure_microbatch_cost(sizes=(1, 4, 16, 32, 64), width: int = 256, repeats: int = 20) -> dict:
    """⏱ Time one MLP stage on b rows for each b and fit ``t(b) = alpha + beta b`` (seconds).

    One thread, fastest of ``repeats`` runs (the least disturbed by other processes).
    """
    torch.manual_seed(0)
    stage = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times = []
    try:
        with torch.no_grad():
            for b in sizes:
                x = torch.randn(b, width)
                stage(x)  # warm-up
                samples = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    stage(x)
                    samples.append(time.perf_counter() - start)
                times.append(min(samples))
    finally:
        torch.set_num_threads(threads)
    alpha, beta = fit_line(list(sizes), times)
    return {"sizes": list(sizes), "seconds": times, "alpha": alpha, "beta": beta}


def section_2() -> None:
    print("lecture 2.3: GPipe, K = 4, M = 8 (F = 1, B = 2):")
    timeline = simulate(schedules.gpipe(4, 8), 1.0, 2.0)
    print(_draw(timeline))
    print(f"one step {timeline.makespan:g} units, bubble {timeline.bubble_fraction_of_total:.1%} of the total time\n")
    rows = bubble_vs_microbatches()
    print("   M  simulated  (K-1)/(M+K-1)  over ideal (K-1)/M")
    for r in rows:
        print(f"{r['M']:4d}  {r['simulated']:9.1%}  {r['formula']:13.1%}  {r['over_ideal']:10.1%}")
    print(f"max |simulated - formula| = {max(abs(r['simulated'] - r['formula']) for r in rows):.1e}")
    for k in (2, 4, 8):
        print(f"K = {k}: at M = 4K the bubble is {schedules.bubble_fraction_of_total(k, 4 * k):.1%}; "
              f"below 5% needs M > 19(K-1) = {19 * (k - 1)}")
    print("\nthroughput vs one device (transfers = half a forward in the last column):")
    for r in throughput_table():
        print(f"  K = {r['K']}, M = {r['M']:2d}: {r['formula']:5.2f}x  {r['with_transfers']:5.2f}x")
    print("\nlecture 2.4: ⏱ micro-batch cost on this machine (MLP 256 -> 1024 -> 256, forward):")
    fit = measure_microbatch_cost()
    for b, t in zip(fit["sizes"], fit["seconds"]):
        print(f"  b = {b:4d}: {t * 1e6:8.1f} us")
    alpha, beta, k, n = fit["alpha"], fit["beta"], 4, 1024
    print(f"  fit t(b) = {alpha * 1e6:.1f} us + {beta * 1e6:.3f} us x b")
    if alpha > 0 and beta > 0:
        print(f"  K = {k}, N = {n}: M* = sqrt((K-1) beta N / alpha) = {best_microbatches(k, alpha, beta, n):.1f}")
        for m in (1, 2, 4, 8, 16, 32, 64, 128):
            print(f"    M = {m:3d}: step {step_time(m, k, alpha, beta, n) * 1e3:7.2f} ms (fit)")
    print("  (⏱ timed: different on every run and machine)")
    print("\nexercise 3 (t(b) = 0.2 + 0.01 b ms, K = 4, N = 1024):")
    for m in (4, 16, 64):
        print(f"  M = {m:2d}: step {step_time(m, 4, 0.2, 0.01, 1024):.1f} ms")
    print(f"  M* = {best_microbatches(4, 0.2, 0.01, 1024):.1f}")


# ---------------------------------------------------------------- section 4


def transfer_table(num_stages: int = 4, counts=(4, 8, 16, 32, 64), t_comm: float = 0.2) -> list[dict]:
    """Bubble (fraction of total) of GPipe, 1F1B, interleaved v = 2 and 4 with transfers."""
    rows = []
    for m in counts:
        row = {"M": m}
        for name, schedule in (("gpipe", schedules.gpipe(num_stages, m)),
                               ("1f1b", _pipeline().one_f_one_b(num_stages, m)),
                               ("v2", _pipeline().interleaved_one_f_one_b(num_stages, m, 2)),
                               ("v4", _pipeline().interleaved_one_f_one_b(num_stages, m, 4))):
            row[name] = simulate(schedule, 1.0, 2.0, t_comm=t_comm).bubble_fraction_of_total
        rows.append(row)
    return rows


def recomputation_strategies(num_layers: int = 64) -> list[dict]:
    """Chen et al.'s three strategies for a chain of n layers: activations kept, extra layer forwards.

    Extra forwards count what must be recomputed: Chen et al.'s sqrt(n) checkpoints redo
    the k - 1 inner layers of each segment (n - n/k: 56 for n = 64), while Problem 4.3's
    ``checkpoint_sequential`` reruns whole segments, the checkpointed layer included (n: 64).
    """
    k = round(math.sqrt(num_layers))
    return [
        {"strategy": "keep everything", "stored": num_layers, "extra_forwards": 0},
        {"strategy": "keep only h0 (O(1))", "stored": 2, "extra_forwards": num_layers * (num_layers - 1) // 2},
        {"strategy": f"checkpoint every k = {k} layers", "stored": num_layers // k + k,
         "extra_forwards": num_layers - num_layers // k},
        {"strategy": "the same, whole segments rerun (Problem 4.3)", "stored": num_layers // k + k,
         "extra_forwards": num_layers},
    ]


def pipeline_recomputation(batch: int = 256, layers: int = 48, stages: int = 4, counts=(1, 4, 32)) -> list[dict]:
    """GPipe's peak activations per device, in sample-layers, without and with recomputation.

    Without: every sample's activations of the stage's L/K layers, ``N L / K``. With: the
    stage inputs of all N samples plus one microbatch's L/K layers, ``N + (L/K)(N/M)``.
    """
    rows = []
    for m in counts:
        without = batch * layers / stages
        with_recomputation = batch + layers / stages * batch / m
        rows.append({"M": m, "without": without, "with": with_recomputation, "saving": without / with_recomputation})
    return rows


def measured_recomputation(num_layers: int = 64) -> dict | None:
    """Run the student's ``checkpoint_sequential`` on a tanh chain: None until it is implemented."""
    try:
        torch.manual_seed(0)
        layers = [nn.Sequential(nn.Linear(16, 16, dtype=torch.float64), nn.Tanh()) for _ in range(num_layers)]
        calls = [0]
        for layer in layers:
            layer.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
        x = torch.randn(8, 16, dtype=torch.float64, requires_grad=True)
        plain_out = _pipeline().run_layers(layers, x)
        plain = torch.autograd.grad(plain_out.sum(), [x, *[p for layer in layers for p in layer.parameters()]])
        calls[0] = 0
        out = _pipeline().checkpoint_sequential(layers, x)
        mine = torch.autograd.grad(out.sum(), [x, *[p for layer in layers for p in layer.parameters()]])
    except NotImplementedError:
        return None
    # exact: checkpoint_sequential promises the plain run's bits (the same layers recomputed on the same shapes)
    return {"identical": all(torch.equal(a, b) for a, b in zip(plain, mine)), "layer_calls": calls[0]}


def section_4() -> None:
    print("lecture 4.1: 1F1B, K = 4, M = 8 (F = 1, B = 2), from your one_f_one_b (Problem 4.1):")
    timeline = simulate(_pipeline().one_f_one_b(4, 8), 1.0, 2.0)
    print(_draw(timeline))
    print(schedules.describe(timeline) + "\n")
    gpipe = simulate(schedules.gpipe(4, 8), 1.0, 2.0)
    interleaved = simulate(_pipeline().interleaved_one_f_one_b(4, 8, 2), 1.0, 2.0)
    print("lecture 4.2: interleaved, from your interleaved_one_f_one_b (Problem 4.2); K = 2, M = 4, v = 2 drawn "
          "(each chunk's F takes 1/2), K = 4, M = 8 measured:")
    print(_draw(simulate(_pipeline().interleaved_one_f_one_b(2, 4, 2), 1.0, 2.0)))
    print(f"idle per device {interleaved.idle_per_device[0]:g} vs 1F1B {gpipe.idle_per_device[0]:g} (halved); "
          f"step {interleaved.makespan:g} vs {gpipe.makespan:g}; "
          f"peak in-flight {interleaved.peak_in_flight} (1F1B {simulate(_pipeline().one_f_one_b(4, 8)).peak_in_flight})\n")
    print("bubble (fraction of total) with 0.2-unit transfers, K = 4:")
    print("   M   GPipe   1F1B  inter v=2  inter v=4")
    for r in transfer_table():
        print(f"{r['M']:4d}  {r['gpipe']:6.1%} {r['1f1b']:6.1%}  {r['v2']:9.1%}  {r['v4']:9.1%}")
    print("\nlecture 4.3: recomputation, a chain of n = 64 layers:")
    for r in recomputation_strategies():
        print(f"  {r['strategy']:32s} stored {r['stored']:3d}   extra layer forwards {r['extra_forwards']:5d}")
    measured = measured_recomputation()
    if measured is None:
        print("  (implement Problem 4.3 checkpoint_sequential to see it run here)")
    else:
        print(f"  your checkpoint_sequential (Problem 4.3): gradients bit-identical: {measured['identical']}; "
              f"layer forwards during the checkpointed forward + backward: {measured['layer_calls']} "
              "(64 + 64 rerun)")
    print("\nGPipe + recomputation, N = 256 samples, 48 layers, K = 4 (peak sample-layers per device):")
    for r in pipeline_recomputation():
        print(f"  M = {r['M']:2d}: without {r['without']:6.0f}  with {r['with']:6.0f}  saving {r['saving']:4.1f}x")


# ---------------------------------------------------------------- section 5 (5.6)


def activation_memory_per_layer(t: int = 8, microbatch: int = 1) -> list[dict]:
    """Korthikanti et al.'s bytes of activations per layer (16-bit), GPT-3, s = 2048."""
    s, b, h, a = GPT3["seq_len"], microbatch, GPT3["hidden"], GPT3["heads"]
    sbh, attention = s * b * h, 5 * a * s / h
    rows = [
        ("no parallelism", sbh * (34 + attention)),
        (f"tensor parallel t = {t}", sbh * (10 + 24 / t + attention / t)),
        (f"tensor + sequence parallel t = {t}", sbh / t * (34 + attention)),
        ("t + sequence parallel + selective recomputation", sbh / t * 34),
        ("full recomputation (layer input only)", 2 * sbh),
    ]
    return [{"setting": name, "bytes": value} for name, value in rows]


def section_5() -> None:
    print("lecture 5.6: activation memory per layer, GPT-3 (s = 2048, h = 12288, a = 96, b = 1):")
    for r in activation_memory_per_layer():
        print(f"  {r['setting']:48s} {r['bytes'] / 1e9:6.2f} GB")


# ---------------------------------------------------------------- section 6


def section_6() -> None:
    cluster = cost_model.Cluster(gpus=3072)
    plans = cost_model.estimates(cost_model.MEGATRON_1T, cluster, 3072, [(t, p) for t in (4, 8, 16) for p in (16, 32, 64, 128)])
    print("lecture 6.2: the 1T model (128 layers, h = 25600) on 3072 A100s, batch 3072 ('!' = over 80 GB):")
    print(cost_model.format_plans(plans))
    print(cost_model.format_best(cost_model.MEGATRON_1T, cluster, 3072)
          + " (the paper ran t = 8, p = 64: 163 TFLOP/s measured)\n")
    cluster = cost_model.Cluster(gpus=1024)
    rows = cost_model.estimates(cost_model.GPT3_175B, cluster, 1536, [(8, p) for p in (4, 8, 16, 32)])
    print("lecture 6.3: GPT-3 on 1024 GPUs, t = 8, batch 1536: bubble (p-1)/m = (n/t - d)/B")
    print(cost_model.format_plans(rows))


# ---------------------------------------------------------------- the bubble lesson


def bubble_lesson(p: int = 8, m: int = 32) -> dict:
    """The lesson's numbers: both conventions, interleaved v = 4, ZB-H1 vs 1F1B, DualPipe."""
    one_f_one_b = simulate(_pipeline().one_f_one_b(p, m), 1.0, 2.0)
    interleaved = simulate(_pipeline().interleaved_one_f_one_b(p, m, 4), 1.0, 2.0)
    zb = simulate(schedules.zb_h1(p, m), 1.0, 2.0, t_w=1.0)  # F = I = W = 1
    doubled = simulate(_pipeline().one_f_one_b(p, 2 * m), 1.0, 2.0)
    return {
        "over_ideal": one_f_one_b.bubble_over_ideal,
        "fraction_of_total": one_f_one_b.bubble_fraction_of_total,
        "over_ideal_2m": doubled.bubble_over_ideal,
        "interleaved_v4_over_ideal": interleaved.bubble_over_ideal,
        "idle_1f1b": one_f_one_b.idle_per_device[0],
        "idle_zb_h1": zb.idle_per_device[0],
        "peak_1f1b": one_f_one_b.peak_in_flight[0],
        "peak_gpipe": simulate(schedules.gpipe(p, m)).peak_in_flight[0],
        "deepseek": {
            "1F1B": schedules.idle_one_f_one_b(p, 1, 2),
            "ZB1P": schedules.idle_zb_h1(p, 1, 2, 1),
            "DualPipe": (schedules.idle_dualpipe(p, 2, 1, 2), schedules.idle_dualpipe(p, 2, 1, 3)),
        },
    }


def section_bubble() -> None:
    lesson = bubble_lesson()
    print("bubble lesson, p = 8, m = 32 (F = 1, B = 2):")
    print(f"  1F1B bubble: {lesson['over_ideal']:.1%} of ideal compute, {lesson['fraction_of_total']:.1%} of total time")
    print(f"  m = 64: {lesson['over_ideal_2m']:.1%} of ideal compute (about half)")
    print(f"  peak in-flight on device 0: GPipe {lesson['peak_gpipe']:g}, 1F1B {lesson['peak_1f1b']:g}")
    print(f"  interleaved v = 4: {lesson['interleaved_v4_over_ideal']:.1%} of ideal compute")
    print(f"  F = I = W = 1: idle per device 1F1B {lesson['idle_1f1b']:g}, ZB-H1 {lesson['idle_zb_h1']:g}")
    low, high = lesson["deepseek"]["DualPipe"]
    print(f"  DeepSeek-V3 table 2 at F = 1, B = 2, W = 1: 1F1B {lesson['deepseek']['1F1B']:g}, "
          f"ZB1P {lesson['deepseek']['ZB1P']:g}, DualPipe {low:g} to {high:g} (F&B from 2 to 3)")
    print(_draw(simulate(schedules.zb_h1(4, 8), 1.0, 2.0, t_w=1.0)))


SECTIONS: dict[str, Callable[[], None]] = {
    "1": section_1, "2": section_2, "4": section_4, "5": section_5, "6": section_6, "bubble": section_bubble,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the chosen sections; a section that reaches one of your stubs says so in one line."""
    parser = cli.parser("companion", __doc__)
    parser.add_argument("sections", nargs="*", metavar="SECTION", help=f"one or more of {' '.join(SECTIONS)} all (default: all)")
    names = parser.parse_args(argv).sections or ["all"]
    unknown = [name for name in names if name != "all" and name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {unknown[0]!r}; choose from {' '.join(SECTIONS)} all")
    status = 0
    for key, show in SECTIONS.items():
        if "all" in names or key in names:
            try:
                show()
            except NotImplementedError as error:  # the rest of the sections still run
                print(cli.stub_line(f"section {key}", error))
                status = 1
            print()
    return status


if __name__ == "__main__":
    raise SystemExit(cli.run(main, "python -m minitorch.companion"))
