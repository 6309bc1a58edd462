"""The write-up's figures, computed from code when the kit is built: the answer key's
clock-cycle tables, simulated schedule timelines and their SVG pictures, the tensor-parallel
communication numbers and Problem 5's plans (``{{figure NAME ARGS}}`` and ``{{svg ...}}`` of
:mod:`kit.writeup`).

Schedule figures (``{{figure timeline 1f1b 4 8}}``, ``{{figure metrics gpipe 4 32 t_comm=0.2}}``,
``{{svg interleaved 4 8 v=2}}``) take a schedule name of ``minitorch.timeline.GENERATORS``, K
and M, then optional ``v=`` (chunks, interleaved only), ``t_b=``, ``t_w=``, ``t_comm=`` (F takes
1 unit, B 2 by default). They are simulated by the provided ``minitorch.schedules``; 1F1B and
interleaved 1F1B come from ``minitorch.pipeline``, i.e. the ANSWER KEY when the kit is built in
the course repository. Where the build runs without a working answer key (its solutions stubbed
or the file absent), figures that need it render a short note instead and the build prints a
warning; the build does not fail, and the drift check then reports the changed write-up.
"""
from __future__ import annotations

import posixpath
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
FIGURE_FOLDER = "figures"  # beside the kit's README; pages link their pictures there


class FigureError(Exception):
    """A figure directive with bad arguments; the write-up adds the file and line."""


class _NoAnswerKey(Exception):
    """A figure needs the answer key, and this build's ``minitorch.pipeline`` cannot provide it."""


def _answer_key(call: Callable[[], T], what: str) -> T:
    """``call()``, turning "the answer key is missing or stubbed" into :class:`_NoAnswerKey`."""
    try:
        return call()
    except (ImportError, NotImplementedError) as error:
        print(f"warning: the write-up's {what} needs the answer key: {type(error).__name__}: {error}",
              file=sys.stderr)
        raise _NoAnswerKey(what) from error


def _placeholder(what: str, command: str) -> str:
    return (f"({what}: drawn from the reference solution when the kit is built; this build had none.\n"
            f" Run `{command}` to draw it from your code.)")


def clock_cycles_waves(num_microbatches: str, num_stages: str) -> str:
    """The answer key's ``clock_cycles(M, K)``, one wave per line, as in the lecture."""
    try:
        waves = _answer_key(lambda: _clock_cycles(num_microbatches, num_stages), "clock-cycle table")
    except _NoAnswerKey:
        return _placeholder("the clock-cycle table", "python -m minitorch.demos")
    lines = [f"clock_cycles({num_microbatches}, {num_stages}):"]
    lines += [f"  k = {index}: {wave}" for index, wave in enumerate(waves)]
    return "\n".join(lines)


def clock_cycles_grid(num_microbatches: str, num_stages: str) -> str:
    """The answer key's ``clock_cycles(M, K)`` as a stage x wave grid of ``(i, j)`` cells."""
    try:
        waves = _answer_key(lambda: _clock_cycles(num_microbatches, num_stages), "clock-cycle grid")
    except _NoAnswerKey:
        return _placeholder("the clock-cycle grid", "python -m minitorch.demos")
    cell = "{:<8}"
    lines = ["wave     " + "".join(cell.format(k) for k in range(len(waves))).rstrip()]
    for stage in range(int(num_stages)):
        cells = []
        for wave in waves:
            pair = next(((i, j) for i, j in wave if j == stage), None)
            cells.append(cell.format(f"({pair[0]},{pair[1]})" if pair else ""))
        lines.append(f"stage {stage:<3}" + "".join(cells).rstrip())
    return "\n".join(lines)


def _clock_cycles(num_microbatches: str, num_stages: str) -> list[list[tuple[int, int]]]:
    from minitorch.pipeline import clock_cycles

    return list(clock_cycles(int(num_microbatches), int(num_stages)))


# ---------------------------------------------------------------- schedule figures

SCHEDULE_TITLES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved 1F1B", "zb-h1": "ZB-H1"}
_OPTIONS = {"v": int, "t_b": float, "t_w": float, "t_comm": float}


@dataclass(frozen=True)
class ScheduleFigure:
    """What a schedule figure shows: ``name`` on K devices with M microbatches, and its times."""

    name: str
    num_stages: int
    num_microbatches: int
    v: int = 1
    t_b: float = 2.0
    t_w: float | None = None
    t_comm: float = 0.0

    @classmethod
    def parse(cls, args: tuple[str, ...]) -> "ScheduleFigure":
        """From directive words ``SCHEDULE K M [v=2] [t_b=2] [t_w=1] [t_comm=0.2]``."""
        if len(args) < 3 or args[0] not in SCHEDULE_TITLES:
            raise FigureError(f"expected SCHEDULE K M [key=value ...] with SCHEDULE one of "
                               f"{', '.join(SCHEDULE_TITLES)}; got {' '.join(args)!r}")
        options = {}
        for word in args[3:]:
            key, _, value = word.partition("=")
            if key not in _OPTIONS or not value:
                raise FigureError(f"unknown schedule option {word!r}; use {', '.join(k + '=' for k in _OPTIONS)}")
            options[key] = _OPTIONS[key](value)
        return cls(args[0], int(args[1]), int(args[2]), **options)

    @property
    def t_w_simulated(self) -> float | None:
        """The W time given to the simulator: ZB-H1 splits B in halves unless ``t_w`` says otherwise."""
        if self.t_w is None and self.name == "zb-h1":
            return self.t_b / 2
        return self.t_w

    @property
    def title(self) -> str:
        words = [f"{SCHEDULE_TITLES[self.name]}, K = {self.num_stages}, M = {self.num_microbatches}"]
        if self.name == "interleaved":
            words.append(f"v = {self.v}")
        t_w = self.t_w_simulated
        if t_w is None:
            times = f"F = 1, B = {self.t_b:g}"
        else:
            times = f"F = 1, I = {self.t_b - t_w:g}, W = {t_w:g}"
        if self.t_comm:
            times += f", transfers {self.t_comm:g}"
        return ", ".join(words) + f" ({times} units)"

    @property
    def stem(self) -> str:
        """A file name without extension, e.g. ``interleaved_k4_m8_v2``."""
        stem = f"{self.name.replace('-', '_')}_k{self.num_stages}_m{self.num_microbatches}"
        if self.name == "interleaved":
            stem += f"_v{self.v}"
        return stem + (f"_comm{self.t_comm:g}".replace(".", "p") if self.t_comm else "")

    @property
    def command(self) -> str:
        """The command that draws the same timeline from the student's code."""
        words = [f"python -m minitorch.timeline --schedule {self.name} -K {self.num_stages} -M {self.num_microbatches}"]
        if self.name == "interleaved":
            words.append(f"-v {self.v}")
        if self.t_b != 2.0:
            words.append(f"--t-b {self.t_b:g}")
        if self.t_w is not None:
            words.append(f"--t-w {self.t_w:g}")
        if self.t_comm:
            words.append(f"--t-comm {self.t_comm:g}")
        return " ".join(words)

    def simulate(self):
        """The simulated :class:`minitorch.schedules.Timeline` (raises _NoAnswerKey)."""
        from minitorch import schedules, timeline

        def schedule():
            generate = timeline.generator(self.name)
            if self.name == "interleaved":
                return generate(self.num_stages, self.num_microbatches, self.v)
            return generate(self.num_stages, self.num_microbatches)

        actions = _answer_key(schedule, f"{self.title} figure")
        return schedules.simulate(actions, 1.0, self.t_b, t_w=self.t_w_simulated, t_comm=self.t_comm)


def _metrics_line(timeline) -> str:
    peaks = ", ".join(f"{p:g}" for p in timeline.peak_in_flight)
    return (f"step {timeline.makespan:g} units; bubble {timeline.bubble_fraction_of_total:.1%} of total time, "
            f"{timeline.bubble_over_ideal:.1%} of ideal compute; peak in-flight [{peaks}]")


def timeline(*args: str) -> str:
    """Title, the lecture's ASCII timeline and one metrics line of a simulated schedule."""
    from minitorch.schedules import render_ascii

    figure = ScheduleFigure.parse(args)
    try:
        simulated = figure.simulate()
    except _NoAnswerKey:
        return f"{figure.title}:\n" + _placeholder("this timeline", figure.command)
    return "\n".join([f"{figure.title}:", render_ascii(simulated), _metrics_line(simulated)])


def metrics(*args: str) -> str:
    """The title and the metrics line of a simulated schedule, without the timeline."""
    figure = ScheduleFigure.parse(args)
    try:
        simulated = figure.simulate()
    except _NoAnswerKey:
        return f"{figure.title}:\n" + _placeholder("these metrics", figure.command)
    return f"{figure.title}:\n    {_metrics_line(simulated)}"


def svg_picture(args: tuple[str, ...], pictures: dict[str, str], page_folder: str = ".") -> str:
    """Add the SVG of a simulated schedule to ``pictures`` (kit path -> text); return its Markdown
    link, relative to the page's folder in the kit (``problems`` for ``problems/4-*.md``)."""
    from minitorch.schedules import render_svg

    figure = ScheduleFigure.parse(args)
    try:
        simulated = figure.simulate()
    except _NoAnswerKey:
        return f"*(Picture of {figure.title}: {_placeholder('not generated', figure.command)})*"
    path = f"{FIGURE_FOLDER}/{figure.stem}.svg"
    pictures[path] = render_svg(simulated, title=figure.title)
    return f"![{figure.title}]({posixpath.relpath(path, page_folder)})"


def tp_comm() -> str:
    """The output of ``python -m minitorch.tp_comm`` (provided code: needs no answer key)."""
    import contextlib
    import io

    from minitorch import tp_comm as demo

    with contextlib.redirect_stdout(io.StringIO()) as output:
        demo._demo()
    return output.getvalue().rstrip("\n")


def plans(model: str, gpus: str, batch: str, ts: str, ps: str) -> str:
    """The answer key's Problem 5 estimates of the plans ``ts`` x ``ps`` (comma-separated) of a
    ``minitorch.cost_model.MODELS`` preset, and its best plan; e.g. ``plans 1t 3072 3072 4,8,16 32,64``."""
    from minitorch import cost_model

    preset = cost_model.MODELS[model]
    cluster = cost_model.anchor_cluster(int(gpus)) if preset is cost_model.ANCHOR else cost_model.Cluster(gpus=int(gpus))
    grid = [(int(t), int(p)) for t in ts.split(",") for p in ps.split(",")]

    def table() -> str:
        rows = cost_model.estimates(preset, cluster, int(batch), grid)
        return cost_model.format_plans(rows) + "\n" + cost_model.format_best(preset, cluster, int(batch))

    title = f"{preset.name} on {gpus} GPUs, batch {batch} ('!' = does not fit in {cluster.memory_bytes / 1e9:g} GB):"
    try:
        return title + "\n" + _answer_key(table, "plans table")
    except _NoAnswerKey:
        return title + "\n" + _placeholder("this table", f"python -m minitorch.cost_model --model {model} --gpus {gpus} "
                                                          f"--batch {batch}")


# Text figures computed from code at build time: {{figure NAME ARGS}} -> FIGURES[NAME](*ARGS).
FIGURES: dict[str, Callable[..., str]] = {
    "clock_cycles_waves": clock_cycles_waves,
    "clock_cycles_grid": clock_cycles_grid,
    "timeline": timeline,
    "metrics": metrics,
    "tp_comm": tp_comm,
    "plans": plans,
}
