"""2.1 ``clock_cycles``, child side: calls the student's schedule and records every wave as it
was handed out (its text, its values, the types it was made of), what the calls returned, and
the work done before a first wave. Judged in ``judge.py``."""
from __future__ import annotations

import itertools

from grader.checks.problem2.clock_cycles.cases import (
    ADMITTED_CASES,
    EDGE_WORK_CASES,
    INTERRUPTING_CASE,
    INVALID_CASES,
    SCHEDULE_CASES,
    SHOWN_CASE,
    SQUARE_WORK_CASES,
    TWIN_CASES,
    WORK_CUT_SECONDS,
    case_key,
)
from grader.checks.problem2.clock_cycles.work import work_before_first_wave
from grader.checks.problem2.recorded import error_message, error_text
from grader.checks.recording import integer_value

EXTRA_WAVES = 8  # waves taken past M + K - 1 before an endless schedule is cut off


def _pairs(wave) -> list | None:
    """``wave`` as plain ``[(i, j), ...]`` ints, or None when it is not a sequence of integer pairs."""
    try:
        pairs = [(integer_value(i), integer_value(j)) for i, j in wave]
    except (TypeError, ValueError):
        return None
    return None if any(None in pair for pair in pairs) else pairs


def _made_of(wave) -> dict:
    """The types a wave is made of: its own, its items' and their items' (type names)."""
    items = list(itertools.islice(wave, 64)) if isinstance(wave, (list, tuple)) else []
    elements = [element for item in items if isinstance(item, (list, tuple)) for element in item]
    return {"wave": type(wave).__name__, "pairs": sorted({type(item).__name__ for item in items}),
            "lengths": sorted({len(item) for item in items if isinstance(item, (list, tuple))}),
            "elements": sorted({type(element).__name__ for element in elements})}


def _take(produce, limit: int) -> dict:
    """Up to ``limit`` waves of what ``produce()`` returns: their text, pairs and types, the waves
    themselves, and the error (raised by the call or on the way)."""
    waves, texts, pairs, made_of, error = [], [], [], [], None
    try:
        for wave in itertools.islice(produce(), limit):
            waves.append(wave)
            texts.append(repr(wave)[:500])
            pairs.append(_pairs(wave))
            made_of.append(_made_of(wave))
    except NotImplementedError:
        raise
    except Exception as raised:  # noqa: BLE001 - judged with the case it belongs to (e.g. only M = 0)
        error = error_text(raised)
    return {"objects": waves, "waves": texts, "pairs": pairs, "made_of": made_of, "error": error}


def _run(clock_cycles, m, k) -> tuple[dict, list]:
    taken = _take(lambda: clock_cycles(m, k), int(m) + int(k) + EXTRA_WAVES)
    objects = taken.pop("objects")
    return {"case": case_key(m, k), **taken, "after": [repr(w)[:500] for w in objects]}, objects


def _observe_waves() -> dict:
    """Every (M, K) of SCHEDULE_CASES through the student's ``clock_cycles``: each wave as it
    was handed out, the same waves once the iteration is over (a list reused for every wave
    shows there); the shown case again with another call run after its first wave; whether
    its waves are new objects on every call; and what it yields after a caller changed every
    wave it was given."""
    from minitorch.pipeline import clock_cycles

    runs, objects = [], {}
    for m, k in SCHEDULE_CASES:
        run, objects[m, k] = _run(clock_cycles, m, k)
        runs.append(run)
    m, k = SHOWN_CASE
    started: list = []

    def start():  # one iterator, taken from twice (a list returned instead would start again)
        started.append(iter(clock_cycles(m, k)))
        return started[0]

    first = _take(start, 1)
    _take(lambda: clock_cycles(*INTERRUPTING_CASE), 12)
    rest = _take(lambda: started[0] if started else iter(()), m + k + EXTRA_WAVES)
    fresh = first.pop("objects") + rest.pop("objects")
    interleaved = {key: first[key] + rest[key] for key in ("waves", "pairs", "made_of")}
    interleaved["error"] = first["error"] or rest["error"]
    shared = any(any(wave is old for old in objects[SHOWN_CASE]) for wave in fresh)
    for wave in [*objects[SHOWN_CASE], *fresh]:  # the caller's to change: the next call must not see it
        if isinstance(wave, list):
            wave.append((-1, -1))
    again, _ = _run(clock_cycles, m, k)
    try:
        produced = clock_cycles(*SHOWN_CASE)
        iterator = hasattr(produced, "__next__") and iter(produced) is produced
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 - the runs above say what it raised
        produced, iterator = None, False
    return {"runs": runs, "iterator": iterator, "type": type(produced).__name__, "interleaved": interleaved,
            "shared_across_calls": shared, "after_changes": again}


def observe_schedule(seed: int, params: dict):
    """Drives the student's ``clock_cycles`` over every (M, K) of SCHEDULE_CASES and records each wave."""
    return _observe_waves()


def observe_stage_order(seed: int, params: dict):
    """The same calls as 2.1-schedule; judged on the order of the pairs inside each wave."""
    return _observe_waves()


def observe_generator(seed: int, params: dict):
    """The same calls as 2.1-schedule, and the work done before the first wave at lopsided and square sizes."""
    from minitorch.pipeline import clock_cycles

    observation = _observe_waves()
    observation["work"] = work_before_first_wave(clock_cycles, EDGE_WORK_CASES, SQUARE_WORK_CASES, WORK_CUT_SECONDS)
    return observation


def observe_no_microbatches(seed: int, params: dict):
    """The same calls as 2.1-schedule, including M = 0 with K = 1..5."""
    return _observe_waves()


def _bad_call(clock_cycles, m, k) -> dict:
    """What ``clock_cycles(m, k)`` did with arguments the contract rejects: raised at the call or
    on the first ``next`` (and what), or yielded."""
    entry = {"case": case_key(m, k)}
    try:
        produced = clock_cycles(m, k)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - the type is what is graded
        return {**entry, "when": "call", "error": type(error).__name__, "message": error_message(error)}
    try:
        first = next(iter(produced))
    except NotImplementedError:
        raise
    except StopIteration:
        return {**entry, "when": "next", "error": None, "message": "yielded nothing"}
    except Exception as error:  # noqa: BLE001
        return {**entry, "when": "next", "error": type(error).__name__, "message": error_message(error)}
    return {**entry, "when": "next", "error": None, "message": f"yielded {first!r}"[:300]}


def observe_errors(seed: int, params: dict):
    """The arguments the contract admits besides Python ints (NumPy integers: their waves), then
    every invalid (M, K), each after a valid call equal to it (what it raised, and when)."""
    from minitorch.pipeline import clock_cycles

    admitted = []
    for m, k in ADMITTED_CASES:
        admitted.append({**_run(clock_cycles, m, k)[0], "as_ints": _run(clock_cycles, int(m), int(k))[0]})
    for m, k in TWIN_CASES:
        _take(lambda m=m, k=k: clock_cycles(m, k), m + k + EXTRA_WAVES)
    rejected = [_bad_call(clock_cycles, m, k) for m, k in INVALID_CASES]
    return {"admitted": admitted, "rejected": rejected}
