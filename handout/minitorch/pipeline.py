"""Pipeline parallelism: the GPipe schedule and a threaded Pipe (student file).

You implement the regions marked ``# TODO: Implement for Problem N.M.``; everything
else is given. Run the public tests of one problem with ``pytest -m problem_2_1``.

The GPipe forward with M = 3 microbatches on K = 3 stages, one clock cycle ("wave")
per column; ``(i, j)`` is microbatch i on stage j::

    wave     0       1       2       3       4
    stage 0  (0,0)   (1,0)   (2,0)
    stage 1          (0,1)   (1,1)   (2,1)
    stage 2                  (0,2)   (1,2)   (2,2)
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

from minitorch.cost_model import Cluster, Estimate, Model
from minitorch.executor import StepReport, run_schedule
from minitorch.runtime import DEFAULT_TIMEOUT, StageWorkers
from minitorch.schedules import Action, stage_of


def clock_cycles(num_microbatches: int, num_stages: int) -> Iterator[list[tuple[int, int]]]:
    """Yield the GPipe forward schedule, one wave (clock cycle) at a time.

    Every forward of microbatch ``i`` on stage ``j`` takes one clock cycle. Microbatch
    ``i`` can run on stage ``j`` only after it has left stage ``j - 1``, and a stage runs
    one microbatch at a time, in microbatch order. Wave ``k`` lists every pair
    ``(i, j)`` (microbatch, stage) that runs in clock cycle ``k`` when each pair runs as
    early as those two rules allow.

    Args:
        num_microbatches: ``M``, an int >= 0 (a Python or NumPy integer).
        num_stages: ``K``, an int >= 1 (a Python or NumPy integer).

    Yields:
        The waves in clock-cycle order, from the first cycle to the last one with work,
        each a new ``list`` of ``(microbatch, stage)`` tuples of Python ints ordered by
        increasing stage. Every pair with ``0 <= i < M`` and ``0 <= j < K`` appears in
        exactly one wave; no wave is empty, so ``M == 0`` yields none.

    The worked example, M = 3 microbatches on K = 3 stages (the module docstring draws
    it per stage)::

        >>> list(clock_cycles(3, 3))
        [[(0, 0)], [(1, 0), (0, 1)], [(2, 0), (1, 1), (0, 2)], [(2, 1), (1, 2)], [(2, 2)]]

    Note the order inside a pair: (microbatch, stage). (The lecture slides' F_{a,b} is
    stage a, microbatch b: the other way round.)

    Guarantees:
        - It is a generator: each wave is computed when it is asked for, so the work
          done before the first wave does not grow with ``M * K`` (state kept per
          microbatch or per stage is fine).
        - Each call starts afresh: calls with other sizes, before or after, change
          nothing, and the waves a call yields are the caller's to change.

    Raises:
        ValueError: an argument that is not an int (``True``, ``2.0`` and ``"3"`` are not),
            ``num_microbatches < 0`` or ``num_stages < 1``, at the latest on the
            first ``next``. (A generator function raises there; a function that checks its
            arguments and then returns a generator raises at the call. Both are right.)
    """
    # TODO: Implement for Problem 2.1.
    raise NotImplementedError("Problem 2.1: clock_cycles")


class Pipe(nn.Module):
    """Run a sequence of stages as a GPipe pipeline over microbatches.

    ``Pipe(stages, devices, split_size)(x)`` computes the same values as
    ``stages[-1](...stages[1](stages[0](x)))``, but splits ``x`` into microbatches and
    lets every stage work on a different microbatch at the same time, one worker thread
    per stage (:class:`minitorch.runtime.StageWorkers`, kept as ``self.workers``). The
    constructor and ``close()`` are provided; you write ``forward``.

    Args:
        stages: the pipeline stages, a non-empty sequence of ``nn.Module`` (a list, a
            tuple, an ``nn.ModuleList``, ...). A stage may have no parameters, or frozen
            ones. Stage ``j`` is moved to ``devices[j]``; they are kept as ``self.stages``
            (an ``nn.ModuleList``) so ``pipe.parameters()`` sees every stage's.
        devices: one device per stage, e.g. ``["cuda:0", "cuda:1"]``; ``None`` means
            ``"cpu"`` for every stage.
        split_size: rows per microbatch (>= 1). The last microbatch may be smaller; a
            ``split_size`` larger than the batch gives a single microbatch.
        timeout: seconds a stage's call may take before ``TimeoutError`` (see
            StageWorkers).

    Raises:
        ValueError: no stages, a stage that is not an ``nn.Module``, ``len(devices) !=
            len(stages)``, or ``split_size`` not an int >= 1.

    Use ``close()`` (or ``with Pipe(...) as pipe:``) to stop the worker threads.
    """

    def __init__(
        self,
        stages: Sequence[nn.Module],
        devices: Sequence[str | torch.device] | None = None,
        split_size: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ):
        super().__init__()
        stages = list(stages)
        if not stages:
            raise ValueError("Pipe needs at least one stage, got none")
        for index, stage in enumerate(stages):
            if not isinstance(stage, nn.Module):
                raise ValueError(f"stage {index} must be an nn.Module, got {type(stage).__name__}")
        devices = ["cpu"] * len(stages) if devices is None else list(devices)
        if len(devices) != len(stages):
            raise ValueError(f"need one device per stage: {len(stages)} stages, {len(devices)} devices")
        if isinstance(split_size, bool) or not isinstance(split_size, int) or split_size < 1:
            raise ValueError(f"split_size must be an int >= 1 (rows per microbatch), got {split_size!r}")
        self.devices = [torch.device(d) for d in devices]
        self.stages = nn.ModuleList(stage.to(device) for stage, device in zip(stages, self.devices))
        self.split_size = split_size
        self.workers = StageWorkers(self.devices, timeout=timeout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the pipeline on a batch.

        Args:
            x: a tensor of shape ``[batch, ...]`` with ``batch >= 1`` rows: any rank >= 1,
               any floating dtype the stages accept, any device, contiguous or not, with
               or without ``requires_grad``. Microbatch ``i`` is rows
               ``i * split_size`` up to ``(i + 1) * split_size`` (fewer for the last).

        Returns:
            ``stages[-1](...stages[0](x))``: the microbatch outputs concatenated along
            dimension 0 in the original row order, on ``devices[-1]``, equal to the
            stages run in sequence on each microbatch (up to floating-point rounding),
            in their dtype. Nothing is detached: ``backward()`` reaches every stage's
            parameters that require grad, and ``x`` when it requires grad, adding to what
            their ``.grad`` holds as the stages run in sequence would; the output requires
            grad exactly when theirs would.

        Guarantees:
            - Stage ``j`` runs on its worker thread (``self.workers``, the same
              StageWorkers for every call until ``close()``), microbatches in
              order, at most ``K`` of them at once across the pipeline: the schedule is
              ``clock_cycles(M, K)`` (look it up by that name when forward runs), each wave
              handed out to the workers as a whole before any of its results is waited
              for, and taken back completely before the next wave starts.
            - The calling thread only makes views of ``x`` before the work starts and
              joins the outputs at the end: every copy, transfer and computation of a
              microbatch happens on its stage's thread.
            - The grad mode of the caller (``torch.no_grad``, ``torch.inference_mode``)
              holds in every stage.
            - ``x`` is left as it was: same values, same ``requires_grad``, no ``.grad``
              (a forward alone computes no gradient).
            - Calls are independent: another batch size on the next call, or a call after
              one that raised, works like a first call.

        Raises:
            The first exception a stage raised (in schedule order), unchanged: the same
            object, whatever its class (``BaseException`` included), once the wave it
            was raised in has been taken back, so the Pipe can be called again afterwards.
            TimeoutError: a stage's call took longer than ``timeout`` (``StageWorkers.receive``
                raises it): it reaches the caller unchanged, and the call is not retried.
        """
        # TODO: Implement for Problem 2.2.
        raise NotImplementedError("Problem 2.2: Pipe.forward")

    def close(self) -> None:
        """Stop the stage threads (idempotent). The Pipe cannot run afterwards."""
        self.workers.close()

    def __enter__(self) -> "Pipe":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# ---------------------------------------------------------------- Problem 2.4: balancing the stages


def balance_stages(costs: Iterable[float], num_stages: int) -> list[int]:
    """Cut a stack of layers into ``num_stages`` consecutive stages so the slowest is fastest.

    A pipeline runs at the pace of its slowest stage. Given the cost of every layer, in
    model order (e.g. its forward time or FLOPs per microbatch; the last layer carries
    the output layer, so it often costs several times an ordinary one), choose how many
    consecutive layers each stage gets.

    Args:
        costs: the cost of each layer, a non-empty iterable (a list, a tuple, a NumPy
            array, a generator, ...) of finite real numbers >= 0: Python or NumPy ints and
            floats, of any scale (seconds, FLOPs), zeros allowed. It is not changed.
        num_stages: ``K``, an int (a Python or NumPy integer) with ``1 <= K <= len(costs)``.

    Returns:
        ``sizes``, a new list of ``K`` Python ints, each >= 1 (no stage is empty), summing
        to ``len(costs)``: stage ``s`` holds layers ``sum(sizes[:s])`` up to
        ``sum(sizes[:s + 1]) - 1``. The cost of a stage is the sum of its layers' costs;
        no other split into ``K`` non-empty consecutive stages has a smaller largest
        stage cost (up to floating-point rounding of the sums). When several splits
        reach that least largest cost, any of them is right.

    Example: seven layers of cost 1, then the output layer's 3.3, on 4 stages. The even
    split ``[2, 2, 2, 2]`` gives the last stage 1 + 3.3 = 4.3; ``[3, 2, 2, 1]`` and
    ``[2, 2, 3, 1]`` both give a largest stage cost of 3.3, the least possible, so either
    is a right answer to ``balance_stages([1, 1, 1, 1, 1, 1, 1, 3.3], 4)``.

    Each call depends only on its arguments' values, and the list it returns is the
    caller's to change. Sizes: the checks use at most 64 layers and 16 stages; any exact
    method whose time is polynomial in both is fast enough.

    Raises:
        ValueError: at the call, when ``costs`` is empty or holds something that is not a
            finite real number >= 0 (a negative cost, ``nan``, ``inf``, a string, a bool,
            ``None``, a complex number), or ``num_stages`` is not an int (bools and ``2.0``
            are not), is < 1 or > ``len(costs)``.
    """
    # TODO: Implement for Problem 2.4.
    raise NotImplementedError("Problem 2.4: balance_stages")


# ---------------------------------------------------------------- Problem 4: schedules and recomputation
#
# A schedule says, for each device, the order in which it runs its actions
# Action(stage, kind, microbatch); kind "F" is a forward, "B" a full backward.
# minitorch.schedules (provided) simulates a schedule (simulate), draws it
# (render_ascii) and measures it (makespan, bubble, peak in-flight microbatches).
# Stage s lives on device s % K as that device's chunk s // K: with one chunk per
# device the stage IS the device; with v chunks a microbatch goes round the devices
# v times (stages 0..K-1, then K..2K-1, ...).


def one_f_one_b(num_stages: int, num_microbatches: int) -> list[list[Action]]:
    """The 1F1B (PipeDream-Flush) schedule: one ordered list of actions per device.

    Contract (``K = num_stages`` devices with one stage each, so stage == device;
    ``M = num_microbatches``):

    - Returns a new list of K new lists (every call builds its own: a caller may change
      what it got); ``schedule[d]`` is device d's actions in the order it runs them, each
      a :class:`minitorch.schedules.Action` ``Action(d, "F" or "B", m)`` with ``d`` and
      ``m`` ints. Every device runs the forward and the full backward of every microbatch
      ``m`` in ``range(M)`` exactly once.
    - Valid: :func:`minitorch.schedules.simulate` places it without a deadlock.
    - Memory: device ``d`` never holds more than ``min(K - d, M)`` microbatches'
      activations at once (held from the start of its F to the end of its B on that
      device); GPipe holds all M.
    - Time: with instant transfers, one step takes as long as GPipe's,
      ``(M + K - 1)(F + B)``, whatever the F and B times; with a delay on every transfer
      between devices (``simulate(..., t_comm=...)``), no longer than the lecture's
      1F1B timeline below takes with the same delay.

    The lecture's timeline for ``K = 4, M = 8`` (F takes 1 unit, B 2 units, two
    characters per unit, ``·`` idle)::

        device 0 |F0F1F2F3············B0B0F4B1B1F5B2B2F6B3B3F7B4B4··B5B5··B6B6··B7B7|
        device 1 |··F0F1F2········B0B0F3B1B1F4B2B2F5B3B3F6B4B4F7B5B5··B6B6··B7B7····|
        device 2 |····F0F1····B0B0F2B1B1F3B2B2F4B3B3F5B4B4F6B5B5F7B6B6··B7B7········|
        device 3 |······F0B0B0F1B1B1F2B2B2F3B3B3F4B4B4F5B5B5F6B6B6F7B7B7············|

    ``render_ascii(simulate(one_f_one_b(4, 8)))`` draws yours the same way, and
    ``format_schedule`` prints a device's list as ``"F0 F1 F2 F3 B0 F4 B1 ..."``.

    Args:
        num_stages: ``K``, a Python int ``>= 1``.
        num_microbatches: ``M``, a Python int ``>= 1`` (any M, ``M < K`` included).

    Raises:
        ValueError: at the call, when an argument is not a Python int (``4.0``, ``"4"``,
            ``None``, numpy integers and the bools ``True``/``False`` are not) or is ``< 1``.
    """
    # TODO: Implement for Problem 4.1.
    raise NotImplementedError("Problem 4.1: one_f_one_b")


def interleaved_one_f_one_b(num_stages: int, num_microbatches: int, num_chunks: int) -> list[list[Action]]:
    """Megatron's interleaved 1F1B schedule with ``v = num_chunks`` chunks per device.

    The model has ``K * v`` stages (``K = num_stages`` devices); device ``d`` holds the
    stages ``stage_of(d, c, K)`` for its chunks ``c = 0 .. v-1``, so a microbatch goes
    round the devices v times and each action does ``1/v`` of the device's work.

    Contract (``M = num_microbatches``, F and B the times of a device's whole share):

    - Returns a new list of K new lists (every call builds its own: a caller may change
      what it got); ``schedule[d]`` is device d's actions in order, each a
      :class:`minitorch.schedules.Action` ``Action(stage_of(d, chunk, K), "F" or "B", m)``
      with int stage and ``m``, the forward and the full backward of every microbatch on
      every one of its chunks exactly once.
    - Valid: :func:`minitorch.schedules.simulate` places it without a deadlock.
    - Time: with instant transfers one step takes ``(M + (K - 1)/v)(F + B)``, so the
      bubble is 1F1B's divided by v in Megatron's convention (idle over compute time:
      ``(K - 1)/(v M)``); in GPipe's (idle over total time) it is ``(K - 1)/(v M + K - 1)``.
      With a delay on every transfer between devices, no longer than Megatron-LM's
      order (pictured below) takes with the same delay.
    - Memory: device d never holds more microbatches' activations at once (each chunk
      counting 1/v) than Megatron-LM's order does: 2.5 on device 0 in the picture, 5.5
      at ``K = 4, M = 8, v = 2``, against 1F1B's 4; the price of the smaller bubble,
      with v times as many transfers.
    - ``v = 1`` is plain 1F1B: the same contract as :func:`one_f_one_b`.
    - At ``M = K`` (one group) Megatron-LM's order may also be its all-forwards-first one
      (every forward, then every backward: its rule for ``M = K``, for any v): its time
      with transfer delays and its memory (up to M on every device) are admitted too.

    Megatron-LM's order for ``K = 2, M = 4, v = 2`` (``1F0``: chunk 1, forward,
    microbatch 0; each box starts with ``|``; a chunk's F takes 1/2 unit, its B 1 unit;
    ``·`` idle)::

        device 0 |0F0|0F1|1F0|1F1|0F2····|1B0    |0F3|1B1    |1F2|0B0    |1F3|0B1    ····|1B2    ····|1B3    |0B2    |0B3    |
        device 1 ····|0F0|0F1|1F0|1B0    |1F1|1B1    |0F2|0B0    |0F3|0B1    |1F2|1B2    |1F3|1B3    |0B2    |0B3    ········|

    Args:
        num_stages: ``K``, a Python int ``>= 1``.
        num_microbatches: ``M``, a Python int ``>= 1`` and a multiple of ``K``, for every
            ``v`` (``v = 1`` included: the rule does not depend on v).
        num_chunks: ``v``, a Python int ``>= 1``.

    Raises:
        ValueError: at the call, when an argument is not a Python int (``4.0``, ``"4"``,
            ``None``, numpy integers and the bools are not) or is ``< 1``, or when
            ``num_microbatches % num_stages != 0``.
    """
    # TODO: Implement for Problem 4.2.
    raise NotImplementedError("Problem 4.2: interleaved_one_f_one_b")


def segment_bounds(num_layers: int, segments: int) -> list[tuple[int, int]]:
    """Split ``range(num_layers)`` into ``segments`` consecutive ``(start, stop)`` pieces.

    Sizes differ by at most one, longer pieces first: ``segment_bounds(7, 3)`` is
    ``[(0, 3), (3, 5), (5, 7)]``. Expects ``1 <= segments <= num_layers``.
    """
    size, extra = divmod(num_layers, segments)
    bounds, start = [], 0
    for index in range(segments):
        stop = start + size + (index < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


def run_layers(layers: Sequence[Callable], x: torch.Tensor) -> torch.Tensor:
    """``layers[-1](...layers[0](x))``: run the layers one after the other."""
    for layer in layers:
        x = layer(x)
    return x


class CheckpointSegment(torch.autograd.Function):
    """One recomputed segment of layers, as an autograd Function:
    ``CheckpointSegment.apply(run_segment, x, *params)``.

    Contract:

    - ``run_segment``: a callable taking one tensor and returning one tensor (the
      segment's layers one after the other); it may draw random numbers (dropout).
      ``x``: the segment's input, any shape, dtype or layout, requiring grad or not, on
      any device (graded on CPUs only). ``params``: the tensors ``run_segment`` uses
      whose gradients are wanted (the segment's parameters; frozen ones and none at all
      are allowed).
    - The value returned (its dtype and shape included), and the gradients that reach
      ``x`` and every ``params`` tensor that requires grad, are bit for bit those of
      calling ``run_segment(x)`` directly with the same random numbers; the output
      requires grad exactly when ``x`` or one of ``params`` does.
    - Gradients go where autograd puts them and nowhere else: ``.backward()`` adds each
      one to the ``.grad`` already there, and ``torch.autograd.grad`` changes no
      ``.grad`` at all.
    - Memory: between forward and backward the Function keeps no tensor that
      ``run_segment`` computed, and after a backward without ``retain_graph`` it keeps
      no tensor at all; ``run_segment`` runs once in forward and once more in each
      backward.
    - Random numbers: code that draws after the forward, or after the backward, draws
      the same numbers as it would after calling ``run_segment(x)`` directly.
    - Nothing the caller can see changes: ``x`` keeps its values and its
      ``requires_grad``, every ``params`` tensor keeps its ``requires_grad``, no tensor
      that does not require grad gets a ``.grad``, and a second backward through the
      same graph (``retain_graph=True``) gives the same gradients again.
    """

    @staticmethod
    def forward(ctx, run_segment: Callable, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        """The segment's output (autograd has switched grad mode off here); see the class."""
        # TODO: Implement for Problem 4.3.
        raise NotImplementedError("Problem 4.3: CheckpointSegment.forward")

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        """One gradient per argument of ``forward``: ``None`` for ``run_segment``, then
        ``x``'s and each param's (``None`` where ``ctx.needs_input_grad`` is False)."""
        # TODO: Implement for Problem 4.3.
        raise NotImplementedError("Problem 4.3: CheckpointSegment.backward")


def checkpoint_sequential(layers: Sequence[Callable], x: torch.Tensor, segments: int | None = None) -> torch.Tensor:
    """Run ``layers`` on ``x`` with activation recomputation (sqrt(n) checkpoints, by hand).

    Contract (``n = len(layers)``):

    - Returns ``run_layers(layers, x)``: the same value (dtype, shape and
      ``requires_grad`` included) and, bit for bit, the same gradients for ``x`` (when
      it requires grad) and for every parameter of every ``nn.Module`` layer that
      requires grad, dropout included.
    - The layers are cut into ``segments`` consecutive pieces as
      :func:`segment_bounds` cuts them; each is a :class:`CheckpointSegment`.
      After the forward only the inputs of the segments are kept; the backward
      recomputes one segment at a time, so every layer runs exactly once in the
      forward and exactly once more in the backward, the last segment's included.
    - Where gradients go, random numbers, the caller's tensors and a second backward: as
      :class:`CheckpointSegment` promises.
    - Works on any call: other layers, sizes, dtypes and shapes than the previous call.
      Do not use ``torch.utils.checkpoint``.

    The memory it saves is a written question (REPORT.md, Q5)::

        forward   h0 -[L0 L1 L2]- h3 -[L3 L4 L5]- h6 -[L6 L7 L8]- h9   keeps h0, h3, h6

    Args:
        layers: a non-empty sequence (list, tuple, ``nn.ModuleList``, ``nn.Sequential``)
            of callables: ``nn.Module`` s, with or without parameters, frozen or not, or
            plain functions such as ``torch.tanh``. The same module may appear more than
            once and modules may share parameters: a parameter's gradient sums all its uses,
            as the plain run's does (bit for bit when its uses are all in one segment or
            one in each segment; otherwise the sum may round in another order).
        x: the input tensor: any shape, dtype, contiguous or not, requiring grad or not,
            on any device (graded on CPUs only).
        segments: a Python int in ``1 .. n``. ``None`` means ``round(sqrt(n))``, rounded
            to the nearest int: 3 segments for ``n = 7`` and for ``n = 10``.

    Raises:
        ValueError: at the call, for no layers, a layer that is not callable, ``x``
            not a tensor, or ``segments`` not a Python int in ``1 .. n`` (bools and numpy
            integers are not ints here).
    """
    # TODO: Implement for Problem 4.3.
    raise NotImplementedError("Problem 4.3: checkpoint_sequential")


def train_step(
    workers: StageWorkers,
    stages: Sequence[nn.Module],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    num_microbatches: int,
) -> StepReport:
    """One training step (forward and backward; the optimizer step is the caller's) of a
    pipelined model, run by YOUR schedules through the provided executor
    (:func:`minitorch.executor.run_schedule`).

    Contract (``K = workers.num_stages`` devices, ``v = len(stages) / K`` chunks each,
    ``M = num_microbatches``):

    - ``stages[s]`` is stage ``s`` of the model, already on device ``s % K``
      (``workers.devices[s % K]``); the model is the stages one after the other.
    - The step follows :func:`one_f_one_b` when ``v = 1`` and
      :func:`interleaved_one_f_one_b` when ``v >= 2``, as they return it for this
      call's K, M (and v): every device runs exactly the actions of its row of that
      schedule, in that order.
    - Gradients: afterwards every parameter's ``.grad`` has grown by the gradient of
      the mean of ``loss_fn`` over the whole batch, run through all stages without
      a pipeline (within floating-point rounding): the step adds to the gradients
      already there, and zeroing them between steps is the caller's. ``inputs`` and
      ``targets`` are split along dim 0 into M microbatches.
    - Every call is a step of its own: called again on the same stages, with another M
      too, it follows that call's schedule and adds that step's gradients.
    - Memory: the peak number of microbatches whose activations a device holds, as
      measured while the step runs, is what ``minitorch.schedules.simulate`` predicts
      for that schedule (``Timeline.peak_in_flight``).
    - Returns the executor's :class:`~minitorch.executor.StepReport` of this step (the
      batch loss, what each device ran, the peaks).
    - Bounded: an error in a stage reaches the caller (the stage's own exception), not
      hung on; no wait lasts longer than ``workers.timeout``.

    Args:
        workers: the provided :class:`~minitorch.runtime.StageWorkers`, one per device.
        stages: a sequence (list, tuple, ``nn.ModuleList``) of ``K * v >= 1``
            ``nn.Module`` s, a multiple of ``K``.
        inputs, targets: ``[batch, ...]`` tensors with ``batch >= M``.
        loss_fn: ``loss_fn(output, target)``, the mean loss of a microbatch.
        num_microbatches: ``M``, an int ``>= 1``. With ``v = 1`` any M: the step follows
            :func:`one_f_one_b`. With ``v >= 2`` a multiple of ``K``: the step follows
            :func:`interleaved_one_f_one_b`, whose rule that is (for its own ``v = 1``
            too, a schedule a step with ``v = 1`` never asks for).

    Raises:
        an exception, when ``len(stages)`` is not a positive multiple of ``K`` or ``M``
            is not valid for the schedule: the ValueError your schedule functions or the
            executor raise is right, and which class is not graded.
    """
    # TODO: Implement for Problem 4.4.
    raise NotImplementedError("Problem 4.4: train_step")


# ---------------------------------------------------------------- Problem 5: plan a 3D-parallel run
#
# N = t * p * d GPUs: tensor-parallel groups of t GPUs, pipelines of p stages, d data-parallel
# replicas of the whole pipeline. minitorch.cost_model (provided) holds Model, Cluster and
# Estimate, the lecture's models and clusters, and prints tables of YOUR estimates
# (python -m minitorch.cost_model). The write-up's "The cost model" section says what the
# estimate counts; the formulas are the lecture's (section 6) and the write-up's hints.


def estimate(model: Model, cluster: Cluster, batch: int, t: int, p: int, microbatch: int = 1) -> Estimate:
    """The cost model's estimate of one training step of ``model`` on ``cluster`` with
    tensor-parallel size ``t``, ``p`` pipeline stages and ``d = cluster.gpus / (t * p)``
    data-parallel replicas, training under 1F1B with full activation recomputation.

    A plan ``(t, p)`` is *valid* for a model, cluster, batch and microbatch size when
    ``t * p`` divides the GPUs, ``p`` divides the layers, ``t`` divides the attention heads
    and the batch splits into ``d`` equal shares of whole microbatches. ``t`` need not be a
    power of two and may be larger than a node (the plan is valid; its tensor-parallel
    traffic then leaves the node).

    Args:
        model: a :class:`Model` (any sizes).
        cluster: a :class:`Cluster` (any sizes and speeds, given as ints or floats).
        batch: the global batch, in sequences: an int >= 1.
        t, p: ints >= 1.
        microbatch: sequences per microbatch: an int >= 1; 1 when left out.

    Returns:
        An :class:`Estimate` of the plan, each number what the write-up's cost model counts:

        - ``t``, ``p``, ``d``: the plan; ``microbatches``: the microbatches each pipeline runs per step;
        - ``flops_per_gpu``: the model FLOPs one GPU does per step (recomputation included);
        - ``compute_s``: seconds of computing those FLOPs;
        - ``bubble_s``: seconds of 1F1B's bubble;
        - ``tensor_parallel_s``: seconds of the tensor-parallel all-reduces;
        - ``pipeline_s``: seconds of the transfers between pipeline stages;
        - ``data_parallel_s``: seconds of the data-parallel all-reduce of the gradients;
        - ``state_bytes``: bytes of training state per GPU;
        - ``activation_bytes``: bytes of activations per GPU;
        - ``memory_limit``: the cluster's memory per GPU.

        ``t``, ``p``, ``d`` and ``microbatches`` are ints, every other field a float.

    Guarantees:
        Every number within relative 1e-6 of the cost model's value (a term the model makes
        zero is zero within 1e-9 of the step time or of the memory limit). A call's result
        depends only on its arguments: no state is kept between calls.

    Raises:
        ValueError: at the call, when ``batch``, ``t``, ``p`` or ``microbatch`` is not an
            int >= 1 (a bool or a numpy integer is not one), or when the plan is not valid.
    """
    # TODO: Implement for Problem 5.1.
    raise NotImplementedError("Problem 5.1: estimate")


def best_plan(model: Model, cluster: Cluster, batch: int, microbatch: int = 1) -> Estimate | None:
    """The fastest valid plan that fits in memory, or ``None`` when none fits.

    Every valid ``(t, p)`` (as :func:`estimate` defines valid, for this ``batch`` and
    ``microbatch``) is a candidate. A plan *fits* when its ``memory_bytes`` is at most the
    cluster's memory per GPU (``Estimate.fits``). Each candidate's time and memory are the
    ones this module's ``estimate`` returns for it, looked up when ``best_plan`` runs.

    Args:
        model, cluster: as for :func:`estimate`.
        batch, microbatch: ints >= 1, as for :func:`estimate` (``microbatch`` 1 when left out).

    Returns:
        The :class:`Estimate` that ``estimate`` returns for the fitting plan with the smallest
        ``step_s`` (when several are within relative 1e-9 of the smallest, any one of them),
        or ``None`` when no valid plan fits, including when no plan is valid at all.

    Guarantees:
        A call's result depends only on its arguments: no state is kept between calls.

    Raises:
        ValueError: at the call, when ``batch`` or ``microbatch`` is not an int >= 1 (a bool
            or a numpy integer is not one).
    """
    # TODO: Implement for Problem 5.2.
    raise NotImplementedError("Problem 5.2: best_plan")
