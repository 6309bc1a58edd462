"""A cost model for choosing (t, p, d): tensor x pipeline x data parallelism (provided).

Lecture section 6. One training step on ``N = t * p * d`` GPUs is split into

- compute: Megatron's count ``96 B s L h^2 (1 + s/(6h) + V/(16 L h))`` FLOPs, which
  includes full activation recomputation, run at ``efficiency`` of peak;
- bubble: compute x ``(p - 1) / m``, with ``m = B / (d b)`` microbatches per pipeline;
- tensor parallel: 6 all-reduces per layer per microbatch (forward 2, recomputation 2,
  backward 2) of a ``b x s x h`` 16-bit activation, ring cost ``2(t-1)/t`` x size, over
  NVLink when ``t`` fits in one node, else over InfiniBand;
- pipeline: per microbatch one activation out and one gradient back, each
  ``2 s b h / t`` bytes (Megatron scatters it over the t ranks), over InfiniBand;
- data parallel: one ring all-reduce of the 16-bit gradients of the GPU's
  ``P / (t p)`` parameters over InfiniBand (not overlapped, to stay simple);

and memory per GPU is ``16 P / (t p)`` bytes of training state (mixed-precision Adam)
plus the activations of pipeline stage 0 under 1F1B with full recomputation: the input
of each of its ``L / p`` layers for ``min(p, m)`` microbatches in flight (``2 s b h`` bytes
each) plus one layer's full activations while it is recomputed, ``s b h (10 + 24/t +
5 a s / (h t))`` bytes (Korthikanti et al. 2022). GB are 10^9 bytes.

What it leaves out (why real clusters differ): smaller, less efficient matrix multiplies
at large t, latency of many small transfers, non-matmul time, buffers, fragmentation.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from minitorch import cli


@dataclass(frozen=True)
class Model:
    """A GPT-style transformer: ``layers`` x (attention + MLP), hidden size ``hidden``."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int

    @property
    def parameters(self) -> float:
        """``12 L h^2 (1 + 13/(12h)) + (V + s) h``: layers plus token and position embeddings."""
        L, h = self.layers, self.hidden
        return 12 * L * h**2 * (1 + 13 / (12 * h)) + (self.vocab + self.seq_len) * h


@dataclass(frozen=True)
class Cluster:
    """GPUs and links. Defaults: A100 80 GB, 8 per node, NVLink ~300 GB/s, IB ~25 GB/s per GPU."""

    gpus: int
    gpus_per_node: int = 8
    peak_flops: float = 312e12
    efficiency: float = 0.75
    memory_bytes: float = 80e9
    nvlink_bytes_per_s: float = 300e9
    ib_bytes_per_s: float = 25e9


@dataclass(frozen=True)
class Estimate:
    """Time (seconds) and memory (bytes) of one step for one (t, p, d)."""

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
        """``(p - 1) / m``: bubble time over ideal compute time."""
        return (self.p - 1) / self.microbatches

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


def training_flops(model: Model, batch: int) -> float:
    """FLOPs of one step with full recomputation (Narayanan et al. 2021, eq. 3)."""
    L, h, s, V = model.layers, model.hidden, model.seq_len, model.vocab
    return 96 * batch * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))


def _all_reduce_seconds(num_bytes: float, ranks: int, bandwidth: float) -> float:
    return 2 * (ranks - 1) / ranks * num_bytes / bandwidth if ranks > 1 else 0.0


def estimate(model: Model, cluster: Cluster, batch: int, t: int, p: int, microbatch: int = 1) -> Estimate:
    """Cost of one step with tensor size ``t`` and ``p`` pipeline stages (d = N / (t p)).

    Raises:
        ValueError: ``t * p`` does not divide the GPUs, ``p`` does not divide the layers,
            ``t`` does not divide the heads, or the batch does not split into
            ``d x microbatch``-sized pieces.
    """
    if cluster.gpus % (t * p):
        raise ValueError(f"t * p = {t * p} must divide the {cluster.gpus} GPUs")
    if model.layers % p:
        raise ValueError(f"p = {p} must divide the {model.layers} layers")
    if model.heads % t:
        raise ValueError(f"t = {t} must divide the {model.heads} heads")
    d = cluster.gpus // (t * p)
    if batch % (d * microbatch):
        raise ValueError(f"batch {batch} must split into d = {d} replicas of {microbatch}-sample microbatches")
    m = batch // (d * microbatch)
    s, h, a = model.seq_len, model.hidden, model.heads
    flops_per_gpu = training_flops(model, batch) / cluster.gpus
    compute = flops_per_gpu / (cluster.peak_flops * cluster.efficiency)
    activation = 2 * s * microbatch * h  # one 16-bit b x s x h tensor
    tp_link = cluster.nvlink_bytes_per_s if t <= cluster.gpus_per_node else cluster.ib_bytes_per_s
    layer_microbatches = m * model.layers // p
    tensor_parallel = 6 * layer_microbatches * _all_reduce_seconds(activation, t, tp_link)
    pipeline = m * 2 * activation / t / cluster.ib_bytes_per_s if p > 1 else 0.0
    local_parameters = model.parameters / (t * p)
    data_parallel = _all_reduce_seconds(2 * local_parameters, d, cluster.ib_bytes_per_s)
    in_flight = min(p, m)
    stored_inputs = in_flight * (model.layers // p) * activation
    working_layer = s * microbatch * h * (10 + 24 / t + 5 * a * s / (h * t))
    return Estimate(
        t=t,
        p=p,
        d=d,
        microbatches=m,
        compute_s=compute,
        bubble_s=compute * (p - 1) / m,
        tensor_parallel_s=tensor_parallel,
        pipeline_s=pipeline,
        data_parallel_s=data_parallel,
        state_bytes=16 * local_parameters,
        activation_bytes=stored_inputs + working_layer,
        flops_per_gpu=flops_per_gpu,
        memory_limit=cluster.memory_bytes,
    )


def all_plans(model: Model, cluster: Cluster, batch: int, microbatch: int = 1) -> list[Estimate]:
    """Every valid (t, p) with t a power of two up to 2 nodes, sorted by step time."""
    plans = []
    for t in (1, 2, 4, 8, 16):
        for p in range(1, model.layers + 1):
            try:
                plans.append(estimate(model, cluster, batch, t, p, microbatch))
            except ValueError:
                continue
    return sorted(plans, key=lambda e: e.step_s)


def best_plan(model: Model, cluster: Cluster, batch: int, microbatch: int = 1) -> Estimate:
    """The fastest plan that fits in memory.

    Raises:
        ValueError: no plan fits.
    """
    fitting = [e for e in all_plans(model, cluster, batch, microbatch) if e.fits]
    if not fitting:
        raise ValueError(f"no (t, p, d) fits {model.name} on {cluster.gpus} GPUs")
    return fitting[0]


# The models of Narayanan et al. 2021, table 1 (vocabulary padded to 51200).
GPT3_175B = Model("GPT-3 175B", layers=96, hidden=12288, heads=96, seq_len=2048, vocab=51200)
MEGATRON_1T = Model("Megatron 1T", layers=128, hidden=25600, heads=160, seq_len=2048, vocab=51200)


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


def main(argv: Sequence[str] | None = None) -> int:
    cli.parser("cost_model", __doc__).parse_args(argv)
    cluster = Cluster(gpus=3072)
    plans = [e for e in all_plans(MEGATRON_1T, cluster, batch=3072) if e.t >= 4 and e.p >= 16]
    print(f"{MEGATRON_1T.name} on {cluster.gpus} GPUs, batch 3072 ('!' = does not fit in 80 GB):")
    print(format_plans(sorted(plans, key=lambda e: (e.t, e.p))))
    best = best_plan(MEGATRON_1T, cluster, batch=3072)
    print(f"best that fits: t = {best.t}, p = {best.p}, d = {best.d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run(main, "python -m minitorch.cost_model"))
