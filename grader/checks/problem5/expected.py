"""The grader's own cost model (PARENT side only): every field of the estimate, term by term,
from the lecture's definitions (section 6) and the write-up's "The cost model", never taken from
the answer key. Exact integer arithmetic wherever the model's counts are whole numbers, so
memory that equals a limit is decided without rounding."""
from __future__ import annotations

from grader.checks.problem5.plans import MODEL_FIELDS, valid_plans

TIES = 1e-9  # best_plan: plans within this relative step time of the fastest are tied (the contract's)


def parameters(model: dict) -> int:
    """Weights and biases of the layers (attention, MLP, two layer norms) plus both embeddings."""
    layers, hidden, vocab, seq = model["layers"], model["hidden"], model["vocab"], model["seq_len"]
    return 12 * layers * hidden**2 + 13 * layers * hidden + (vocab + seq) * hidden


def reference(model: dict, cluster: dict, batch: int, t: int, p: int, microbatch: int,
              counts: tuple[int, int] | None = None) -> dict:
    """Every field of the estimate for a valid plan. ``counts`` (d, m) replaces the plan's own
    replicas and microbatches (the judges of memory and communication take the submission's,
    so a wrong microbatch count is judged once, by 5.1-compute-bubble)."""
    layers, hidden, heads, seq, vocab = (model[k] for k in MODEL_FIELDS)
    replicas = cluster["gpus"] // (t * p)
    microbatches = batch // (replicas * microbatch)
    if counts is not None:
        replicas, microbatches = counts
    # FLOPs of one step with recomputation: 4 passes of 24 b s h^2 per layer (matmuls), the
    # attention's 4 b s^2 h per layer per pass, and the output layer's 6 b s h V.
    flops = 96 * batch * seq * layers * hidden**2 + 16 * batch * seq**2 * layers * hidden + 6 * batch * seq * hidden * vocab
    flops_per_gpu = flops / cluster["gpus"]
    compute = flops_per_gpu / (cluster["peak_flops"] * cluster["efficiency"])
    tokens = microbatch * seq
    activation = 2 * tokens * hidden  # one 16-bit activation of a microbatch
    layers_per_stage = layers // p
    tensor_link = cluster["nvlink_bytes_per_s"] if t <= cluster["gpus_per_node"] else cluster["ib_bytes_per_s"]
    all_reduces = 6 * layers_per_stage * microbatches  # forward, recomputation, backward: 2 each
    boundary_bytes = 0 if p == 1 else 2 * microbatches * activation / t  # activation out, gradient back
    local_parameters = parameters(model) / (t * p)
    in_flight = min(p, microbatches)
    working_layer = tokens * hidden * (10 + 24 / t + 5 * heads * seq / (hidden * t))
    return {
        "t": t, "p": p, "d": replicas, "microbatches": microbatches,
        "flops_per_gpu": flops_per_gpu,
        "compute_s": compute,
        "bubble_s": compute * (p - 1) / microbatches,
        "tensor_parallel_s": all_reduces * ring(activation, t) / tensor_link,
        "pipeline_s": boundary_bytes / cluster["ib_bytes_per_s"],
        "data_parallel_s": ring(2 * local_parameters, replicas) / cluster["ib_bytes_per_s"],
        "state_bytes": 16 * local_parameters,
        "activation_bytes": in_flight * layers_per_stage * activation + working_layer,
        "memory_limit": float(cluster["memory_bytes"]),
    }


def ring(num_bytes: float, ranks: int) -> float:
    """What one GPU sends in a ring all-reduce of ``num_bytes`` among ``ranks`` GPUs."""
    return 2 * (ranks - 1) / ranks * num_bytes


def step(values: dict) -> float:
    return values["compute_s"] + values["bubble_s"] + values["tensor_parallel_s"] + values["pipeline_s"] + values["data_parallel_s"]


def memory(values: dict) -> float:
    return values["state_bytes"] + values["activation_bytes"]


def reference_plans(model: dict, cluster: dict, batch: int, microbatch: int) -> list[dict]:
    """Every valid plan's reference values, t-major."""
    return [reference(model, cluster, batch, t, p, microbatch) for t, p in valid_plans(model, cluster, batch, microbatch)]


def acceptable_best(plans: list[dict]) -> list[tuple[int, int]]:
    """The (t, p) best_plan may return: fitting, and within TIES of the fastest fitting plan."""
    fitting = [v for v in plans if memory(v) <= v["memory_limit"]]
    if not fitting:
        return []
    fastest = min(step(v) for v in fitting)
    return [(v["t"], v["p"]) for v in fitting if step(v) <= fastest * (1 + TIES)]
