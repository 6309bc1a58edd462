"""Pipeline schedules as data: a timeline simulator, renderers, closed forms (provided).

Vocabulary (lecture sections 2.3 and 4, and the bubble lesson):

- ``K`` devices (pipeline ranks) ``d = 0 .. K-1`` and ``M`` microbatches ``m = 0 .. M-1``.
- The model is cut into ``S = K * v`` consecutive **stages** ``s = 0 .. S-1``, where ``v``
  is the number of **chunks** per device (``v = 1`` for GPipe and 1F1B, ``v >= 2`` for
  Megatron's interleaved schedule). Stage ``s`` lives on device ``s % K`` as that
  device's chunk ``s // K``. With ``K = 4, v = 2``, device 1 holds stages 1 and 5, so a
  microbatch visits the devices twice (``stage_of(device, chunk, K) = chunk * K + device``).
- An **action** is ``Action(stage, kind, microbatch)`` with ``kind`` one of
  ``F`` (forward), ``B`` (full backward), ``I`` (backward for the input gradient only)
  and ``W`` (backward for the weight gradient only); ``I`` then ``W`` together do what
  ``B`` does (zero-bubble schedules split ``B`` this way).
- A **schedule** is a list with one list of actions per device, in the order that
  device runs them. Its string form is relative to the device: ``"F0"``, ``"B3"`` on a
  one-chunk device; ``"0F1"``, ``"2F1"`` (chunk 2, forward, microbatch 1) when the
  schedule has several chunks per device.

Times: ``t_f`` and ``t_b`` are the forward and full-backward times of one microbatch
through one device's whole share of the model. A chunk holds ``1/v`` of that share, so
each action on a ``v``-chunk device takes ``1/v`` of those times; this keeps schedules
with different ``v`` comparable (same total work). ``t_comm`` is the delay of every
transfer between two different devices, whatever ``v``.

Two conventions for the bubble, named everywhere:

- ``bubble_fraction_of_total``: idle time / total device time, GPipe's
  ``(K - 1) / (M + K - 1)``.
- ``bubble_over_ideal``: idle time / compute time, Megatron's ``(K - 1) / M``
  (``(K - 1) / (v M)`` interleaved). For ``K = 8, M = 32``: 17.9% vs 21.9%.

This module is a leaf: it never imports a student file. ``python -m minitorch.timeline
--schedule 1f1b -K 4 -M 8`` (which looks up YOUR 1F1B and interleaved generators) prints a
timeline and its metrics.
"""
from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple
from xml.sax.saxutils import escape

KINDS = ("F", "B", "I", "W")
IDLE = "·"


class Action(NamedTuple):
    """One unit of pipeline work: ``kind`` (F/B/I/W) of ``microbatch`` on ``stage``."""

    stage: int
    kind: str
    microbatch: int


Schedule = list[list[Action]]


def stage_of(device: int, chunk: int, num_devices: int) -> int:
    """The stage index of ``chunk`` on ``device`` (stages go round the devices)."""
    return chunk * num_devices + device


def device_of(stage: int, num_devices: int) -> int:
    """The device that holds ``stage``."""
    return stage % num_devices


def chunk_of(stage: int, num_devices: int) -> int:
    """Which of its device's chunks ``stage`` is."""
    return stage // num_devices


# ---------------------------------------------------------------- string forms

_ACTION_TEXT = re.compile(r"(\d*)([FBIW])(\d+)")


def format_action(action: Action, num_devices: int, num_chunks: int = 1) -> str:
    """``"F3"`` for a one-chunk schedule, ``"1F3"`` (chunk 1) when ``num_chunks > 1``."""
    text = f"{action.kind}{action.microbatch}"
    return f"{chunk_of(action.stage, num_devices)}{text}" if num_chunks > 1 else text


def parse_action(text: str, device: int, num_devices: int) -> Action:
    """Parse ``"B3"`` or ``"2F1"`` as an action of ``device`` (the chunk defaults to 0).

    Raises:
        ValueError: ``text`` is not of the form ``[chunk]KIND microbatch``.
    """
    match = _ACTION_TEXT.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"device {device}: cannot read action {text!r}; expected e.g. 'F0', 'B3' or '1F2'")
    chunk = int(match.group(1) or 0)
    return Action(stage_of(device, chunk, num_devices), match.group(2), int(match.group(3)))


def parse_schedule(rows: Sequence[str | Sequence[str]]) -> Schedule:
    """A schedule from one string (``"F0 F1 B0 B1"``) or list of strings per device."""
    num_devices = len(rows)
    schedule = []
    for device, row in enumerate(rows):
        texts = row.split() if isinstance(row, str) else list(row)
        schedule.append([parse_action(text, device, num_devices) for text in texts])
    return schedule


def format_schedule(schedule: Sequence[Sequence[Action]], num_chunks: int | None = None) -> list[str]:
    """One line per device, e.g. ``["F0 F1 B0 B1", ...]`` (inverse of ``parse_schedule``)."""
    num_devices = len(schedule)
    if num_chunks is None:
        num_chunks = _infer_chunks(schedule, num_devices)
    return [" ".join(format_action(a, num_devices, num_chunks) for a in row) for row in schedule]


# ---------------------------------------------------------------- simulation


@dataclass(frozen=True)
class Slot:
    """An action placed in time: it runs on ``device`` as that device's ``step``-th action."""

    device: int
    step: int
    action: Action
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """The result of :func:`simulate`: every action's start and end, and the metrics.

    ``slots[d]`` lists device ``d``'s actions in schedule order. Time starts at 0.
    """

    slots: tuple[tuple[Slot, ...], ...]
    num_chunks: int
    num_microbatches: int

    @property
    def num_devices(self) -> int:
        return len(self.slots)

    @property
    def makespan(self) -> float:
        """Time from the first start to the last end: one training step."""
        return max((row[-1].end for row in self.slots if row), default=0.0)

    @property
    def busy_per_device(self) -> list[float]:
        return [sum(slot.end - slot.start for slot in row) for row in self.slots]

    @property
    def idle_per_device(self) -> list[float]:
        """Makespan minus busy time, per device (head, gaps and tail together)."""
        return [self.makespan - busy for busy in self.busy_per_device]

    @property
    def bubble_fraction_of_total(self) -> float:
        """Idle / total device time (GPipe's convention: ``(K-1)/(M+K-1)``)."""
        return sum(self.idle_per_device) / (self.num_devices * self.makespan)

    @property
    def bubble_over_ideal(self) -> float:
        """Idle / compute time (Megatron's convention: ``(K-1)/M``, ``/v`` interleaved)."""
        return sum(self.idle_per_device) / sum(self.busy_per_device)

    @property
    def peak_in_flight(self) -> list[float]:
        """Per device, the most microbatches whose activations it holds at once.

        A microbatch enters a stage at the start of its F and leaves at the end of its
        B (or I: after the input gradient only the smaller inputs of W remain). Each
        chunk holds ``1/v`` of the device's layers, so it counts ``1/v``.
        """
        peaks = []
        for row in self.slots:
            held = peak = 0
            for slot in row:
                held += {"F": 1, "B": -1, "I": -1}.get(slot.action.kind, 0)
                peak = max(peak, held)
            peaks.append(peak / self.num_chunks)
        return peaks


def simulate(
    schedule: Sequence[Sequence[Action | tuple | str]],
    t_f: float = 1.0,
    t_b: float = 2.0,
    *,
    t_w: float | None = None,
    t_comm: float = 0.0,
    num_microbatches: int | None = None,
    num_chunks: int | None = None,
) -> Timeline:
    """Place every action at the earliest time its dependencies allow.

    Dependencies (``S`` stages): F of microbatch m on stage s waits for F of m on stage
    ``s - 1``; B (or I) of m on stage s waits for B/I of m on stage ``s + 1`` (on the last
    stage: for its own F); W waits for I of the same stage and microbatch; a device runs
    one action at a time, in its list's order. A dependency on another device arrives
    ``t_comm`` later.

    Args:
        schedule: one list per device of :class:`Action` (or ``(stage, kind,
            microbatch)`` tuples, or strings such as ``"F0"``/``"1B2"``).
        t_f, t_b: forward and full-backward time of one microbatch through one
            device's share of the model (each of its ``v`` chunks takes ``1/v``).
        t_w: the W part of ``t_b`` (then I takes ``t_b - t_w``); needed when the
            schedule has I or W actions.
        t_comm: delay of a transfer between two devices.
        num_microbatches, num_chunks: the expected ``M`` and ``v``; inferred from the
            largest microbatch and stage in the schedule when ``None``. Pass them to
            catch a schedule that leaves out a whole microbatch or chunk.

    Returns:
        A :class:`Timeline` with start and end times and the metrics.

    Raises:
        ValueError: a malformed, missing, repeated or misplaced action, or a deadlock
            (an order no execution can follow); the message names the device and step.
    """
    rows = validate(schedule, num_microbatches=num_microbatches, num_chunks=num_chunks)
    num_devices = len(rows)
    num_chunks = _infer_chunks(rows, num_devices) if num_chunks is None else num_chunks
    num_microbatches = _infer_microbatches(rows) if num_microbatches is None else num_microbatches
    _check_times(t_f, t_b, t_w, t_comm, rows)
    split = _split_actions(rows)
    durations = {"F": t_f, "B": t_b, "I": t_b - (t_w or 0.0), "W": t_w or 0.0}
    durations = {kind: time / num_chunks for kind, time in durations.items()}
    placed = _place(rows, durations, t_comm, num_devices * num_chunks, split)
    return Timeline(tuple(tuple(row) for row in placed), num_chunks, num_microbatches)


def validate(
    schedule: Sequence[Sequence[Action | tuple | str]],
    *,
    num_microbatches: int | None = None,
    num_chunks: int | None = None,
) -> Schedule:
    """The schedule as :class:`Action` rows, once every action is known to be well formed,
    on its device, in range and present exactly once (F and B, or F, I and W, for every
    stage and microbatch). The order's feasibility is :func:`simulate`'s to check (a
    deadlock only shows when actions are placed in time).

    Raises:
        ValueError: the first problem, naming the device and step.
    """
    rows = _as_actions(schedule)
    num_devices = len(rows)
    if num_devices == 0:
        raise ValueError("a schedule needs at least one device, got an empty list")
    if num_chunks is None:
        num_chunks = _infer_chunks(rows, num_devices)
    if num_microbatches is None:
        num_microbatches = _infer_microbatches(rows)
    _validate(rows, num_devices, num_chunks, num_microbatches)
    return rows


def _infer_microbatches(rows: Schedule) -> int:
    return 1 + max((a.microbatch for row in rows for a in row), default=-1)


def _split_actions(rows: Schedule) -> set:
    """The (stage, microbatch) pairs whose backward is split into I and W."""
    return {(a.stage, a.microbatch) for row in rows for a in row if a.kind == "I"}


def _as_actions(schedule) -> Schedule:
    if isinstance(schedule, (str, bytes)) or not isinstance(schedule, Sequence):
        raise ValueError(f"a schedule is a list with one list of actions per device, got {type(schedule).__name__}")
    num_devices = len(schedule)
    rows = []
    for device, row in enumerate(schedule):
        if isinstance(row, str):
            row = row.split()
        if not isinstance(row, Sequence):
            raise ValueError(f"device {device}: expected a list of actions, got {type(row).__name__}")
        actions = []
        for step, item in enumerate(row):
            if isinstance(item, str):
                actions.append(parse_action(item, device, num_devices))
                continue
            if not isinstance(item, Sequence) or len(item) != 3:
                raise ValueError(f"device {device} step {step}: expected Action(stage, kind, microbatch), got {item!r}")
            stage, kind, microbatch = item
            if isinstance(stage, bool) or isinstance(microbatch, bool) or not (
                isinstance(stage, int) and isinstance(microbatch, int)
            ):
                raise ValueError(f"device {device} step {step}: stage and microbatch must be ints, got {item!r}")
            if kind not in KINDS:
                raise ValueError(f"device {device} step {step}: kind must be one of F, B, I, W, got {kind!r}")
            actions.append(Action(stage, kind, microbatch))
        rows.append(actions)
    return rows


def _infer_chunks(rows, num_devices: int) -> int:
    num_stages = 1 + max((a.stage for row in rows for a in row), default=num_devices - 1)
    return max(1, -(-num_stages // num_devices))


def _check_times(t_f, t_b, t_w, t_comm, rows) -> None:
    if t_f <= 0 or t_b <= 0:
        raise ValueError(f"t_f and t_b must be > 0, got t_f={t_f}, t_b={t_b}")
    if t_comm < 0:
        raise ValueError(f"t_comm must be >= 0, got {t_comm}")
    split = any(a.kind in "IW" for row in rows for a in row)
    if split and (t_w is None or not 0 < t_w < t_b):
        raise ValueError(f"a schedule with I/W actions needs 0 < t_w < t_b, got t_w={t_w}, t_b={t_b}")


def _validate(rows: Schedule, num_devices: int, num_chunks: int, num_microbatches: int) -> None:
    """Check every action is well placed, once."""
    num_stages = num_devices * num_chunks
    where: dict[Action, tuple[int, int]] = {}
    for device, row in enumerate(rows):
        for step, action in enumerate(row):
            text = format_action(action, num_devices, num_chunks)
            if not 0 <= action.stage < num_stages:
                raise ValueError(f"device {device} step {step}: stage {action.stage} out of range 0..{num_stages - 1}")
            if device_of(action.stage, num_devices) != device:
                raise ValueError(
                    f"device {device} step {step}: {action.kind}{action.microbatch} of stage {action.stage} "
                    f"belongs on device {device_of(action.stage, num_devices)} (stage % {num_devices})"
                )
            if not 0 <= action.microbatch < num_microbatches:
                raise ValueError(
                    f"device {device} step {step}: microbatch {action.microbatch} out of range 0..{num_microbatches - 1}"
                )
            if action in where:
                raise ValueError(f"device {device} step {step}: {text} repeats step {where[action][1]}")
            where[action] = (device, step)
    for stage in range(num_stages):
        device = device_of(stage, num_devices)
        for microbatch in range(num_microbatches):
            has = {kind for kind in KINDS if Action(stage, kind, microbatch) in where}
            if "B" in has and has & {"I", "W"}:
                raise ValueError(f"device {device}: microbatch {microbatch} on stage {stage} has both B and I/W")
            needed = ["F"] + (["I", "W"] if has & {"I", "W"} else ["B"])
            for kind in needed:
                if kind not in has:
                    text = format_action(Action(stage, kind, microbatch), num_devices, num_chunks)
                    raise ValueError(f"device {device}: missing {text} (stage {stage}, microbatch {microbatch})")


def _place(rows: Schedule, durations: dict, t_comm: float, num_stages: int, split: set) -> list[list[Slot]]:
    num_devices = len(rows)
    end: dict[Action, float] = {}
    placed: list[list[Slot]] = [[] for _ in rows]
    free = [0.0] * num_devices
    progress = True
    while progress:
        progress = False
        for device, row in enumerate(rows):
            while len(placed[device]) < len(row):
                action = row[len(placed[device])]
                ready = 0.0
                for dependency in _dependencies(action, num_stages, split):
                    if dependency not in end:
                        break
                    delay = t_comm if device_of(dependency.stage, num_devices) != device else 0.0
                    ready = max(ready, end[dependency] + delay)
                else:
                    start = max(free[device], ready)
                    end[action] = free[device] = start + durations[action.kind]
                    placed[device].append(Slot(device, len(placed[device]), action, start, end[action]))
                    progress = True
                    continue
                break
    if any(len(p) < len(row) for p, row in zip(placed, rows)):
        raise ValueError(_deadlock_message(rows, placed, end, num_stages, split))
    return placed


def _dependencies(action: Action, num_stages: int, split: set) -> list[Action]:
    stage, kind, microbatch = action
    if kind == "F":
        return [Action(stage - 1, "F", microbatch)] if stage > 0 else []
    if kind == "W":
        return [Action(stage, "I", microbatch)]
    own_forward = Action(stage, "F", microbatch)
    if stage == num_stages - 1:
        return [own_forward]
    later = "I" if (stage + 1, microbatch) in split else "B"
    return [Action(stage + 1, later, microbatch), own_forward]


def _deadlock_message(rows, placed, end, num_stages, split) -> str:
    num_devices = len(rows)
    num_chunks = num_stages // num_devices
    where = {a: (d, s) for d, row in enumerate(rows) for s, a in enumerate(row)}
    waits = []
    for device, row in enumerate(rows):
        step = len(placed[device])
        if step == len(row):
            continue
        action = row[step]
        missing = next(dep for dep in _dependencies(action, num_stages, split) if dep not in end)
        at_device, at_step = where[missing]
        waits.append(
            f"device {device} step {step} ({format_action(action, num_devices, num_chunks)}) waits for "
            f"{format_action(missing, num_devices, num_chunks)} of stage {missing.stage} "
            f"(device {at_device} step {at_step})"
        )
    return "deadlock, no device can continue: " + "; ".join(waits)


# ---------------------------------------------------------------- renderers


def render_ascii(
    timeline: Timeline,
    *,
    cells_per_unit: int | None = None,
    label: str = "device",
    idle: str = IDLE,
    width: int | None = None,
) -> str:
    """The timeline as text, one line per device.

    The lecture's style where it reads: ``device 0 |F0F1F2F3····B7B7|``, two characters
    per cell, an action of length ``t`` filling ``t * cells_per_unit`` cells with its label
    (a B of 2 units is ``B7B7``), an idle cell two ``·``. It is used when every label is
    two characters (one chunk per device, fewer than 11 microbatches), every action starts
    and ends on a whole unit, and the lines fit in ``width``; or when ``cells_per_unit`` is
    given.

    Otherwise (labels such as ``1F3`` or ``F10`` that would run together, transfer delays
    that put actions between whole units, or too little room) every action is a box that
    starts with ``|`` and its label, ``device 0 |1F3|0B2   ···|1B0   |``, with as few
    columns per time unit as keep the shortest action's label whole. Boxes wider than
    ``width`` are cut into two bands of consecutive time; a timeline that would need more
    is squeezed instead: every column shows the kind of action running in it
    (``FFFF····BBFBBF``), in bands only if even one column per action is too wide.

    Args:
        cells_per_unit: lecture style at this many cells per time unit.
        label: the word before the device number (the lecture uses ``设备``).
        width: the widest line wanted (a terminal's columns); ``None``: no limit.
    """
    num_devices = timeline.num_devices
    slots = [slot for row in timeline.slots for slot in row]
    labels = {s.action: format_action(s.action, num_devices, timeline.num_chunks) for s in slots}
    longest = max([2, *map(len, labels.values())])
    times = [t for s in slots for t in (s.start, s.end)]
    prefixes = [f"{label} {device} " for device in range(num_devices)]
    room = None if width is None else max(1, width - len(prefixes[-1]) - 2)  # between the two "|"
    makespan = timeline.makespan
    if cells_per_unit is not None or (
        longest == 2 and _cells_per_unit(times) == 1 and (room is None or 2 * makespan <= room)
    ):
        cells = cells_per_unit or 1
        rows = [_lecture_row(row, labels, longest, cells, makespan, idle) for row in timeline.slots]
        return "\n".join(f"{prefix}|{row}|" for prefix, row in zip(prefixes, rows))
    shortest = min((s.end - s.start for s in slots), default=1.0)
    columns = _columns_per_unit(times, (longest + 1) / shortest)
    if room is None or makespan * columns <= 2 * room:
        # No left border: a box's "|" at time 0 lines up with an idle row's first "·".
        return _bands(prefixes, _boxed_rows(timeline, labels, columns, idle), columns, room, idle, border="")
    squeezed = max(1, math.floor(room / makespan * shortest)) / shortest
    unit = f"{1 / squeezed:.3g}"
    unit += " time unit" if unit == "1" else " time units"
    note = textwrap.fill(f"(squeezed to fit: 1 column = {unit}, the kind of action running, {idle} idle)", room + len(prefixes[-1]) + 2)
    return note + "\n" + _bands(prefixes, _kinds_rows(timeline, squeezed, idle), squeezed, room, idle, border="|")


def _column(time: float, columns_per_unit: float) -> int:
    """The column where ``time`` falls, rounding halves up: an action of ``d`` units then
    always spans at least ``floor(d * columns_per_unit)`` columns, wherever it starts."""
    return math.floor(time * columns_per_unit + 0.5 + 1e-9)


def _lecture_row(row, labels, cell_width: int, cells_per_unit: int, makespan: float, idle: str) -> str:
    cells = [idle * cell_width] * _column(makespan, cells_per_unit)
    for slot in row:
        for cell in range(_column(slot.start, cells_per_unit), _column(slot.end, cells_per_unit)):
            cells[cell] = labels[slot.action].ljust(cell_width)
    return "".join(cells)


def _boxed_rows(timeline: Timeline, labels, columns: float, idle: str) -> list[str]:
    rows = [[idle] * _column(timeline.makespan, columns) for _ in timeline.slots]
    for device, row in enumerate(timeline.slots):
        for slot in row:
            first, last = _column(slot.start, columns), _column(slot.end, columns)
            rows[device][first:last] = ("|" + labels[slot.action]).ljust(last - first)
    return ["".join(row) for row in rows]


def _kinds_rows(timeline: Timeline, columns: float, idle: str) -> list[str]:
    rows = [[idle] * _column(timeline.makespan, columns) for _ in timeline.slots]
    for device, row in enumerate(timeline.slots):
        for slot in row:
            first, last = _column(slot.start, columns), _column(slot.end, columns)
            rows[device][first:last] = slot.action.kind * (last - first)
    return ["".join(row) for row in rows]


def _columns_per_unit(times: list[float], least: float) -> int:
    """At least ``least`` columns per unit: the smallest integer that puts every time on a
    column if one is close (up to 1.5 times ``least``), else the smallest."""
    for columns in range(math.ceil(least - 1e-9), math.ceil(1.5 * least) + 1):
        if all(abs(t * columns - round(t * columns)) < 1e-6 for t in times):
            return columns
    return math.ceil(least - 1e-9)


def _bands(prefixes: list[str], rows: list[str], columns_per_unit: float, room: int | None, idle: str,
           border: str) -> str:
    """``prefix|row|`` lines, cut into bands of consecutive time when rows are wider than ``room``
    (where possible at a column that starts a box or is idle on every device)."""
    total = len(rows[0]) if rows else 0
    if room is None or total <= room:
        return "\n".join(f"{prefix}{border}{row}|" for prefix, row in zip(prefixes, rows))
    lines, first = [], 0
    while first < total:
        last = first + room
        if last < total:
            clean = (cut for cut in range(last, first + room * 3 // 4, -1) if all(r[cut] in ("|", idle) for r in rows))
            last = next(clean, last)
        last = min(last, total)
        lines.append(f"time {first / columns_per_unit:.4g} to {last / columns_per_unit:.4g}:")
        lines += [f"{prefix}{border}{row[first:last]}{'|' if last == total else ''}" for prefix, row in zip(prefixes, rows)]
        first = last
    return "\n".join(lines)


def _cells_per_unit(times: list[float]) -> int:
    for cells in range(1, 17):
        if all(abs(t * cells - round(t * cells)) < 1e-6 for t in times):
            return cells
    return 8


# Chunk 0 of each kind; later chunks are the same hue, lighter (mixed with white).
_COLOURS = {"F": "#2f6db5", "B": "#e8710a", "I": "#c9302c", "W": "#7b4fa0"}
_KIND_NAMES = {"F": "forward", "B": "backward", "I": "backward, input gradient", "W": "backward, weight gradient"}
_IDLE_FILL = "#ececec"
_CHAR_PX = 6.7  # width of one character of the 11 px monospace font


def _colour(kind: str, chunk: int, num_chunks: int) -> str:
    """The fill of an action: its kind's colour, lighter for each later chunk."""
    mix = 0.0 if num_chunks == 1 else 0.6 * chunk / (num_chunks - 1)
    rgb = [int(_COLOURS[kind][i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * mix):02x}" for c in rgb)


def _text_colour(fill: str) -> str:
    """Black or white, whichever contrasts more with ``fill`` (WCAG relative luminance)."""
    channels = [int(fill[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return "black" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "white"


def render_svg(timeline: Timeline, *, unit_px: float = 24.0, row_px: float = 26.0, title: str = "") -> str:
    """The timeline as a standalone SVG picture: one row per device, one labelled box per
    action, a time axis and a legend, so that it reads without the text around it.

    Colours: F blue, B orange, I red, W purple; each later chunk of a device is a lighter
    shade of the same colour (the legend names them). Every box carries its label (``F3``,
    ``1B0``): the time scale grows until the shortest action's label fits, and the text is
    black or white, whichever contrasts more with the box. Returns the SVG text.
    """
    num_devices, num_chunks = timeline.num_devices, timeline.num_chunks
    slots = [slot for row in timeline.slots for slot in row]
    labels = {s.action: format_action(s.action, num_devices, num_chunks) for s in slots}
    shortest = min((s.end - s.start for s in slots), default=1.0)
    longest = max([2, *map(len, labels.values())])
    unit_px = max(unit_px, (longest * _CHAR_PX + 6) / shortest)
    left, top = 70.0, 30.0 if title else 10.0
    plot_width = timeline.makespan * unit_px
    legend = _legend(sorted({(s.action.kind, chunk_of(s.action.stage, num_devices)) for s in slots},
                            key=lambda kc: (KINDS.index(kc[0]), kc[1])), num_chunks)
    width = max(left + plot_width + 10, left + max((x + w for x, _, w, _ in _legend_layout(legend, 10 ** 6)), default=0))
    layout = _legend_layout(legend, width - left - 10)
    axis_y = top + num_devices * row_px + 14
    height = axis_y + 14 + 18 * (1 + max((row for _, row, _, _ in layout), default=0)) + 6
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'font-family="monospace" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    if title:
        parts.append(f'<text x="{left}" y="18" font-size="13">{escape(title)}</text>')
    for device, row in enumerate(timeline.slots):
        y = top + device * row_px
        parts.append(f'<text x="4" y="{y + row_px * 0.62:.1f}">device {device}</text>')
        parts.append(f'<rect x="{left}" y="{y + 2}" width="{plot_width:.1f}" height="{row_px - 4}" fill="{_IDLE_FILL}"/>')
        for slot in row:
            parts += _box(slot, labels[slot.action], left, y, unit_px, row_px, num_devices, num_chunks)
    step = max(1, math.ceil(timeline.makespan / 20))
    for tick in range(0, math.floor(timeline.makespan) + 1, step):
        parts.append(f'<text x="{left + tick * unit_px:.1f}" y="{axis_y}" text-anchor="middle">{tick}</text>')
    parts.append(f'<text x="4" y="{axis_y}">time</text>')
    legend_y = axis_y + 14
    for (fill, text), (x, line, _, _) in zip(legend, layout):
        y_legend = legend_y + 18 * line
        parts.append(f'<rect x="{left + x:.1f}" y="{y_legend}" width="14" height="12" fill="{fill}" stroke="#999"/>')
        parts.append(f'<text x="{left + x + 18:.1f}" y="{y_legend + 10}">{escape(text)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _box(slot: Slot, text: str, left: float, y: float, unit_px: float, row_px: float, num_devices: int,
         num_chunks: int) -> list[str]:
    x, w = left + slot.start * unit_px, (slot.end - slot.start) * unit_px
    fill = _colour(slot.action.kind, chunk_of(slot.action.stage, num_devices), num_chunks)
    return [
        f'<rect class="action" x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_px - 4}" fill="{fill}" '
        f'stroke="white"><title>{text}: {slot.start:g} to {slot.end:g}</title></rect>',
        f'<text x="{x + w / 2:.1f}" y="{y + row_px * 0.62:.1f}" text-anchor="middle" '
        f'fill="{_text_colour(fill)}">{text}</text>',
    ]


def _legend(kinds_and_chunks: list[tuple[str, int]], num_chunks: int) -> list[tuple[str, str]]:
    """``(fill, text)`` for every kind (and chunk) drawn, then idle."""
    entries = []
    for kind, chunk in kinds_and_chunks:
        name = f"{kind} {_KIND_NAMES[kind]}" + (f", chunk {chunk}" if num_chunks > 1 else "")
        entries.append((_colour(kind, chunk, num_chunks), name))
    return entries + [(_IDLE_FILL, "idle")]


def _legend_layout(entries: list[tuple[str, str]], room: float) -> list[tuple[float, int, float, str]]:
    """``(x, row, width, text)`` of each legend entry, left to right, wrapped at ``room`` pixels."""
    placed, x, row = [], 0.0, 0
    for _, text in entries:
        width = 18 + len(text) * _CHAR_PX + 16
        if x and x + width > room:
            x, row = 0.0, row + 1
        placed.append((x, row, width, text))
        x += width
    return placed


# ---------------------------------------------------------------- generators
# 1F1B and interleaved 1F1B are Problems 4.1 and 4.2: they live in minitorch/pipeline.py
# (your code) and are looked up there by `generator(name)`.


def _check_sizes(num_stages: int, num_microbatches: int) -> None:
    for name, value in (("num_stages", num_stages), ("num_microbatches", num_microbatches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def gpipe(num_stages: int, num_microbatches: int) -> Schedule:
    """GPipe: every forward, then every backward (last microbatch first, as in the lecture)."""
    _check_sizes(num_stages, num_microbatches)
    return [
        [Action(d, "F", m) for m in range(num_microbatches)]
        + [Action(d, "B", m) for m in reversed(range(num_microbatches))]
        for d in range(num_stages)
    ]


def zb_h1(num_stages: int, num_microbatches: int) -> Schedule:
    """Zero Bubble's ZB-H1 (Qi et al. 2023): 1F1B with B split into I and W, W delayed.

    Device d runs, for x = 0, 1, ..., M + K - 2, the triple ``F x``, ``I x-(K-1-d)``,
    ``W x-(K-1)`` (skipping microbatch numbers outside 0..M-1): 1F1B's forwards and
    input-gradient backwards, with each W run K-1-d steps after its I, where it fills what
    was idle time. Peak in-flight stays 1F1B's; at ``F = I = W`` and ``M >= K`` the idle
    time per device is ``(K-1)(F + B - 2W)`` (B the full backward), a third of 1F1B's.
    """
    _check_sizes(num_stages, num_microbatches)
    K, M = num_stages, num_microbatches
    schedule = []
    for d in range(K):
        row = []
        for x in range(M + K - 1):
            for kind, microbatch in (("F", x), ("I", x - (K - 1 - d)), ("W", x - (K - 1))):
                if 0 <= microbatch < M:
                    row.append(Action(d, kind, microbatch))
        schedule.append(row)
    return schedule


# ---------------------------------------------------------------- closed forms


def bubble_fraction_of_total(num_stages: int, num_microbatches: int, num_chunks: int = 1) -> float:
    """Idle / total time of GPipe and 1F1B, ``(K-1)/(M+K-1)``; ``(K-1)/(vM+K-1)`` interleaved."""
    return (num_stages - 1) / (num_chunks * num_microbatches + num_stages - 1)


def bubble_over_ideal(num_stages: int, num_microbatches: int, num_chunks: int = 1) -> float:
    """Idle / compute time of GPipe and 1F1B, ``(K-1)/M``; ``(K-1)/(vM)`` interleaved."""
    return (num_stages - 1) / (num_chunks * num_microbatches)


def makespan(num_stages: int, num_microbatches: int, t_f: float = 1.0, t_b: float = 2.0, num_chunks: int = 1) -> float:
    """One step without transfer delays: ``(M + (K-1)/v)(t_f + t_b)``."""
    return (num_microbatches + (num_stages - 1) / num_chunks) * (t_f + t_b)


def speedup(num_stages: int, num_microbatches: int) -> float:
    """Throughput of a K-stage pipeline relative to one device: ``K M / (M + K - 1)``."""
    return num_stages * num_microbatches / (num_microbatches + num_stages - 1)


def idle_one_f_one_b(num_stages: int, t_f: float, t_b: float) -> float:
    """Idle time per device of GPipe/1F1B: ``(K-1)(F + B)``, B the full backward."""
    return (num_stages - 1) * (t_f + t_b)


def idle_zb_h1(num_stages: int, t_f: float, t_b: float, t_w: float) -> float:
    """Idle time per device of ZB-H1: ``(K-1)(F + B - 2W)``, B the full backward (= I + W)."""
    return (num_stages - 1) * (t_f + t_b - 2 * t_w)


def idle_dualpipe(num_stages: int, t_b: float, t_w: float, t_fb: float) -> float:
    """DualPipe's bubble from the DeepSeek-V3 report, ``(K/2 - 1)(F&B + B - 3W)``.

    ``t_fb`` is the time of one forward and one backward chunk run overlapped (F&B),
    B the full backward. Closed form only: DualPipe is not simulated here.

    Raises:
        ValueError: ``num_stages`` odd (DualPipe feeds microbatches from both ends).
    """
    if num_stages % 2:
        raise ValueError(f"DualPipe needs an even number of stages, got {num_stages}")
    return (num_stages // 2 - 1) * (t_fb + t_b - 3 * t_w)


# ---------------------------------------------------------------- metrics as text


def describe(timeline: Timeline) -> str:
    """The metrics of a timeline as a few lines of text."""
    peaks = ", ".join(f"{p:g}" for p in timeline.peak_in_flight)
    idle = ", ".join(f"{t:g}" for t in timeline.idle_per_device)
    return "\n".join(
        [
            f"makespan {timeline.makespan:g} units",
            f"idle per device [{idle}]",
            f"bubble: {timeline.bubble_fraction_of_total:.1%} of total time (GPipe's convention), "
            f"{timeline.bubble_over_ideal:.1%} of ideal compute (Megatron's)",
            f"peak in-flight microbatches per device [{peaks}]",
        ]
    )
