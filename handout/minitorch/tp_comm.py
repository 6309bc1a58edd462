"""How many bytes tensor parallelism moves (provided; lecture sections 5.5-5.6, exercises 7 and 9).

Byte counts are what ONE rank sends (= receives) with ring collectives over t ranks:

* all-reduce of n elements:               2·(t-1)/t · n elements
* all-gather to / reduce-scatter from n:    (t-1)/t · n elements

so an all-reduce costs exactly a reduce-scatter plus an all-gather (the reason sequence
parallelism moves no more bytes than plain tensor parallelism). Sizes are in bytes; the
lecture writes GB = 1e9 bytes and MB = 1e6 bytes.

Run ``python -m minitorch.tp_comm`` for the lecture's numbers.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from minitorch import cli


def all_reduce_bytes(numel: int, t: int, bytes_per_element: int) -> float:
    """Bytes one rank sends to all-reduce ``numel`` elements over ``t`` ranks (ring)."""
    _check_positive(t=t)
    return 2 * (t - 1) / t * numel * bytes_per_element


def all_gather_bytes(numel: int, t: int, bytes_per_element: int) -> float:
    """Bytes one rank sends to all-gather a tensor of ``numel`` elements IN TOTAL over ``t``
    ranks (each rank contributes ``numel / t``); a reduce-scatter of ``numel`` costs the same."""
    _check_positive(t=t)
    return (t - 1) / t * numel * bytes_per_element


reduce_scatter_bytes = all_gather_bytes


@dataclass(frozen=True)
class OutputLayerComm:
    """Per-rank bytes for the loss of a vocabulary-parallel output layer, one microbatch."""

    gather_logits_bytes: float  # all-gather the [tokens, V] logits, then a dense loss
    fused_loss_bytes: float     # fused cross-entropy: all-reduce a few scalars per token

    @property
    def ratio(self) -> float:
        """How many times more bytes gathering the logits moves than the fused loss."""
        return self.gather_logits_bytes / self.fused_loss_bytes


def output_layer_comm(vocab_size: int, t: int, tokens: int, logit_bytes: int = 2,
                      scalars_per_token: int = 3, scalar_bytes: int = 4) -> OutputLayerComm:
    """Lecture 5.5: gather the logits (BF16 by default) vs the fused loss (3 float32 scalars
    per token: the max, the sum of exponentials, the target logit, each all-reduced)."""
    _check_positive(vocab_size=vocab_size, t=t, tokens=tokens)
    return OutputLayerComm(
        gather_logits_bytes=all_gather_bytes(tokens * vocab_size, t, logit_bytes),
        fused_loss_bytes=scalars_per_token * all_reduce_bytes(tokens, t, scalar_bytes),
    )


@dataclass(frozen=True)
class LayerComm:
    """Communication of one tensor-parallel transformer layer (forward + backward)."""

    collectives: tuple[tuple[str, str, int], ...]  # (phase, kind, numel of the full tensor)
    bytes: float                                    # per rank, all collectives together
    flops: float                                    # per rank, forward + backward


def layer_comm(b: int, s: int, h: int, t: int, bytes_per_element: int = 2,
               sequence_parallel: bool = False) -> LayerComm:
    """Lecture 5.4/5.6: per layer, 2 all-reduces of ``[s, b, h]`` in forward and 2 in
    backward (f and g of attention and MLP); with sequence parallelism each becomes a
    reduce-scatter + all-gather pair of the same tensor, moving the same bytes.
    Compute: about ``72·b·s·h²/t`` FLOPs per rank (forward + backward)."""
    _check_positive(b=b, s=s, h=h, t=t)
    n = b * s * h
    if sequence_parallel:
        per_block: tuple[tuple[str, int], ...] = (("reduce_scatter", n), ("all_gather", n))
        cost = {"reduce_scatter": reduce_scatter_bytes, "all_gather": all_gather_bytes}
    else:
        per_block = (("all_reduce", n),)
        cost = {"all_reduce": all_reduce_bytes}
    collectives = tuple((phase, kind, numel) for phase in ("forward", "backward")
                        for _block in ("attention", "mlp") for kind, numel in per_block)
    total = sum(cost[kind](numel, t, bytes_per_element) for _, kind, numel in collectives)
    return LayerComm(collectives, total, 72 * b * s * h * h / t)


def comm_to_compute(b: int, s: int, h: int, t: int, flops_per_second: float,
                    bytes_per_second: float, bytes_per_element: int = 2) -> float:
    """Time spent communicating / time spent computing for one layer (lecture 5.6).

    Both grow like ``b·s``, so the ratio depends only on ``t``, ``h`` and the hardware."""
    layer = layer_comm(b, s, h, t, bytes_per_element)
    return (layer.bytes / bytes_per_second) / (layer.flops / flops_per_second)


def mlp_shards(hidden: int, ffn_hidden: int, t: int, tokens: int) -> dict:
    """Exercise 7: shapes of A_i, B_i (``Z = GeLU(X·A)·B``, A: hidden x ffn) on one rank and
    the number of elements of the forward all-reduce for ``tokens`` input rows."""
    _check_positive(hidden=hidden, ffn_hidden=ffn_hidden, t=t, tokens=tokens)
    if ffn_hidden % t:
        raise ValueError(f"ffn_hidden ({ffn_hidden}) must be divisible by t ({t})")
    return {"A_i": (hidden, ffn_hidden // t), "B_i": (ffn_hidden // t, hidden),
            "all_reduce_numel": tokens * hidden}


def activation_bytes_per_layer(s: int, b: int, h: int, a: int, t: int = 1,
                               sequence_parallel: bool = False) -> float:
    """Activation memory of one layer, 16-bit, no recomputation (Korthikanti et al. 2022):
    ``s·b·h·(34 + 5·a·s/h)`` unsplit; tensor parallelism leaves the ``10·s·b·h`` of LayerNorm,
    dropout and residuals unsplit; sequence parallelism divides everything by ``t``."""
    _check_positive(s=s, b=b, h=h, a=a, t=t)
    if sequence_parallel:
        return s * b * h * (34 + 5 * a * s / h) / t
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def _demo() -> None:
    tokens = 8 * 2048
    print("Output layer, t = 8, one microbatch of 8 x 2048 tokens (lecture 5.5):")
    for name, vocab in (("GPT-2", 50257), ("LLaMA-3", 128256)):
        c = output_layer_comm(vocab, 8, tokens)
        print(f"  {name:8s} V = {vocab:6d}: all-gather logits {c.gather_logits_bytes / 1e9:.2f} GB, "
              f"fused loss {c.fused_loss_bytes / 1e6:.2f} MB, ratio {c.ratio:,.0f}x")
    c = output_layer_comm(64000, 8, 4 * 4096)
    print("Exercise 9, V = 64000, t = 8, 4 x 4096 tokens:\n"
          f"  all-gather logits {c.gather_logits_bytes / 1e9:.3f} GB, fused loss "
          f"{c.fused_loss_bytes / 1e6:.3f} MB, ratio {c.ratio:,.0f}x")
    m = mlp_shards(1024, 4096, 4, 2048)
    print(f"Exercise 7, t = 4: A_i {m['A_i']}, B_i {m['B_i']}, forward all-reduce of "
          f"{m['all_reduce_numel']:,} elements")
    b, s, h = 1, 2048, 12288
    print(f"One GPT-3 layer (h = {h}), one sequence of {s} tokens, BF16 (lecture 5.6):")
    for t in (2, 4, 8):
        plain, sp = layer_comm(b, s, h, t), layer_comm(b, s, h, t, sequence_parallel=True)
        ratios = [comm_to_compute(b, s, h, t, 312e12, bw) for bw in (300e9, 25e9)]
        print(f"  t = {t}: {len(plain.collectives)} all-reduces of {b * s * h:,} elements, "
              f"{plain.bytes / 1e6:.0f} MB per rank (sequence parallel: {sp.bytes / 1e6:.0f} MB); "
              f"comm/compute on A100 {ratios[0]:.2f} (NVLink 300 GB/s), {ratios[1]:.1f} (IB 25 GB/s)")
    a = 96
    print(f"Activations of that layer at t = 8 (Korthikanti et al., a = {a} heads): "
          f"{activation_bytes_per_layer(s, b, h, a, 8) / 1e6:.0f} MB tensor parallel, "
          f"{activation_bytes_per_layer(s, b, h, a, 8, sequence_parallel=True) / 1e6:.0f} MB "
          "with sequence parallelism")


def main(argv: Sequence[str] | None = None) -> int:
    cli.parser("tp_comm", __doc__).parse_args(argv)
    _demo()
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run(main, "python -m minitorch.tp_comm"))
