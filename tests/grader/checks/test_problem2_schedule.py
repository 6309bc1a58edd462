"""The 2.1 checks (grader/checks/problem2/clock_cycles/), in process along the grader's path: each
wrong schedule fails the criterion of its mistake, and only that one, saying what went wrong;
correct schedules written another way keep every point."""
from __future__ import annotations

import functools
import itertools
import numbers
import time

import pytest
import torch
from problem2_helpers import SEED, fails, patcher, right_waves, run

from grader.checks.judging import Fail, observed
from grader.checks.problem2.clock_cycles import judge, observe

SCHEDULE_CRITERIA = ("schedule", "stage_order", "generator", "no_microbatches")


@pytest.fixture
def student(monkeypatch):
    return patcher(monkeypatch)


def only_fails(student, clock_cycles, failing: str, match: str, make=None) -> None:
    """``clock_cycles`` fails the check ``failing`` (saying ``match``) and passes the other schedule
    checks. With ``make``, each check gets a new ``make()`` (its own cache, as each criterion's child has)."""
    for name in SCHEDULE_CRITERIA:
        student("clock_cycles", make() if make else clock_cycles)
        if name == failing:
            fails(name, match)
        else:
            run(name)


def checked(clock_cycles, integer=numbers.Integral):
    """``clock_cycles`` behind the contract's argument checks (so 2.1-errors passes), ints being
    instances of ``integer``."""
    def wrapper(m, k):
        for value in (m, k):
            if isinstance(value, bool) or not isinstance(value, integer):
                raise ValueError("not an int")
        if m < 0 or k < 1:
            raise ValueError("bad sizes")
        return clock_cycles(int(m), int(k))
    return wrapper


def test_a_missing_last_wave_fails_the_schedule(student):
    student("clock_cycles", lambda m, k: iter(list(right_waves(m, k))[:-1]))
    fails("schedule", "yielded .* waves; expected M \\+ K - 1")


def test_the_wrong_exception_type_fails_the_errors_check(student):
    def clock_cycles(m, k):
        if m < 0 or k < 1:
            raise TypeError("bad sizes")
        yield from right_waves(m, k)

    student("clock_cycles", clock_cycles)
    fails("errors", "raised TypeError: bad sizes; expected ValueError")


def test_stages_listed_descending_fail_only_the_stage_order(student):
    def clock_cycles(m, k):
        yield from (wave[::-1] for wave in right_waves(m, k))

    only_fails(student, clock_cycles, "stage_order", r"clock_cycles\(2, 2\), wave 1 is \[\(0, 1\), \(1, 0\)\]: not ordered")


def test_a_list_fails_only_the_generator(student):
    only_fails(student, lambda m, k: list(right_waves(m, k)), "generator", "returned a list; expected a generator")


def test_one_shared_list_fails_only_the_generator(student):
    def clock_cycles(m, k):
        shared: list = []
        for wave in right_waves(m, k):
            shared[:] = wave
            yield shared

    only_fails(student, clock_cycles, "generator", "the same list object is reused for every wave")


def test_empty_waves_without_microbatches_fail_only_that_criterion(student):
    def clock_cycles(m, k):
        yield from (right_waves(m, k) if m else [[] for _ in range(k - 1)])

    only_fails(student, clock_cycles, "no_microbatches", r"clock_cycles\(0, 2\) yielded 1 wave \(\[\]\); expected none")


def test_a_value_error_for_no_microbatches_fails_only_that_criterion(student):
    def clock_cycles(m, k):
        if m < 1:
            raise ValueError("M must be >= 1")
        yield from right_waves(m, k)

    only_fails(student, clock_cycles, "no_microbatches", r"clock_cycles\(0, 1\) raised ValueError: M must be >= 1")


def test_a_function_that_raises_at_the_call_for_no_microbatches_costs_that_criterion_only(student):
    def clock_cycles(m, k):
        if m < 1:
            raise ValueError("M must be >= 1")
        return right_waves(m, k)

    only_fails(student, clock_cycles, "no_microbatches", r"clock_cycles\(0, 1\) raised ValueError")


def test_nothing_yielded_passes_no_convention(student):
    student("clock_cycles", lambda m, k: iter(()))
    for name in SCHEDULE_CRITERIA:
        with pytest.raises(Fail):
            run(name)


def test_eager_and_lazy_value_errors_both_pass(student):
    student("clock_cycles", checked(right_waves))
    run("errors")


def test_a_forged_observation_with_only_no_microbatches_fails_the_schedule(student):
    observation = observe.observe_schedule(SEED, {})
    observation["runs"] = [run for run in observation["runs"] if run["case"][0] == "0"]
    with pytest.raises(Fail, match="asked for"):
        judge.judge_schedule(SEED, {}, observed(observation))


def test_waves_as_generator_expressions_fail_only_the_generator(student):
    def clock_cycles(m, k):
        yield from ((pair for pair in wave) for wave in right_waves(m, k))

    only_fails(student, clock_cycles, "generator", "a generator; expected each wave as a list")


@pytest.mark.parametrize("kind, match", [(list, "its pairs are list; expected"), (float, "its pairs hold float, int values")])
def test_pairs_of_another_type_fail_only_the_generator(student, kind, match):
    def clock_cycles(m, k):
        for wave in right_waves(m, k):
            yield [list(pair) if kind is list else (float(pair[0]), pair[1]) for pair in wave]

    only_fails(student, clock_cycles, "generator", match)


# ---- laziness: the work before the first wave, against M * K


def every_wave_first(m, k):
    """Every wave in a list before the first is handed out: lists of tuples built in Python."""
    yield from list(right_waves(m, k))


def every_pair_first(m, k):
    """Every pair made by a C-level builder (itertools.product), grouped by wave, then handed out."""
    by_wave: dict = {}
    for i, j in itertools.product(range(m), range(k)):
        by_wave.setdefault(i + j, []).append((i, j))
    for wave in sorted(by_wave):
        yield sorted(by_wave[wave], key=lambda pair: pair[1])


def every_wave_thrown_away_first(m, k):
    """Every wave computed and thrown away (to count them) before the first is handed out: no memory held."""
    waves = sum(1 for _ in right_waves(m, k))
    yield from itertools.islice(right_waves(m, k), waves)


def schedule_in_torch(m, k):
    """Every pair as a torch tensor, the waves read off it one by one: the memory is torch's, not Python's."""
    grid = torch.arange(m)[:, None] + torch.arange(k)
    for wave in range(m + k - 1 if m else 0):
        found = (grid == wave).nonzero().flip(0).tolist()
        yield [(int(i), int(j)) for i, j in found]


def every_pair_scanned_per_wave(m, k):
    """Each wave found by scanning all M * K pairs when it is asked for: its work grows with M * K."""
    for wave in range(m + k - 1 if m else 0):
        yield [(i, j) for j in range(k) for i in range(m) if i + j == wave]


@functools.cache
def _whole(m, k):
    return tuple(tuple(wave) for wave in right_waves(m, k))


def cached_schedule(m, k):
    """The whole schedule built once per size and cached: repeated calls are fast, the first is not."""
    for wave in _whole(m, k):
        yield list(wave)


@pytest.mark.parametrize("clock_cycles", [every_wave_first, every_pair_first, every_wave_thrown_away_first,
                                          schedule_in_torch, every_pair_scanned_per_wave, cached_schedule],
                         ids=lambda f: f.__name__)
def test_work_before_the_first_wave_that_grows_with_m_times_k_fails_only_the_generator(student, clock_cycles):
    only_fails(student, clock_cycles, "generator",
               r"clock_cycles\(204\d, 204\d\) took .* of CPU time before its first wave .* grows with M \* K")


def microbatches_listed_first(m, k):
    """O(M) state made before the first wave (a list of the microbatches): lazy all the same."""
    microbatches = [{"index": i, "stage": -1} for i in range(m)]
    for wave in range(m + k - 1 if m else 0):
        yield [(microbatches[wave - j]["index"], j) for j in range(max(0, wave - m + 1), min(wave, k - 1) + 1)]


def stages_simulated(m, k):
    """A simulation, one queue per stage, microbatches moving one stage per cycle: O(M + K) state."""
    queues = [list(range(m))] + [[] for _ in range(k - 1)]
    while any(queues):
        wave = [(queue[0], j) for j, queue in enumerate(queues) if queue]
        for i, j in wave:
            queues[j].pop(0)
            if j + 1 < k:
                queues[j + 1].append(i)
        yield wave


@pytest.mark.parametrize("clock_cycles", [microbatches_listed_first, stages_simulated], ids=lambda f: f.__name__)
def test_lazy_generators_with_state_pass_every_check(student, clock_cycles):
    student("clock_cycles", checked(clock_cycles))
    for name in (*SCHEDULE_CRITERIA, "errors"):
        run(name)


def test_laziness_does_not_depend_on_the_wall_clock(student, monkeypatch):
    """The verdict is the same however slow the machine seems: every clock reading is 1 s after the last."""
    now = iter(itertools.count(start=1000.0, step=1.0))
    for name in ("perf_counter", "monotonic", "time", "process_time"):
        monkeypatch.setattr(time, name, lambda: next(now))
    run("generator")
    student("clock_cycles", every_wave_first)
    fails("generator", r"grows with M \* K")


def test_an_eager_build_that_raises_still_fails_the_generator(student):
    def clock_cycles(m, k):
        if m * k > 100_000:
            raise MemoryError("too many pairs")
        yield from every_wave_first(m, k)

    student("clock_cycles", clock_cycles)
    fails("generator", r"clock_cycles\(2048, 2048\) raised MemoryError: too many pairs before its first wave")


def test_a_forged_work_measurement_fails_the_generator(student):
    observation = observe.observe_generator(SEED, {})
    observation["work"]["squares"][0]["case"] = [4, 4]
    with pytest.raises(Fail, match="asked for"):
        judge.judge_generator(SEED, {}, observed(observation))


@pytest.mark.parametrize("square, verdict", [(0.015, "passes"), (0.05, "fails"), (0.0015, "passes")])
def test_the_work_limit_is_twenty_times_the_lopsided_sizes_and_at_least_two_milliseconds(square, verdict):
    edges = [{"case": list(case), "seconds": 0.0005, "cut": False, "error": None} for case in judge.EDGE_WORK_CASES]
    squares = [{"case": list(case), "seconds": square, "cut": False, "error": None} for case in judge.SQUARE_WORK_CASES]
    if verdict == "passes":
        judge._judge_work(observed({"edges": edges, "squares": squares}))
    else:
        with pytest.raises(Fail, match="50 ms of CPU time"):
            judge._judge_work(observed({"edges": edges, "squares": squares}))


# ---- state across calls, and the waves handed out


def caching_schedules():
    cache: dict = {}

    def clock_cycles(m, k):
        if (m, k) not in cache:
            cache[m, k] = list(right_waves(m, k)) if m * k < 1000 else None
        yield from cache[m, k] if cache[m, k] is not None else right_waves(m, k)

    return clock_cycles


def caching_waves():
    @functools.cache
    def wave(number, m, k):
        return [(number - j, j) for j in range(max(0, number - m + 1), min(number, k - 1) + 1)]

    def clock_cycles(m, k):
        for number in range(m + k - 1 if m else 0):
            yield wave(number, m, k)

    return clock_cycles


@pytest.mark.parametrize("make", [caching_schedules, caching_waves], ids=lambda f: f.__name__)
def test_waves_cached_across_calls_hand_the_callers_own_lists_out_and_fail_only_the_generator(student, make):
    only_fails(student, None, "generator", "same list objects both times", make=make)


def test_a_cache_that_copies_what_it_hands_out_still_fails_when_the_caller_changed_its_waves(student):
    cache: dict = {}

    def clock_cycles(m, k):
        if (m, k) not in cache:
            cache[m, k] = [[*wave] for wave in right_waves(m, k)]
            yield from cache[m, k]  # the first call hands out the cached lists themselves
        else:
            yield from ([*wave] for wave in cache[m, k])

    student("clock_cycles", clock_cycles)
    fails("generator", r"the caller appended \(-1, -1\) to every wave clock_cycles\(3, 3\) gave it; the next "
                       r"clock_cycles\(3, 3\) yielded \[\(0, 0\), \(-1, -1\)\]")


def test_a_schedule_kept_in_module_state_fails_the_schedule(student):
    state: dict = {}

    def clock_cycles(m, k):
        state["m"], state["k"] = m, k  # read again at every wave: another call in between changes it
        for wave in range(m + k - 1 if m else 0):
            waves = list(right_waves(state["m"], state["k"]))
            yield waves[wave] if wave < len(waves) else []

    student("clock_cycles", clock_cycles)
    fails("schedule", r"clock_cycles\(3, 3\) with a whole clock_cycles\(4, 2\) run after its first wave")


# ---- the arguments: NumPy integers admitted, the rest ValueError, every call


def test_accepting_bools_fails_only_the_errors(student):
    def clock_cycles(m, k):
        if m < 0 or k < 1:
            raise ValueError("bad sizes")
        yield from right_waves(m, k)

    student("clock_cycles", clock_cycles)
    fails("errors", r"clock_cycles\(True, 3\) must raise ValueError")
    for name in SCHEDULE_CRITERIA:
        run(name)


def test_a_cache_hit_that_skips_the_argument_checks_fails_the_errors(student):
    """(1, 3) == (True, 3) and (2, 3) == (2.0, 3), hashes included: a cache keyed on the
    arguments answers the bad call from the good one's entry."""
    cache: dict = {}
    checked_waves = checked(right_waves)

    def clock_cycles(m, k):
        if (m, k) not in cache:
            cache[m, k] = [list(wave) for wave in checked_waves(m, k)]
        return iter([list(wave) for wave in cache[m, k]])

    student("clock_cycles", clock_cycles)
    fails("errors", r"clock_cycles\(True, 3\) must raise ValueError .* also right after a valid call equal to it; "
                    r"it yielded \[\(0, 0\)\]")


def test_numpy_integers_refused_fail_only_the_errors(student):
    student("clock_cycles", checked(right_waves, integer=int))  # isinstance(np.int64(3), int) is False
    fails("errors", r"clock_cycles\(np.int64\(3\), np.int64\(3\)\) raised ValueError: not an int; NumPy integers are ints")
    for name in SCHEDULE_CRITERIA:
        run(name)


def test_numpy_values_in_the_pairs_fail_only_the_errors(student):
    def clock_cycles(m, k):
        for number in range(int(m) + int(k) - 1 if m else 0):
            yield [(m - m + number - j, j) for j in range(max(0, number - m + 1), min(number, k - 1) + 1)]

    student("clock_cycles", clock_cycles)
    fails("errors", r"clock_cycles\(np.int64\(3\), np.int64\(3\)\), wave 0 is .*: its pairs hold int, int64 values")
