"""Hidden checks for Problem 5: the 3D-parallel estimate (5.1) and the search for a plan (5.2).

The parent judges every number against the grader's own cost model below, written term by
term from the lecture's definitions (section 6) and never taken from the answer key. Cases are
drawn from the seed: models, clusters and plans of every size the contract allows, tensor
parallelism inside and across nodes, one pipeline stage and one per layer, fewer microbatches
than stages. ``best_plan`` runs with the grader's estimate in place of the submitted one (the
contract says it ranks plans by this module's ``estimate``), so a mistake in 5.1 costs only
5.1's criteria; its cases include ones where no plan fits, ones where none is valid, and ones
where the fastest fitting plan is neither the first fitting one in any natural order nor a
power of two.
"""
from __future__ import annotations

import dataclasses
import math
import random

from grader.checks import Fail, expect_cases

RELATIVE = 1e-6  # the contract's tolerance per term
ZERO = 1e-9  # a zero term: within this share of the step time (or of the memory limit)
TIES = 1e-9  # best_plan: plans within this relative step time of the fastest are tied
MODEL_FIELDS = ("layers", "hidden", "heads", "seq_len", "vocab")
CLUSTER_FIELDS = ("gpus", "gpus_per_node", "peak_flops", "efficiency", "memory_bytes", "nvlink_bytes_per_s",
                  "ib_bytes_per_s")
INTEGER_FIELDS = ("t", "p", "d", "microbatches")
MEMORY_FIELDS = ("state_bytes", "activation_bytes", "memory_limit")
COMPUTE_FIELDS = ("flops_per_gpu", "compute_s", "bubble_s")
COMMUNICATION_FIELDS = ("tensor_parallel_s", "pipeline_s", "data_parallel_s")


# ---------------------------------------------------------------- the grader's own cost model


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _is_count(value) -> bool:
    return type(value) is int and value >= 1


def valid_plan(model: dict, cluster: dict, batch: int, t: int, p: int, microbatch: int) -> bool:
    """The contract's validity: t p divides the GPUs, p the layers, t the heads, and the batch
    splits into d equal shares of whole microbatches."""
    if not all(_is_count(v) for v in (batch, t, p, microbatch)) or cluster["gpus"] % (t * p):
        return False
    replicas = cluster["gpus"] // (t * p)
    return model["layers"] % p == 0 and model["heads"] % t == 0 and batch % (replicas * microbatch) == 0


def reference(model: dict, cluster: dict, batch: int, t: int, p: int, microbatch: int,
              counts: tuple[int, int] | None = None) -> dict:
    """Every field of the estimate for a valid plan, term by term. ``counts`` (d, m) replaces
    the plan's own replicas and microbatches (the judges of memory and communication take the
    submission's, so a wrong microbatch count is judged once, by 5.1-compute-bubble)."""
    layers, hidden, heads, seq, vocab = (model[k] for k in MODEL_FIELDS)
    gpus = cluster["gpus"]
    replicas = gpus // (t * p)
    microbatches = batch // (replicas * microbatch)
    if counts is not None:
        replicas, microbatches = counts
    # FLOPs of one step with recomputation: 4 passes of 24 b s h^2 per layer (matmuls), the
    # attention's 4 b s^2 h per layer per pass, and the output layer's 6 b s h V.
    matmuls = 96 * batch * seq * layers * hidden**2
    attention = 16 * batch * seq**2 * layers * hidden
    logits = 6 * batch * seq * hidden * vocab
    flops_per_gpu = (matmuls + attention + logits) / gpus
    compute = flops_per_gpu / (cluster["peak_flops"] * cluster["efficiency"])
    tokens = microbatch * seq
    activation_bytes = 2 * tokens * hidden  # one 16-bit activation of a microbatch
    layers_per_stage = layers // p
    within_node = t <= cluster["gpus_per_node"]
    tensor_link = cluster["nvlink_bytes_per_s"] if within_node else cluster["ib_bytes_per_s"]
    sent_per_all_reduce = activation_bytes * 2 * (t - 1) / t
    all_reduces = 6 * layers_per_stage * microbatches  # forward, recomputation, backward: 2 each
    boundary_bytes = 0 if p == 1 else 2 * microbatches * activation_bytes / t  # activation out, gradient back
    parameters = 12 * layers * hidden**2 + 13 * layers * hidden + (vocab + seq) * hidden
    local_parameters = parameters / (t * p)
    gradient_sent = 2 * local_parameters * 2 * (replicas - 1) / replicas
    in_flight = min(p, microbatches)
    working_layer = tokens * hidden * (10 + 24 / t + 5 * heads * seq / (hidden * t))
    return {
        "t": t, "p": p, "d": replicas, "microbatches": microbatches,
        "flops_per_gpu": flops_per_gpu,
        "compute_s": compute,
        "bubble_s": compute * (p - 1) / microbatches,
        "tensor_parallel_s": all_reduces * sent_per_all_reduce / tensor_link,
        "pipeline_s": boundary_bytes / cluster["ib_bytes_per_s"],
        "data_parallel_s": gradient_sent / cluster["ib_bytes_per_s"],
        "state_bytes": 16 * local_parameters,
        "activation_bytes": in_flight * layers_per_stage * activation_bytes + working_layer,
        "memory_limit": cluster["memory_bytes"],
    }


def _step(values: dict) -> float:
    return sum(values[k] for k in ("compute_s", "bubble_s", *COMMUNICATION_FIELDS))


def _memory(values: dict) -> float:
    return values["state_bytes"] + values["activation_bytes"]


def reference_plans(model: dict, cluster: dict, batch: int, microbatch: int) -> list[dict]:
    """Every valid plan's reference values, t-major."""
    return [reference(model, cluster, batch, t, p, microbatch)
            for t in _divisors(cluster["gpus"]) for p in _divisors(model["layers"])
            if valid_plan(model, cluster, batch, t, p, microbatch)]


def acceptable_best(plans: list[dict]) -> list[tuple[int, int]]:
    """The (t, p) best_plan may return: fitting, and within TIES of the fastest fitting plan."""
    fitting = [v for v in plans if _memory(v) <= v["memory_limit"]]
    if not fitting:
        return []
    fastest = min(_step(v) for v in fitting)
    return [(v["t"], v["p"]) for v in fitting if _step(v) <= fastest * (1 + TIES)]


# ---------------------------------------------------------------- hidden cases


def _random_model(rng: random.Random) -> dict:
    heads = rng.choice([4, 6, 8, 12, 16, 24, 32, 40, 48, 64])
    return {"layers": rng.choice([2, 4, 6, 8, 12, 16, 24, 32, 48, 64]), "hidden": heads * rng.choice([32, 64, 128]),
            "heads": heads, "seq_len": rng.choice([128, 512, 1024, 2048, 4096]), "vocab": rng.randint(1000, 260_000)}


def _random_cluster(rng: random.Random, nodes: int | None = None) -> dict:
    per_node = rng.choice([2, 4, 6, 8, 8, 16])
    return {"gpus": per_node * (nodes or rng.choice([1, 2, 4, 8])), "gpus_per_node": per_node,
            "peak_flops": rng.uniform(50e12, 1000e12), "efficiency": rng.uniform(0.3, 0.9),
            "memory_bytes": rng.uniform(8e9, 160e9), "nvlink_bytes_per_s": rng.uniform(100e9, 900e9),
            "ib_bytes_per_s": rng.uniform(10e9, 100e9)}


def _plan_case(rng: random.Random, want) -> dict | None:
    """A valid plan case whose (t, p, m) satisfies ``want(t, p, per_node, layers, m)``, or None."""
    model, cluster = _random_model(rng), _random_cluster(rng)
    choices = [(t, p) for t in _divisors(math.gcd(cluster["gpus"], model["heads"])) for p in _divisors(model["layers"])
               if cluster["gpus"] % (t * p) == 0]
    rng.shuffle(choices)
    for t, p in choices:
        microbatches = rng.choice([1, 2, 3, max(1, p - 1), p, 2 * p + 1, rng.randint(1, 64)])
        if want(t, p, cluster["gpus_per_node"], model["layers"], microbatches):
            microbatch = rng.choice([1, 1, 2, 4])
            batch = cluster["gpus"] // (t * p) * microbatch * microbatches
            return {"model": model, "cluster": cluster, "batch": batch, "t": t, "p": p, "microbatch": microbatch}
    return None


# What the plan cases must cover: (t, p, gpus per node, layers, microbatches) -> bool.
PLAN_KINDS = [
    lambda t, p, node, layers, m: t > node,  # tensor parallelism across nodes
    lambda t, p, node, layers, m: t == 1 and p == 1,
    lambda t, p, node, layers, m: p == layers and p > 1,
    lambda t, p, node, layers, m: 1 < m < p,  # fewer microbatches than stages
    lambda t, p, node, layers, m: t > 1 and p > 1 and m >= p,
]


def plan_cases(seed: int, count: int = 48) -> list[dict]:
    """Valid plans: every kind of PLAN_KINDS several times, then any."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        want = PLAN_KINDS[len(cases) % len(PLAN_KINDS)] if len(cases) < 4 * len(PLAN_KINDS) else (lambda *a: True)
        case = _plan_case(rng, want)
        if case is not None:
            cases.append(case)
    return cases


def _search_case(model: dict, cluster: dict, batch: int, microbatch: int) -> dict:
    return {"model": model, "cluster": cluster, "batch": batch, "microbatch": microbatch}


def _hard(scored: list[tuple[dict, float, float]], limit: float) -> dict | None:
    """The fastest fitting plan of ``scored`` ((plan, step, memory), t-major) when two or more
    fit, one is the fastest, and it is none of: the first fitting one t-major or p-major, the
    fastest ignoring memory, the smallest in memory. Else None."""
    fitting = [item for item in scored if item[2] <= limit]
    if len(fitting) < 2:
        return None
    fastest = min(step for _, step, _ in fitting)
    best = [plan for plan, step, _ in fitting if step <= fastest * (1 + TIES)]
    if len(best) != 1:
        return None
    shortcuts = [fitting[0], min(fitting, key=lambda item: (item[0]["p"], item[0]["t"])),
                 min(scored, key=lambda item: item[1]), min(fitting, key=lambda item: item[2])]
    return best[0] if all(best[0] is not plan for plan, _, _ in shortcuts) else None


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def search_cases(seed: int) -> list[dict]:
    """best_plan cases. Each draws a model, cluster and batch, then sets the cluster's memory
    between two plans' memory (never within 1e-3 of one: "fits" is not decided by rounding) to
    make: hard cases (see _hard), cases whose fastest fitting t is not a power of two, cases
    where nothing fits; plus one case with no valid plan."""
    rng = random.Random(seed + 5)
    wanted = {"hard": 7, "odd t": 3, "none fits": 2}
    found: dict[str, list[dict]] = {kind: [] for kind in wanted}
    for _ in range(300):
        if all(len(found[kind]) >= count for kind, count in wanted.items()):
            break
        model, cluster = _random_model(rng), _random_cluster(rng, nodes=rng.choice([1, 2, 3, 4]))
        microbatch = rng.choice([1, 2])
        batch = cluster["gpus"] * microbatch * rng.choice([1, 2, 3, 4, 8])
        scored = [(v, _step(v), _memory(v)) for v in reference_plans(model, cluster, batch, microbatch)]
        memories = sorted({memory for _, _, memory in scored})
        limits = [math.sqrt(low * high) for low, high in zip(memories, memories[1:]) if high > low * 1.002]
        rng.shuffle(limits)
        for limit in limits[:4]:
            best = _hard(scored, limit)
            kind = None if best is None else "hard" if _power_of_two(best["t"]) else "odd t"
            if kind and len(found[kind]) < wanted[kind]:
                found[kind].append(_search_case(model, {**cluster, "memory_bytes": limit}, batch, microbatch))
                break
        if memories and len(found["none fits"]) < wanted["none fits"] and rng.random() < 0.3:
            found["none fits"].append(_search_case(model, {**cluster, "memory_bytes": memories[0] * 0.9}, batch, microbatch))
    cases = [case for kind in wanted for case in found[kind]]
    model, cluster = _random_model(rng), _random_cluster(rng)
    cases.append(_search_case(model, cluster, 3, 2))  # no plan is valid: 2-sequence microbatches of 3
    return cases


def _unpacked(case: dict) -> dict:
    return {"model": case["model"], "cluster": case["cluster"], "batch": case["batch"], "microbatch": case["microbatch"]}


def describe(case: dict, call: str = "estimate") -> str:
    """The call a case stands for, in the student's terms."""
    model = ", ".join(f"{k}={case['model'][k]}" for k in MODEL_FIELDS)
    cluster = ", ".join(f"{k}={case['cluster'][k]:.4g}" for k in CLUSTER_FIELDS)
    plan = f", t={case['t']}, p={case['p']}" if "t" in case else ""
    return f"{call}(Model({model}), Cluster({cluster}), batch={case['batch']}{plan}, microbatch={case['microbatch']})"


# ---------------------------------------------------------------- in the child


def _student():
    from minitorch import pipeline

    return pipeline


def _objects(case: dict):
    from minitorch.cost_model import Cluster, Model

    return Model("hidden case", **case["model"]), Cluster(**case["cluster"])


def _plain_estimate(value, call: str) -> dict:
    """The fields of an Estimate the student returned, as plain numbers (no method of it run)."""
    from minitorch.cost_model import Estimate

    if not isinstance(value, Estimate):
        raise Fail(f"{call} returned {type(value).__name__} where a minitorch.cost_model.Estimate was expected")
    plain = {}
    for field in dataclasses.fields(Estimate):
        number = object.__getattribute__(value, field.name)
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise Fail(f"{call} returned an Estimate whose {field.name} is {type(number).__name__}, not a number")
        plain[field.name] = int(number) if isinstance(number, int) else float(number)
    return plain


def _key(index: int, case: dict) -> list:
    """What names a case in an observation: the parent regenerates the rest from the seed."""
    return [index, case["batch"], case.get("t"), case.get("p"), case["microbatch"]]


def _observe_estimates(seed: int) -> dict:
    student = _student()
    entries = []
    for index, case in enumerate(plan_cases(seed)):
        model, cluster = _objects(case)
        call = describe(case)
        try:
            result = student.estimate(model, cluster, case["batch"], case["t"], case["p"], case["microbatch"])
        except ValueError as error:
            raise Fail(f"{call} raised ValueError ({error}), but the plan is valid") from None
        entries.append({"case": _key(index, case), "estimate": _plain_estimate(result, call)})
    return {"plans": entries}


def observe_memory(seed: int, params: dict) -> dict:
    """The student's estimate of every hidden plan (judged on its memory fields)."""
    return _observe_estimates(seed)


def observe_compute_bubble(seed: int, params: dict) -> dict:
    """The student's estimate of every hidden plan (judged on d, m, FLOPs, compute, bubble)."""
    return _observe_estimates(seed)


def observe_communication(seed: int, params: dict) -> dict:
    """The student's estimate of every hidden plan (judged on the three communication terms)."""
    return _observe_estimates(seed)


def _grader_estimate(model, cluster, batch, t, p, microbatch=1):
    """The grader's estimate, as a module-level ``estimate`` of the student's file."""
    from minitorch.cost_model import Estimate

    plain_model = {k: getattr(model, k) for k in MODEL_FIELDS}
    plain_cluster = {k: getattr(cluster, k) for k in CLUSTER_FIELDS}
    if not valid_plan(plain_model, plain_cluster, batch, t, p, microbatch):
        raise ValueError(f"(t, p) = ({t!r}, {p!r}) is not a valid plan for batch {batch!r}, microbatch {microbatch!r}")
    return Estimate(**reference(plain_model, plain_cluster, batch, t, p, microbatch))


def observe_best_plan(seed: int, params: dict) -> dict:
    """The student's best_plan on the search cases, with the grader's estimate in its module."""
    student = _student()
    entries = []
    submitted = student.estimate
    student.estimate = _grader_estimate
    try:
        for index, case in enumerate(search_cases(seed)):
            model, cluster = _objects(case)
            call = describe(case, "best_plan")
            result = student.best_plan(model, cluster, case["batch"], case["microbatch"])
            chosen = None if result is None else _plain_estimate(result, call)
            entries.append({"case": _key(index, case), "plan": None if chosen is None else [chosen["t"], chosen["p"]]})
    finally:
        student.estimate = submitted
    return {"searches": entries}


def argument_cases(seed: int) -> list[list]:
    """[function, model, cluster, keyword arguments, what is wrong] for arguments the contract rejects."""
    rng = random.Random(seed + 9)
    model = {"layers": 12, "hidden": 768, "heads": 12, "seq_len": 1024, "vocab": 50_000}
    cluster = {"gpus": 16, "gpus_per_node": 8, "peak_flops": 312e12, "efficiency": 0.75, "memory_bytes": 80e9,
               "nvlink_bytes_per_s": 300e9, "ib_bytes_per_s": 25e9}
    good = {"batch": 32, "t": 2, "p": 2, "microbatch": 2}
    wrong = [
        ("t", 3, "t * p does not divide the GPUs"), ("p", 8, "t * p does not divide the GPUs"),
        ("p", 5, "p does not divide the layers"), ("t", 8, "t does not divide the heads"),
        ("batch", 20, "the batch does not split into d shares of whole microbatches"),
        ("microbatch", 3, "the batch does not split into d shares of whole microbatches"),
        ("t", 0, "t < 1"), ("p", -2, "p < 1"), ("microbatch", 0, "microbatch < 1"), ("batch", 0, "batch < 1"),
        ("t", True, "t is a bool"), ("p", 2.0, "p is a float"), ("batch", 32.0, "batch is a float"),
        ("microbatch", "2", "microbatch is a str"), ("t", None, "t is None"),
    ]
    rng.shuffle(wrong)
    cases = [["estimate", model, cluster, {**good, key: value}, why] for key, value, why in wrong]
    search = {"batch": 32, "microbatch": 2}
    for key, value, why in [("batch", 0, "batch < 1"), ("batch", True, "batch is a bool"),
                            ("microbatch", 0, "microbatch < 1"), ("microbatch", 1.5, "microbatch is a float")]:
        cases.append(["best_plan", model, cluster, {**search, key: value}, why])
    return cases


def observe_arguments(seed: int, params: dict) -> dict:
    """What estimate and best_plan raise for each argument case."""
    from minitorch.cost_model import Cluster, Model

    student = _student()
    entries = []
    for case in argument_cases(seed):
        name, model, cluster, arguments, _ = case
        try:
            getattr(student, name)(Model("argument case", **model), Cluster(**cluster), **arguments)
            raised = None
        except NotImplementedError:  # a stub: the harness says which one
            raise
        except Exception as error:  # any type: the judge says which one it was
            raised = "ValueError" if isinstance(error, ValueError) else type(error).__name__
        entries.append({"case": case, "raised": raised})
    return {"calls": entries}


# ---------------------------------------------------------------- in the parent


def _close(got, expected: float, scale: float) -> bool:
    if type(got) not in (int, float) or not math.isfinite(got):
        return False
    if expected == 0:
        return abs(got) <= ZERO * scale
    return abs(got - expected) <= RELATIVE * abs(expected)


def _counts(got: dict) -> tuple[int, int] | None:
    """The submission's (d, m) when they are whole numbers >= 1, else None (the grader's own)."""
    d, m = got["d"], got["microbatches"]
    if all(type(v) in (int, float) and math.isfinite(v) and v >= 1 and v == int(v) for v in (d, m)):
        return int(d), int(m)
    return None


def _judge_fields(params: dict, observation, fields: tuple, seed: int, own_counts: bool, what: str) -> None:
    cases = plan_cases(seed)
    entries = expect_cases(observation["plans"], [_key(i, case) for i, case in enumerate(cases)], what)
    for case, entry in zip(cases, entries):
        got = entry["estimate"]
        counts = _counts(got) if own_counts else None
        want = reference(case["model"], case["cluster"], case["batch"], case["t"], case["p"], case["microbatch"], counts)
        for field in fields:
            scale = want["memory_limit"] if field.endswith("bytes") or field == "memory_limit" else _step(want)
            if not _close(got[field], want[field], scale):
                given = f" (with your d = {counts[0]}, m = {counts[1]})" if counts else ""
                if field == "tensor_parallel_s":
                    node = case["cluster"]["gpus_per_node"]
                    given += f"; t = {case['t']} {'spans nodes' if case['t'] > node else 'fits in a node'} of {node} GPUs"
                raise Fail(f"{describe(case)}: {field} = {got[field]!r}, the cost model gives {want[field]:.6g}{given}; "
                           f"each term must be within relative {RELATIVE:g}")


def judge_memory(seed: int, params: dict, observation) -> None:
    _judge_fields(params, observation, MEMORY_FIELDS, seed, True, "estimate's memory")


def judge_compute_bubble(seed: int, params: dict, observation) -> None:
    cases = plan_cases(seed)
    keys = [_key(i, case) for i, case in enumerate(cases)]
    for case, entry in zip(cases, expect_cases(observation["plans"], keys, "estimate's compute and bubble")):
        want = reference(case["model"], case["cluster"], case["batch"], case["t"], case["p"], case["microbatch"])
        for field in INTEGER_FIELDS:
            if entry["estimate"][field] != want[field]:
                raise Fail(f"{describe(case)}: {field} = {entry['estimate'][field]!r}, expected {want[field]}")
    _judge_fields(params, observation, COMPUTE_FIELDS, seed, False, "estimate's compute and bubble")


def judge_communication(seed: int, params: dict, observation) -> None:
    _judge_fields(params, observation, COMMUNICATION_FIELDS, seed, True, "estimate's communication")


def judge_best_plan(seed: int, params: dict, observation) -> None:
    cases = search_cases(seed)
    keys = [_key(i, case) for i, case in enumerate(cases)]
    for case, entry in zip(cases, expect_cases(observation["searches"], keys, "best_plan")):
        plans = reference_plans(**_unpacked(case))
        best = acceptable_best(plans)
        chosen = entry["plan"]
        call = describe(case, "best_plan")
        if not best:
            reason = "no plan is valid" if not plans else f"none of the {len(plans)} valid plans fits"
            if chosen is not None:
                raise Fail(f"{call} returned t = {chosen[0]}, p = {chosen[1]}, but {reason}: expected None")
            continue
        fastest = next(v for v in plans if (v["t"], v["p"]) == best[0])
        expected = f"t = {fastest['t']}, p = {fastest['p']} ({_step(fastest):.4g} s, {_memory(fastest) / 1e9:.4g} GB)"
        if chosen is None:
            raise Fail(f"{call} returned None, but plans fit: the fastest valid plan that fits is {expected}")
        if not (isinstance(chosen, list) and len(chosen) == 2 and tuple(chosen) in best):
            mine = next((v for v in plans if [v["t"], v["p"]] == chosen), None)
            detail = "not a valid plan" if mine is None else (
                f"{_step(mine):.4g} s, {_memory(mine) / 1e9:.4g} GB"
                + ("" if _memory(mine) <= mine["memory_limit"] else ": does not fit"))
            raise Fail(f"{call} returned t = {chosen[0]}, p = {chosen[1]} ({detail}); the fastest valid plan that "
                       f"fits is {expected}")


def judge_arguments(seed: int, params: dict, observation) -> None:
    cases = argument_cases(seed)
    for case, entry in zip(cases, expect_cases(observation["calls"], cases, "argument errors")):
        name, _, _, arguments, why = case
        shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        if entry["raised"] != "ValueError":
            outcome = "returned normally" if entry["raised"] is None else f"raised {entry['raised']}"
            raise Fail(f"{name}(model, cluster, {shown}) {outcome}; expected ValueError at the call ({why})")
