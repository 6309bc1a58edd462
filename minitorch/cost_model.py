"""The cost model's data and tables for choosing (t, p, d): tensor x pipeline x data parallelism (provided).

Lecture section 6 and Problem 5. One training step on ``N = t * p * d`` GPUs: ``t`` GPUs
split every layer's matrices (tensor parallelism), ``p`` stages hold consecutive layers
(pipeline parallelism), ``d`` replicas of that pipeline each take a share of the batch (data
parallelism). What the estimate counts, and over which link, is the write-up's "The cost
model" (Problem 5); YOU write the estimate and the search in ``minitorch/pipeline.py``
(``estimate``, ``best_plan``). This module holds what they take and return (``Model``,
``Cluster``, ``Estimate``), the lecture's models and clusters, and prints a table of your
estimates:

    python -m minitorch.cost_model                  the 1T model on 3072 A100s (lecture 6.2)
    python -m minitorch.cost_model --model anchor --gpus 8 --batch 64

What the model leaves out (why real clusters differ): smaller, less efficient matrix
multiplies at large t, latency of many small transfers, non-matmul time, buffers,
fragmentation. GB are 10^9 bytes.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from minitorch import cli


@dataclass(frozen=True)
class Model:
    """A GPT-style transformer: ``layers`` x (attention + MLP), hidden size ``hidden``,
    ``heads`` attention heads, sequences of ``seq_len`` tokens, a ``vocab``-word vocabulary."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int

    @property
    def parameters(self) -> int:
        """``12 L h^2 + 13 L h + (V + s) h``: layers plus token and position embeddings. A whole
        number, computed exactly (so memory that equals a limit is decided without rounding)."""
        L, h = self.layers, self.hidden
        return 12 * L * h**2 + 13 * L * h + (self.vocab + self.seq_len) * h


@dataclass(frozen=True)
class Cluster:
    """GPUs and links. Defaults: A100 80 GB, 8 per node, NVLink ~300 GB/s, IB ~25 GB/s per GPU.

    ``peak_flops`` is one GPU's 16-bit matmul peak, of which matrix multiplies reach
    ``efficiency``; ``nvlink_bytes_per_s`` links the GPUs inside a node, ``ib_bytes_per_s``
    is what one GPU sends to other nodes (InfiniBand)."""

    gpus: int
    gpus_per_node: int = 8
    peak_flops: float = 312e12
    efficiency: float = 0.75
    memory_bytes: float = 80e9
    nvlink_bytes_per_s: float = 300e9
    ib_bytes_per_s: float = 25e9


@dataclass(frozen=True)
class Estimate:
    """Time (seconds) and memory (bytes per GPU) of one training step for one (t, p, d)."""

    t: int
    p: int
    d: int
    microbatches: int
    compute_s: float
    bubble_s: float
    tensor_parallel_s: float
    pipeline_s: float
    data_parallel_s: float
    state_bytes: float
    activation_bytes: float
    flops_per_gpu: float
    memory_limit: float

    @property
    def bubble(self) -> float:
        """Bubble time over ideal compute time (the convention of Megatron's paper)."""
        return self.bubble_s / self.compute_s

    @property
    def step_s(self) -> float:
        return self.compute_s + self.bubble_s + self.tensor_parallel_s + self.pipeline_s + self.data_parallel_s

    @property
    def memory_bytes(self) -> float:
        return self.state_bytes + self.activation_bytes

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.memory_limit

    @property
    def achieved_flops(self) -> float:
        """Model FLOP/s per GPU (the figure papers report)."""
        return self.flops_per_gpu / self.step_s


# The models of Narayanan et al. 2021, table 1 (vocabulary padded to 51200).
GPT3_175B = Model("GPT-3 175B", layers=96, hidden=12288, heads=96, seq_len=2048, vocab=51200)
MEGATRON_1T = Model("Megatron 1T", layers=128, hidden=25600, heads=160, seq_len=2048, vocab=51200)
# The lecture series' anchor model (64 layers, h = 5120, a 248,320-word vocabulary, 4,096-token
# sequences), shaped as GPT layers: 21.4e9 parameters by this model's count, where the lecture's
# model (a wider MLP, separate output layer) has 27.8e9.
ANCHOR = Model("lecture anchor", layers=64, hidden=5120, heads=40, seq_len=4096, vocab=248320)
MODELS = {"gpt3": GPT3_175B, "1t": MEGATRON_1T, "anchor": ANCHOR}


def anchor_cluster(gpus: int) -> Cluster:
    """The lecture's H800 nodes: 8 GPUs, NVLink 160 GB/s, InfiniBand 50 GB/s per GPU, 80 GB."""
    return Cluster(gpus=gpus, peak_flops=989e12, nvlink_bytes_per_s=160e9, ib_bytes_per_s=50e9)


def estimates(model: Model, cluster: Cluster, batch: int, plans: Iterable[tuple[int, int]],
              microbatch: int = 1) -> list[Estimate]:
    """Your ``pipeline.estimate`` of each valid ``(t, p)`` of ``plans`` (invalid ones left out)."""
    from minitorch import pipeline  # the student file, imported only when a table is asked for

    rows = []
    for t, p in plans:
        try:
            rows.append(pipeline.estimate(model, cluster, batch, t, p, microbatch))
        except ValueError:
            continue
    return rows


def plan_grid(model: Model, cluster: Cluster, ts: Iterable[int] | None = None) -> list[tuple[int, int]]:
    """``(t, p)`` for t in ``ts`` (default: the divisors of a node) and every p dividing the layers."""
    ts = ts or [t for t in range(1, cluster.gpus_per_node + 1) if cluster.gpus_per_node % t == 0]
    return [(t, p) for t in ts for p in range(1, model.layers + 1) if model.layers % p == 0]


def format_plans(plans: list[Estimate]) -> str:
    """A table of estimates: one line per (t, p, d)."""
    lines = [" t    p    d     m  bubble  compute+bubble  TP comm  PP comm  DP comm   step  memory GB  TFLOP/s"]
    for e in plans:
        lines.append(
            f"{e.t:2d} {e.p:4d} {e.d:4d} {e.microbatches:5d}  {e.bubble:6.1%}  {e.compute_s + e.bubble_s:12.1f} s"
            f" {e.tensor_parallel_s:7.2f}  {e.pipeline_s:7.2f}  {e.data_parallel_s:7.2f}  {e.step_s:5.1f}"
            f"  {e.memory_bytes / 1e9:7.1f}{'' if e.fits else '!'}  {e.achieved_flops / 1e12:7.0f}"
        )
    return "\n".join(lines)


def format_best(model: Model, cluster: Cluster, batch: int, microbatch: int = 1) -> str:
    """One line: your ``pipeline.best_plan`` for this model, cluster and batch."""
    from minitorch import pipeline

    best = pipeline.best_plan(model, cluster, batch, microbatch)
    if best is None:
        return f"no plan fits {model.name} on {cluster.gpus} GPUs ({cluster.memory_bytes / 1e9:g} GB each)"
    return (f"fastest that fits: t = {best.t}, p = {best.p}, d = {best.d}: {best.step_s:.2f} s per step, "
            f"{best.memory_bytes / 1e9:.1f} GB per GPU")


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("cost_model", __doc__)
    parser.add_argument("--model", choices=sorted(MODELS), default=None, help="a preset model (default: the 1T model)")
    parser.add_argument("--gpus", type=int, default=None, help="number of GPUs")
    parser.add_argument("--batch", type=int, default=None, help="global batch in sequences")
    parser.add_argument("--microbatch", type=int, default=1, help="sequences per microbatch (default 1)")
    args = parser.parse_args(argv)
    if args.model is None and args.gpus is None and args.batch is None:
        cluster = Cluster(gpus=3072)
        plans = estimates(MEGATRON_1T, cluster, 3072, [(t, p) for t in (4, 8, 16) for p in (16, 32, 64, 128)])
        print(f"{MEGATRON_1T.name} on {cluster.gpus} GPUs, batch 3072 ('!' = does not fit in 80 GB):")
        print(format_plans(plans))
        print(format_best(MEGATRON_1T, cluster, 3072))
        return 0
    model = MODELS[args.model or "1t"]
    gpus = args.gpus or 8
    cluster = anchor_cluster(gpus) if model is ANCHOR else Cluster(gpus=gpus)
    batch = args.batch or gpus
    print(f"{model.name} on {gpus} GPUs, batch {batch}, microbatch {args.microbatch} "
          f"('!' = does not fit in {cluster.memory_bytes / 1e9:g} GB):")
    print(format_plans(estimates(model, cluster, batch, plan_grid(model, cluster), args.microbatch)))
    print(format_best(model, cluster, batch, args.microbatch))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run(main, "python -m minitorch.cost_model"))
