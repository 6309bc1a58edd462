"""The Problem 2 grader checks, in process, along the grader's path (observe, plain data,
save/load, judge): the answer key passes every check, and each wrong variant of the
student's code fails the check that targets it, saying what went wrong.
"""
from __future__ import annotations

import itertools
import time
import tracemalloc
from fractions import Fraction

import pytest
import torch
from grading_helpers import observe_and_judge

from grader.checks import Fail, observed
from grader.checks import problem2 as checks
from grader.rubric import load_rubric

SEED = 7
PARAMS = {c.name: c.params for c in load_rubric().criteria if c.observe_module == "grader.checks.problem2"}


@pytest.fixture(autouse=True)
def student(monkeypatch):
    """Replaces attributes of the answer key's pipeline module for one test. The 2.2 checks
    swap the grader's own clock_cycles into the module: that is undone after each test too."""
    from minitorch import pipeline

    monkeypatch.setattr(pipeline, "clock_cycles", pipeline.clock_cycles)
    return lambda name, value: monkeypatch.setattr(pipeline, name, value)


def wrong_forward(student, forward):
    """A Pipe whose forward is ``forward(original_forward, self, x)``."""
    from minitorch import pipeline

    original = pipeline.Pipe.forward
    student("Pipe", type("Pipe", (pipeline.Pipe,), {"forward": lambda self, x: forward(original, self, x)}))


def fails(name: str, match: str) -> None:
    with pytest.raises(Fail, match=match):
        observe_and_judge(checks, name, SEED, PARAMS[name])


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_answer_key_passes(name):
    observe_and_judge(checks, name, SEED, PARAMS[name])


def test_every_problem2_check_is_in_the_rubric():
    observed = {name[len("observe_"):] for name in vars(checks) if name.startswith("observe_")}
    assert observed == set(PARAMS)


def test_a_missing_last_wave_fails_the_schedule(student):
    from minitorch import pipeline

    right = pipeline.clock_cycles
    student("clock_cycles", lambda m, k: iter(list(right(m, k))[:-1]))
    fails("schedule", "wave")


def test_the_wrong_exception_type_fails_the_errors_check(student):
    def clock_cycles(m, k):
        if m < 0 or k < 1:
            raise TypeError("bad sizes")
        yield from ()

    student("clock_cycles", clock_cycles)
    fails("errors", "ValueError")


def test_rows_out_of_order_fail_the_forward(student):
    wrong_forward(student, lambda original, self, x: original(self, x).flip(0))
    fails("forward", "out of order")


def serial(original, self, x):
    """A Pipe forward that runs each microbatch through every stage before the next one starts."""
    outputs = []
    for batch in torch.split(x, self.split_size):
        for j, stage in enumerate(self.stages):
            self.workers.submit(j, lambda stage=stage, batch=batch: stage(batch))
            batch = self.workers.receive(j)
        outputs.append(batch)
    return torch.cat(outputs)


def test_a_serial_forward_fails_the_call_order(student):
    wrong_forward(student, serial)
    fails("call_order", "wave")


def test_enabling_grad_inside_fails_no_grad(student):
    def forward(original, self, x):
        with torch.enable_grad():
            return original(self, x)

    wrong_forward(student, forward)
    fails("no_grad", "no_grad|inference_mode|grad")


def test_a_swallowed_stage_exception_fails(student):
    def forward(original, self, x):
        try:
            return original(self, x)
        except Exception:
            return torch.zeros_like(x)

    wrong_forward(student, forward)
    fails("exceptions", "exception")


def test_detaching_the_output_fails_backward(student):
    wrong_forward(student, lambda original, self, x: original(self, x).detach().requires_grad_())
    fails("backward", "grad")


def test_a_copy_on_the_calling_thread_fails_transfers(student):
    wrong_forward(student, lambda original, self, x: original(self, x.clone()))
    fails("transfers", "calling thread|clone")


# ---- 2.1: the schedule apart from its conventions (each convention costs its own criterion only)

def right_waves(m, k):
    """The right waves, one at a time (lazily: 2.1-generator measures the memory a long schedule's first wave takes)."""
    for wave in range(m + k - 1):
        yield [(wave - j, j) for j in range(max(0, wave - m + 1), min(wave, k - 1) + 1)]


def only_fails(student, clock_cycles, failing: str, match: str) -> None:
    student("clock_cycles", clock_cycles)
    for name in ("schedule", "stage_order", "generator", "no_microbatches"):
        if name == failing:
            fails(name, match)
        else:
            observe_and_judge(checks, name, SEED, PARAMS[name])


def test_stages_listed_descending_fail_only_the_stage_order(student):
    def clock_cycles(m, k):
        yield from (wave[::-1] for wave in right_waves(m, k) if m)

    only_fails(student, clock_cycles, "stage_order", r"clock_cycles\(2, 2\), wave 1 is \[\(0, 1\), \(1, 0\)\]: not ordered")


def test_a_list_fails_only_the_generator(student):
    only_fails(student, lambda m, k: list(right_waves(m, k)) if m else [], "generator", "returned a list; expected a generator")


def test_one_shared_list_fails_only_the_generator(student):
    def clock_cycles(m, k):
        shared = []
        for wave in right_waves(m, k) if m else []:
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


def test_nothing_yielded_passes_no_convention(student):
    def clock_cycles(m, k):
        yield from ()

    student("clock_cycles", clock_cycles)
    for name in ("schedule", "stage_order", "generator", "no_microbatches"):
        with pytest.raises(Fail):
            observe_and_judge(checks, name, SEED, PARAMS[name])


def test_eager_and_lazy_value_errors_both_pass(student):
    def eager(m, k):
        if type(m) is not int or type(k) is not int or m < 0 or k < 1:
            raise ValueError("bad sizes")
        return iter(list(right_waves(m, k)) if m else [])

    student("clock_cycles", eager)
    observe_and_judge(checks, "errors", SEED, PARAMS["errors"])


# ---- 2.2: the student's terms

def test_chunked_rows_fail_forward_and_call_order_naming_the_sizes(student):
    def chunked(original, self, x):
        microbatches = list(torch.chunk(x, -(-x.shape[0] // self.split_size)))
        for wave in checks.reference_clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                self.workers.submit(j, lambda stage=self.stages[j], batch=microbatches[i]: stage(batch))
            for i, j in wave:
                microbatches[i] = self.workers.receive(j)
        return torch.cat(microbatches)

    wrong_forward(student, chunked)
    fails("forward", r"stage 0 was given microbatches of \[3, 3, 3\] rows; expected \[4, 4, 1\]")
    fails("call_order", r"stage 0 was given microbatches of \[3, 3, 3\] rows; expected \[4, 4, 1\]")


def test_wrong_row_count_fails_backward_before_the_graders_loss(student):
    wrong_forward(student, lambda original, self, x: torch.cat([original(self, x), original(self, x)[:2]]))
    fails("backward", r"Pipe returned a tensor of shape \[12, 6\]; expected \[10, 6\]")


def test_a_copy_of_the_stage_exception_fails_only_the_convention(student):
    def forward(original, self, x):
        try:
            return original(self, x)
        except checks.GraderStageError as error:
            raise type(error)(*error.args) from None

    wrong_forward(student, forward)
    fails("exception_unchanged", "not the object the stage raised")
    observe_and_judge(checks, "exceptions", SEED, PARAMS["exceptions"])  # it still reaches the caller


def test_a_move_guarded_by_the_device_fails_transfers(student):
    def forward(original, self, x):
        if x.device != self.devices[0]:
            x = x.to(self.devices[0])
        return original(self, x)

    wrong_forward(student, forward)
    fails("transfers", r"ran torch `to` on the calling thread before the first submit \(stages on the devices cpu:0")


def test_contiguous_of_a_contiguous_batch_keeps_transfers(student):
    wrong_forward(student, lambda original, self, x: original(self, x.contiguous()))
    observe_and_judge(checks, "transfers", SEED, PARAMS["transfers"])


# ---- what the contract allows beyond the worked example (issue 20's classes)

def test_a_forged_observation_with_only_no_microbatches_fails_the_schedule(student):
    observation = checks.observe_schedule(SEED, PARAMS["schedule"])
    observation["runs"] = [run for run in observation["runs"] if run["M"] == 0]
    with pytest.raises(Fail, match="asked for"):
        checks.judge_schedule(SEED, PARAMS["schedule"], observed(observation))


def test_waves_as_generator_expressions_fail_only_the_generator(student):
    def clock_cycles(m, k):
        yield from ((pair for pair in wave) for wave in (right_waves(m, k) if m else []))

    only_fails(student, clock_cycles, "generator", "expected each wave as a list")


def every_wave_first(m, k):
    """Every wave in a list before the first is handed out: lists of tuples built in Python."""
    waves = list(right_waves(m, k)) if m else []
    yield from waves


def every_pair_first(m, k):
    """Every pair made by a C-level builder (itertools.product), grouped by wave, then handed out."""
    by_wave: dict = {}
    for i, j in itertools.product(range(m), range(k)):
        by_wave.setdefault(i + j, []).append((i, j))
    for wave in sorted(by_wave):
        yield sorted(by_wave[wave], key=lambda pair: pair[1])


def every_pair_as_ints_first(m, k):
    """The whole schedule kept compactly, two ints per pair, then turned into waves one by one."""
    flat = [number for wave in right_waves(m, k) for pair in wave for number in pair] if m else []
    sizes = [len(wave) for wave in right_waves(m, k)] if m else []
    start = 0
    for size in sizes:
        yield [(flat[start + 2 * n], flat[start + 2 * n + 1]) for n in range(size)]
        start += 2 * size


@pytest.mark.parametrize("clock_cycles", [every_wave_first, every_pair_first, every_pair_as_ints_first],
                         ids=lambda f: f.__name__)
def test_every_wave_built_before_the_first_fails_only_the_generator(student, clock_cycles):
    only_fails(student, clock_cycles, "generator", r"clock_cycles\(400, 400\) allocated .* MB before it yielded its first wave")


def microbatches_listed_first(m, k):
    """O(M) state made before the first wave (a list of the microbatches): lazy all the same."""
    microbatches = [{"index": i, "stage": -1} for i in range(m)]
    for wave in range(m + k - 1 if m else 0):
        yield [(microbatches[wave - j]["index"], j) for j in range(max(0, wave - m + 1), min(wave, k - 1) + 1)]


def every_pair_scanned_per_wave(m, k):
    """Each wave found by scanning all M * K pairs when it is asked for: slow, but lazy."""
    for wave in range(m + k - 1 if m else 0):
        yield [(i, j) for j in range(k) for i in range(m) if i + j == wave]


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


@pytest.mark.parametrize("clock_cycles", [microbatches_listed_first, every_pair_scanned_per_wave, stages_simulated],
                         ids=lambda f: f.__name__)
def test_lazy_generators_with_state_or_slow_waves_pass_the_generator(student, clock_cycles):
    student("clock_cycles", clock_cycles)
    for name in ("schedule", "stage_order", "generator", "no_microbatches"):
        observe_and_judge(checks, name, SEED, PARAMS[name])


def test_laziness_does_not_depend_on_the_clock(student, monkeypatch):
    """The verdict is the same however slow the machine seems: every clock reading is 1 s after the last."""
    now = iter(itertools.count(start=1000.0, step=1.0))
    for name in ("perf_counter", "monotonic", "time"):
        monkeypatch.setattr(time, name, lambda: next(now))
    observe_and_judge(checks, "generator", SEED, PARAMS["generator"])
    student("clock_cycles", every_wave_first)
    fails("generator", r"allocated .* MB before it yielded its first wave")


def stopping(m, k):
    tracemalloc.stop()
    yield from every_wave_first(m, k)


def restarting(m, k):
    waves = list(every_wave_first(m, k))
    tracemalloc.stop()
    tracemalloc.start()
    yield from waves


def clearing(m, k):
    waves = list(every_wave_first(m, k))
    tracemalloc.clear_traces()
    yield from waves


@pytest.mark.parametrize("clock_cycles", [stopping, restarting, clearing], ids=lambda f: f.__name__)
def test_a_generator_that_stops_or_clears_the_measurement_fails_the_generator(student, clock_cycles):
    student("clock_cycles", clock_cycles)
    try:
        fails("generator", r"clock_cycles\(400, 400\) stopped, restarted or cleared tracemalloc")
    finally:
        tracemalloc.stop()  # restarting left it on (the other tests run untraced)


def test_resetting_the_peak_or_rebinding_tracemalloc_does_not_hide_every_wave_built_first(student, monkeypatch):
    def clock_cycles(m, k):
        waves = list(every_wave_first(m, k))
        tracemalloc.reset_peak()  # the waves it holds are still traced
        yield from waves

    monkeypatch.setattr(tracemalloc, "get_traced_memory", lambda: (0, 0))
    monkeypatch.setattr(tracemalloc, "is_tracing", lambda: True)
    only_fails(student, clock_cycles, "generator", r"allocated .* MB before it yielded its first wave")


def test_an_eager_build_that_raises_still_fails_the_generator(student):
    def clock_cycles(m, k):
        waves = list(every_wave_first(m, k))
        if m * k > 100_000:
            raise MemoryError("too many pairs")
        yield from waves

    student("clock_cycles", clock_cycles)
    fails("generator", r"clock_cycles\(400, 400\) allocated .* MB before it raised MemoryError: too many pairs")


def test_a_forged_laziness_measurement_fails_the_generator(student):
    observation = checks.observe_generator(SEED, PARAMS["generator"])
    observation["laziness"][0]["case"] = [4, 4]
    with pytest.raises(Fail, match="asked for"):
        checks.judge_generator(SEED, PARAMS["generator"], observed(observation))


def test_waves_cached_across_calls_fail_only_the_generator(student):
    cache = {}

    def clock_cycles(m, k):
        if (m, k) not in cache:
            cache[m, k] = list(right_waves(m, k)) if m else []
        yield from cache[m, k]

    only_fails(student, clock_cycles, "generator", "same list objects both times")


def test_a_schedule_kept_in_module_state_fails_the_schedule(student):
    state = {}

    def clock_cycles(m, k):
        state["m"], state["k"] = m, k  # read again at every wave: another call in between changes it
        for wave in range(m + k - 1):
            yield list(right_waves(state["m"], state["k"]))[wave] if wave < state["m"] + state["k"] - 1 else []

    student("clock_cycles", clock_cycles)
    fails("schedule", r"clock_cycles\(3, 3\) with a whole clock_cycles\(4, 2\) run after its first wave")


def test_accepting_bools_fails_only_the_errors(student):
    def clock_cycles(m, k):
        if m < 0 or k < 1:
            raise ValueError("bad sizes")
        yield from right_waves(m, k) if m else []

    student("clock_cycles", clock_cycles)
    fails("errors", r"clock_cycles\(True, 3\) must raise ValueError")
    for name in ("schedule", "stage_order", "generator", "no_microbatches"):
        observe_and_judge(checks, name, SEED, PARAMS[name])


def test_requires_grad_switched_on_the_input_fails_only_input_unchanged(student):
    wrong_forward(student, lambda original, self, x: original(self, x.requires_grad_()))
    fails("input_unchanged", "requires_grad=True")
    for name in ("forward", "call_order", "backward"):
        observe_and_judge(checks, name, SEED, PARAMS[name])


def test_an_input_changed_in_place_fails_input_unchanged(student):
    def forward(original, self, x):
        out = original(self, x)
        with torch.no_grad():
            x.mul_(1.5)
        return out

    wrong_forward(student, forward)
    fails("input_unchanged", "changed the caller's x in place")


def test_a_microbatch_count_kept_from_the_first_call_fails_the_forward(student):
    def forward(original, self, x):
        self.__dict__.setdefault("first_rows", x.shape[0])
        return original(self, x[: self.first_rows]) if x.shape[0] >= self.first_rows else original(self, x)

    wrong_forward(student, forward)
    fails("forward", "call 2 of")


def test_catching_only_exception_fails_on_a_base_exception(student):
    from minitorch import pipeline

    def forward(self, x):
        microbatches = list(torch.split(x, self.split_size))
        for wave in pipeline.clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                self.workers.submit(j, lambda stage=self.stages[j], batch=microbatches[i]: stage(batch))
            first_error = None
            for i, j in wave:
                try:
                    microbatches[i] = self.workers.receive(j)
                except Exception as error:  # a BaseException goes straight through, the wave half received
                    first_error = first_error or error
            if first_error is not None:
                raise first_error
        return torch.cat(microbatches)

    student("Pipe", type("Pipe", (pipeline.Pipe,), {"forward": forward}))
    fails("exceptions", "GraderInterrupt")
    observe_and_judge(checks, "forward", SEED, PARAMS["forward"])


def test_raising_after_the_whole_schedule_fails_only_the_convention(student):
    from minitorch import pipeline

    def forward(self, x):
        microbatches, errors = list(torch.split(x, self.split_size)), []
        for wave in pipeline.clock_cycles(len(microbatches), len(self.stages)):
            for i, j in wave:
                if microbatches[i] is not None:
                    self.workers.submit(j, lambda stage=self.stages[j], batch=microbatches[i]: stage(batch))
            for i, j in wave:
                if microbatches[i] is not None:
                    try:
                        microbatches[i] = self.workers.receive(j)
                    except BaseException as error:
                        errors.append(error)
                        microbatches[i] = None
        if errors:
            raise errors[0]
        return torch.cat(microbatches)

    student("Pipe", type("Pipe", (pipeline.Pipe,), {"forward": forward}))
    fails("exception_unchanged", "no later wave runs")
    observe_and_judge(checks, "exceptions", SEED, PARAMS["exceptions"])


def test_a_serial_pipe_that_shortens_the_grader_stages_sleep_fails_concurrency(student):
    def forward(original, self, x):
        for stage in self.stages:
            if hasattr(stage, "sleep"):
                stage.sleep = 0.001
        return serial(original, self, x)

    wrong_forward(student, forward)
    fails("concurrency", "the grader's stages must run as given")


# ---- 2.4 balance_stages

def greedy_balance(costs, num_stages):
    """Fill each stage up to the average: the realistic wrong answer."""
    target, sizes, total = sum(costs) / num_stages, [], 0.0
    for index, cost in enumerate(costs):
        if sizes and len(sizes) < num_stages and total + cost > target and len(costs) - index >= num_stages - len(sizes):
            sizes.append(0)
            total = 0.0
        if not sizes:
            sizes.append(0)
        sizes[-1] += 1
        total += cost
    while len(sizes) < num_stages:  # too few stages filled: split the largest
        largest = sizes.index(max(sizes))
        sizes[largest:largest + 1] = [sizes[largest] - 1, 1]
    return sizes


def even_split(costs, num_stages):
    size, extra = divmod(len(costs), num_stages)
    return [size + (stage < extra) for stage in range(num_stages)]


@pytest.mark.parametrize("wrong, match", [(greedy_balance, "the least possible is"), (even_split, "the least possible is")])
def test_a_balance_that_is_not_optimal_fails(student, wrong, match):
    student("balance_stages", wrong)
    fails("balance", match)


def test_an_empty_stage_fails_the_balance(student):
    from minitorch import pipeline

    right = pipeline.balance_stages
    student("balance_stages", lambda costs, k: [0, *right(costs, k - 1)] if k > 1 else right(costs, k))
    fails("balance", "at least one layer each")


def test_any_optimal_split_passes(student):
    from minitorch import pipeline

    right = pipeline.balance_stages
    student("balance_stages", lambda costs, k: right(list(costs)[::-1], k)[::-1])  # the mirror image: other ties
    observe_and_judge(checks, "balance", SEED, PARAMS["balance"])


def test_sorting_the_callers_costs_fails_only_the_arguments(student):
    from minitorch import pipeline

    right = pipeline.balance_stages

    def balance_stages(costs, k):
        sizes = right(costs, k)
        if isinstance(costs, list):
            costs.reverse()
            costs.reverse()
            costs.append(0)
            costs.pop()
            costs.sort()
        return sizes

    student("balance_stages", balance_stages)
    fails("balance_arguments", "changed the caller's costs")


def test_a_type_error_for_a_string_cost_fails_only_the_arguments(student):
    from minitorch import pipeline

    right = pipeline.balance_stages

    def balance_stages(costs, k):
        if any(isinstance(c, str) for c in costs):
            raise TypeError("costs must be numbers")
        return right(costs, k)

    student("balance_stages", balance_stages)
    fails("balance_arguments", r"balance_stages\(\['1', 2\], 1\) raised TypeError")
    observe_and_judge(checks, "balance", SEED, PARAMS["balance"])


def test_the_judges_optimum_on_the_lecture_case():
    exact, scale = checks.exact_costs([1] * 7 + [3.3])
    least, split = checks._least_slowest_stage(exact, 4)
    assert Fraction(least, scale) == Fraction(3.3) and sum(split) == 8 and len(split) == 4
    assert checks._least_slowest_stage(checks.exact_costs([0, 0, 0])[0], 3) == (0, [1, 1, 1])
    exact, scale = checks.exact_costs([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert checks._least_slowest_stage(exact, 3) == (17 * scale, [5, 2, 2])  # 15, 13, 17
