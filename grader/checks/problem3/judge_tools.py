"""Problem 3's judging toolkit (parent side): reading the world sizes of an observation,
comparing tensors with the dense result within the contract's tolerance, and judging the
recorded collectives against a budget. Every failure is worded here or in a judge, in the
student's terms."""
from __future__ import annotations

import torch

from grader.checks.compare import max_difference
from grader.checks.judging import Fail, Malformed, expect_cases, expect_tensor

TOL = 1e-10  # float64: sharding only reorders sums
TOL32 = 1e-5  # float32 cases
SHARD = "that block"  # what a parameter is compared with in the shard checks
# Elements one rank moves in ring algorithms, per element of the collective.
VOLUME = {"all_reduce": lambda t: 2 * (t - 1) / t, "all_gather": lambda t: (t - 1) / t,
          "reduce_scatter": lambda t: (t - 1) / t, "all_to_all": lambda t: (t - 1) / t}
NO_PROCESS_GROUP = ("(with no process group, every communication op is the identity and calls no collective: "
                    "get_world_size() is 1)")


def world_sizes(observation, params: dict, what: str, default: tuple[int, ...]) -> dict[int, list]:
    """``{t: [rank values]}`` after checking the observation holds exactly the world sizes
    asked for; Fail naming what the student's code raised at the first t where it did."""
    sizes = [int(t) for t in params.get("world_sizes", default)]
    entries = expect_cases(observation, [{"t": t} for t in sizes], what)
    by_size = {}
    for t, entry in zip(sizes, entries):
        if "raised" in dict.keys(entry):
            raise Fail(f"your code raised {entry['raised']}\n{NO_PROCESS_GROUP}" if t == 1 else
                       f"t={t}: your code raised {entry['raised']}")
        ranks = entry["ranks"]
        if not isinstance(ranks, list) or len(ranks) != t:
            raise Malformed(f"{what}: the grader could not read what your code produced: t={t} did not hand back "
                            "one result per rank")
        by_size[t] = ranks
    return by_size


def multi_rank(params: dict, default: tuple[int, ...]) -> list[int]:
    """The world sizes with a process group, where the collectives are judged (t = 1 has none)."""
    return [t for t in params.get("world_sizes", default) if t > 1]


def tolerance(expected: torch.Tensor) -> float:
    return TOL32 if expected.dtype == torch.float32 else TOL


def close(actual, expected: torch.Tensor) -> bool:
    d = max_difference(actual, expected)
    return d is not None and d <= tolerance(expected) * (1 + expected.abs().max().item())


def expect(what: str, actual, expected: torch.Tensor, reference: str = "the dense single-process result") -> None:
    """``actual`` is a tensor of ``expected``'s shape and dtype, equal within the tolerance."""
    if actual is None:
        raise Fail(f"{what}: no value (None); expected a tensor of shape {tuple(expected.shape)}")
    expect_tensor(actual, what)
    if tuple(actual.shape) != tuple(expected.shape):
        raise Fail(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(actual.shape)}")
    if actual.dtype != expected.dtype:
        raise Fail(f"{what}: has dtype {str(actual.dtype).replace('torch.', '')}; the input and the parameters are "
                   f"{str(expected.dtype).replace('torch.', '')}, and so is the dense result")
    if not close(actual, expected):
        raise Fail(f"{what}: differs from {reference} by {max_difference(actual, expected):.3g} (max abs; "
                   f"tolerance {tolerance(expected):g} relative, in {str(expected.dtype).replace('torch.', '')})")


def expect_outcome(what: str, value, expected: torch.Tensor) -> None:
    """Like :func:`expect`, for a call whose exception was recorded (``{"raised": text}``)."""
    if isinstance(value, dict) and "raised" in value:
        raise Fail(f"{what}: your code raised {value['raised']}")
    expect(what, value, expected)


def expect_kind(what: str, kind, needs_grad: bool) -> None:
    """A result the contract says requires grad exactly when ``needs_grad`` (``ranks.kind``)."""
    if not isinstance(kind, dict) or kind.get("type") != "Tensor":
        raise Fail(f"{what}: expected a tensor, got {kind.get('type') if isinstance(kind, dict) else kind!r}")
    if kind["requires_grad"] != needs_grad:
        raise Fail(f"{what} {'does not require' if needs_grad else 'requires'} grad; " + (
            "it depends on a tensor that requires grad, so autograd must reach it" if needs_grad else
            "nothing it was computed from requires grad (or it was computed under torch.no_grad()), so neither "
            "may it: a result that requires grad where the dense one does not breaks the caller's next step"))


def expect_refused(what: str, raised: str) -> None:
    """Understanding: the call refuses (raises, any Exception); its type is 3.0-errors'."""
    if raised == "no exception":
        raise Fail(f"{what} must refuse (raise an exception); it returned normally")


def describe(log: list[dict]) -> str:
    if not log:
        return "no collective"
    return ", ".join(f"{c['kind']}{'(' + c['op'] + ')' if c['op'] and c['op'] != 'SUM' else ''}"
                     f" of {c['numel']} {c['dtype']}" for c in log)


def phase_log(log: list[dict], phase: str) -> list[dict]:
    return [c for c in log if c["phase"] == phase]


def moved(t: int, log: list[dict]) -> tuple[float, list[dict]]:
    """Elements one rank moves over ``log`` (ring algorithms), and the collectives of other kinds."""
    unknown = [c for c in log if c["kind"] not in VOLUME]
    return sum(VOLUME[c["kind"]](t) * c["numel"] for c in log if c["kind"] in VOLUME), unknown


def expect_collectives(what: str, log: list[dict], phase: str, expected: list[tuple[str, int]], why: str) -> None:
    """The collectives of ``phase`` must be exactly ``expected`` [(kind, numel)], in order."""
    got = phase_log(log, phase)
    if [(c["kind"], c["numel"]) for c in got] != expected:
        step = phase.rsplit(".", 1)[-1]
        want = (f"must communicate exactly {', '.join(f'{k} of {n}' for k, n in expected)}"
                if expected else "must not communicate")
        raise Fail(f"{what}: the {step} {want} ({why}); recorded {describe(got)}")


def expect_budget(what: str, t: int, log: list[dict], phase: str, budget: float, why: str,
                  direction: str = "forward") -> None:
    """The collectives of ``phase`` move at most ``budget`` elements per rank."""
    got = phase_log(log, phase)
    amount, unknown = moved(t, got)
    if unknown or amount > budget * (1 + 1e-9):
        raise Fail(f"{what}: the {direction} may move at most {budget:g} elements per rank ({why}); recorded "
                   f"{describe(got)}, which moves {amount:g}" + (f" plus {describe(unknown)}" if unknown else ""))
