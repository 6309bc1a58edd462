"""3.1-f-g, child side: ranks run f and g forward and backward on every case of
:func:`~grader.checks.problem3.cases.op_cases` (contiguous inputs), and on an input that does
not require grad, recording outputs, their kinds, input gradients and the collectives."""
from __future__ import annotations

from grader.checks.problem3 import cases, ranks, recorder


def operations(tp) -> dict:
    return {"f": tp.copy_to_tensor_model_parallel_region, "g": tp.reduce_from_tensor_model_parallel_region}


def rank_fg(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    result: dict = {"no_grad": {}}
    for label, data in cases.op_cases(seed, t):
        for name, op in operations(tp).items():
            x = data["x"] if name == "f" else data["x_r"][rank]
            result[f"{name} {label}"] = ranks.run_op(op, x, data["grad_r"][rank], f"{name} {label}")
    main = cases.activations(seed, t)
    for name, op in operations(tp).items():
        with recorder.Phase(f"{name} no-grad"):
            result["no_grad"][name] = ranks.kind(op(main["x"] if name == "f" else main["x_r"][rank]))
    result["log"] = recorder.taken()
    return result


def observe_fg(seed: int, params: dict):
    """Launches t = 2, 4 gloo ranks that run f and g forward and backward."""
    return ranks.observe(rank_fg, seed, params, cases.WORLD_SIZES)
