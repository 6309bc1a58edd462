"""2.1 ``clock_cycles``, parent side: the waves against the grader's own schedule, and the
conventions (stage order, a lazy generator of new lists of int pairs, M = 0, the arguments),
each its own criterion so that one slip costs one point. Observed in ``observe.py``."""
from __future__ import annotations

from grader.checks.judging import Fail, Malformed, expect_cases
from grader.checks.problem2.clock_cycles.cases import (
    ADMITTED_CASES,
    EDGE_WORK_CASES,
    INTERRUPTING_CASE,
    INVALID_CASES,
    SCHEDULE_CASES,
    SHOWN_CASE,
    SQUARE_WORK_CASES,
    case_key,
)
from grader.checks.problem2.expected import gpipe_waves

# Laziness: the first wave's work at M = K = 2048 may be at most WORK_RATIO times the sum of that
# at (2048, 1) and at (1, 2048), and at least WORK_FLOOR seconds (below which CPU clocks are
# noise). Work that grows with M + K measures about the same at both; a schedule built whole, in
# Python, torch or numpy, 1,000 times more (a torch grid, the cheapest, 15 times the limit).
WORK_RATIO = 20
WORK_FLOOR = 2e-3


def _call(case) -> str:
    return f"clock_cycles({case[0]}, {case[1]})"


def _schedule_runs(observation) -> list:
    """The runs, after checking they are exactly the (M, K) the grader asked for."""
    return expect_cases(observation["runs"], [case_key(m, k) for m, k in SCHEDULE_CASES], "clock_cycles")


def _runs(observation, microbatches: bool, judge_errors: bool = True):
    """The runs with M >= 1 (``microbatches``) or with M == 0, as (call, expected waves, run).
    A run that raised is a Fail when ``judge_errors`` (the criterion of those cases), else left
    out (a convention's criterion does not pay again for a wrong schedule)."""
    for (m, k), run in zip(SCHEDULE_CASES, _schedule_runs(observation)):
        if (m >= 1) != microbatches or (run["error"] is not None and not judge_errors):
            continue
        call, expected = _call((m, k)), gpipe_waves(m, k)
        if run["error"] is not None:
            after = f" after yielding {len(run['waves'])} waves" if run["waves"] else ""
            raise Fail(f"{call} raised {run['error']}{after}; expected {len(expected)} waves" +
                       ("" if microbatches else " (none: M = 0 is valid and has no microbatches)"))
        yield call, expected, run


def _no_wave_at_all(observation) -> None:
    """Fail when no call with microbatches yielded anything (a criterion must not pass on nothing)."""
    if not any(run["waves"] for _, _, run in _runs(observation, microbatches=True, judge_errors=False)):
        raise Fail(f"{_call(SHOWN_CASE)} yielded no wave (nor did any other call with M >= 1); see 2.1-schedule")


def _pair_set(pairs) -> list[tuple[int, int]]:
    """A wave's pairs as sorted tuples (an observation may carry them as lists)."""
    return sorted(tuple(pair) for pair in pairs)


def _pair_sets(waves) -> list:
    """Every wave's pairs as :func:`_pair_set` (None for a wave that is not pairs)."""
    return [None if wave is None else _pair_set(wave) for wave in waves]


def _same_waves(call: str, expected: list, run) -> None:
    """Fail unless ``run`` yielded the expected pairs wave by wave (in any order inside a wave)."""
    if run["error"] is not None:
        raise Fail(f"{call} raised {run['error']}; expected {len(expected)} waves")
    got, pairs = run["waves"], run["pairs"]
    for index, (want, have, text) in enumerate(zip(expected, pairs, got)):
        if have is None:
            raise Fail(f"{call}, wave {index} is {text}; expected a list of (microbatch, stage) pairs such as {want}")
        if _pair_set(have) != _pair_set(want):
            raise Fail(f"{call}, wave {index}: expected the pairs {want} (in any order), got {text} "
                       "(each pair in the earliest clock cycle it can run in)")
    if len(got) < len(expected):
        raise Fail(f"{call} yielded {len(got)} waves; expected M + K - 1 = {len(expected)} "
                   f"(missing wave {len(got)}: {expected[len(got)]})")
    if len(got) > len(expected):
        raise Fail(f"{call} yielded {len(got)} waves or more; expected M + K - 1 = {len(expected)}; "
                   f"wave {len(expected)} was {got[len(expected)]}")


def judge_schedule(seed: int, params: dict, observation) -> None:
    """The right pairs in the right waves for every M >= 1 (the order inside a wave is 2.1-stage-order),
    also for a call whose iteration is interrupted by another call."""
    interleaved = (f"{_call(SHOWN_CASE)} with a whole {_call(INTERRUPTING_CASE)} run after its first wave",
                   gpipe_waves(*SHOWN_CASE), observation["interleaved"])
    for call, expected, run in [*_runs(observation, microbatches=True), interleaved]:
        _same_waves(call, expected, run)


def judge_stage_order(seed: int, params: dict, observation) -> None:
    """Inside every wave the pairs come by increasing stage j, as the Pipe submits them."""
    _no_wave_at_all(observation)
    ordered = 0
    for call, _, run in _runs(observation, microbatches=True, judge_errors=False):
        for index, (pairs, text) in enumerate(zip(run["pairs"], run["waves"])):
            if pairs is None or len(pairs) < 2:
                continue
            stages = [pair[1] for pair in pairs]
            if stages != sorted(stages):
                raise Fail(f"{call}, wave {index} is {text}: not ordered by increasing stage; expected "
                           f"{sorted(pairs, key=lambda p: p[1])} (list a wave by stage: stage 0 first, then 1, ...)")
            ordered += 1
    if not ordered:
        raise Fail("no wave held two or more (microbatch, stage) pairs to order; see 2.1-schedule")


def judge_generator(seed: int, params: dict, observation) -> None:
    """A lazy generator (an iterator, not a list) that yields each wave as a list of its own, of
    (int, int) tuples, new on every call."""
    call = _call(SHOWN_CASE)
    if not observation["iterator"]:
        raise Fail(f"{call} returned a {observation['type']}; expected a generator (write it with yield, one "
                   "wave at a time, so a Pipe can start wave 0 before the rest is computed)")
    _no_wave_at_all(observation)
    if observation["shared_across_calls"]:  # before laziness: a cache is also built eagerly, once
        raise Fail(f"{call} called twice yielded the same list objects both times (cached waves?): a caller that "
                   "changes its waves would change the next caller's. Yield new lists on every call")
    again = observation["after_changes"]
    first = next(run for (m, k), run in zip(SCHEDULE_CASES, _schedule_runs(observation)) if (m, k) == SHOWN_CASE)
    if again["error"] is None and first["error"] is None and _pair_sets(again["pairs"]) != _pair_sets(first["pairs"]):
        raise Fail(f"the caller appended (-1, -1) to every wave {call} gave it; the next {call} yielded "
                   f"{', '.join(again['waves'][:3])}, ...: waves kept across calls (a cache?) hand one caller's "
                   "changes to the next. Each call must start afresh")
    _judge_work(observation["work"])
    for call_text, _, run in _runs(observation, microbatches=True, judge_errors=False):
        _judge_kinds(call_text, run)


def _judge_kinds(call: str, run) -> None:
    """Each wave a list of its own, of (int, int) tuples."""
    for index, (made_of, text) in enumerate(zip(run["made_of"], run["waves"])):
        where = f"{call}, wave {index} is {text[:80]}"
        if made_of["wave"] != "list":
            raise Fail(f"{where}, a {made_of['wave']}; expected each wave as a list")
        if made_of["pairs"] not in ([], ["tuple"]) or made_of["lengths"] not in ([], [2]):
            raise Fail(f"{where}: its pairs are {', '.join(made_of['pairs'])}; expected (microbatch, stage) tuples "
                       "of two ints, such as (0, 1)")
        if made_of["elements"] not in ([], ["int"]):
            raise Fail(f"{where}: its pairs hold {', '.join(made_of['elements'])} values; expected Python ints")
    for index, (then, now) in enumerate(zip(run["waves"], run["after"])):
        if then != now:
            raise Fail(f"{call}: wave {index} was {then} when it was yielded and {now} once the iteration was over: "
                       "the same list object is reused for every wave, so list(clock_cycles(...)) repeats the last "
                       "one. Yield a new list for each wave")


def _measured(entries, asked: list, complete: bool) -> list:
    """The work measurements of ``asked``: all of them, or (``complete`` False) a prefix that
    ends with one cut off (the child stops measuring there)."""
    if not complete and isinstance(entries, list) and entries and entries[-1]["cut"] is True:
        asked = asked[: len(entries)]
    measured = expect_cases(entries, [[m, k] for m, k in asked], "clock_cycles' work before its first wave")
    for entry in measured:
        if type(entry["seconds"]) is not float or entry["seconds"] < 0:
            raise Malformed("clock_cycles' work before its first wave: the grader could not read what it measured")
    return measured


def _judge_work(work) -> None:
    """Fail when the first wave's work grows with M * K (a schedule built whole, in any form)."""
    edges = _measured(work["edges"], EDGE_WORK_CASES, complete=True)
    squares = _measured(work["squares"], SQUARE_WORK_CASES, complete=False)
    for entry in [*edges, *squares]:
        if entry["error"] is not None:
            raise Fail(f"{_call(entry['case'])} raised {entry['error']} before its first wave; expected the wave "
                       f"[(0, 0)] (a generator computes each wave when it is asked for)")
    tall, wide = edges[:2], edges[2:]
    base = min(entry["seconds"] for entry in tall) + min(entry["seconds"] for entry in wide)
    square = squares[-1] if squares[-1]["cut"] else min(squares, key=lambda entry: entry["seconds"])
    if square["cut"] or square["seconds"] > max(WORK_RATIO * base, WORK_FLOOR):
        took = f"more than {square['seconds']:.1f} s" if square["cut"] else f"{square['seconds'] * 1e3:.0f} ms"
        raise Fail(
            f"{_call(square['case'])} took {took} of CPU time before its first wave [(0, 0)], against "
            f"{base * 1e3:.3f} ms for {_call(tall[0]['case'])} and {_call(wide[0]['case'])} together (the grader "
            f"allows {WORK_RATIO} times that): its work grows with M * K, not with M + K, so pairs of every wave "
            "were computed before the first wave was handed out (in Python, torch or numpy alike). A generator "
            "computes each wave when it is asked for"
        )


def judge_no_microbatches(seed: int, params: dict, observation) -> None:
    """M = 0 yields no wave at all (not K - 1 empty ones)."""
    _no_wave_at_all(observation)
    for call, _, run in _runs(observation, microbatches=False):
        if run["waves"]:
            shown = ", ".join(run["waves"][:4]) + (", ..." if len(run["waves"]) > 4 else "")
            raise Fail(f"{call} yielded {len(run['waves'])} wave{'s' * (len(run['waves']) != 1)} ({shown}); expected "
                       "none: with no microbatches there is nothing to schedule, not K - 1 empty waves")


def judge_errors(seed: int, params: dict, observation) -> None:
    """NumPy integers are admitted (the same waves, of Python ints); every invalid (M, K) raises
    ValueError at the call or on the first next (a generator function raises there, a wrapper
    that checks first raises at the call: both are right), even after a valid call equal to it."""
    admitted = expect_cases(observation["admitted"], [case_key(m, k) for m, k in ADMITTED_CASES],
                            "clock_cycles with NumPy integers")
    for (m, k), run in zip(ADMITTED_CASES, admitted):
        call, as_ints = f"clock_cycles({m!r}, {k!r})", f"clock_cycles({int(m)}, {int(k)})"
        if run["error"] is not None and run["as_ints"]["error"] is None:
            raise Fail(f"{call} raised {run['error']}; NumPy integers are ints to the contract: expected the "
                       f"waves of {as_ints}")
        if _pair_sets(run["pairs"]) != _pair_sets(run["as_ints"]["pairs"]):  # the waves themselves are 2.1-schedule's
            raise Fail(f"{call} yielded {', '.join(run['waves'][:4])}, ...; {as_ints} yielded "
                       f"{', '.join(run['as_ints']['waves'][:4])}, ...: NumPy integers are ints to the contract")
        for index, made_of in enumerate(run["made_of"]):
            if made_of["elements"] not in ([], ["int"]):
                raise Fail(f"{call}, wave {index} is {run['waves'][index][:80]}: its pairs hold "
                           f"{', '.join(made_of['elements'])} values; expected Python ints whatever the arguments' type")
    rejected = expect_cases(observation["rejected"], [case_key(m, k) for m, k in INVALID_CASES],
                            "clock_cycles with bad arguments")
    for result in rejected:
        call = _call(result["case"])
        if result["error"] is None:
            raise Fail(f"{call} must raise ValueError (an argument that is not an int, num_microbatches < 0 or "
                       f"num_stages < 1), also right after a valid call equal to it; it {result['message']}")
        if result["error"] != "ValueError":
            raise Fail(f"{call} raised {result['error']}: {result['message']}; expected ValueError")
