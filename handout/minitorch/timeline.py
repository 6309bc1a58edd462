"""Simulate and draw a pipeline schedule from the command line (provided).

    python -m minitorch.timeline --schedule 1f1b -K 4 -M 8 [--t-comm 0.2] [--svg out.svg]

GPipe and ZB-H1 come from minitorch/schedules.py; 1f1b and interleaved are YOUR
one_f_one_b / interleaved_one_f_one_b from minitorch/pipeline.py (Problems 4.1 and
4.2). The timeline is drawn to fit the terminal (--width to choose); F takes t_f
units, B t_b, a transfer between devices t_comm.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from minitorch import cli, schedules

# This is the one provided module that looks up the student's schedule generators, so that
# minitorch.schedules stays a leaf.
GENERATORS = ("gpipe", "1f1b", "interleaved", "zb-h1")


def generator(name: str) -> Callable[..., schedules.Schedule]:
    """The schedule generator called ``name`` (one of ``GENERATORS``).

    Raises:
        ValueError: an unknown name.
    """
    if name == "gpipe":
        return schedules.gpipe
    if name == "zb-h1":
        return schedules.zb_h1
    if name not in GENERATORS:
        raise ValueError(f"unknown schedule {name!r}; choose from {', '.join(GENERATORS)}")
    from minitorch import pipeline  # the student's file: imported only when asked for

    return pipeline.one_f_one_b if name == "1f1b" else pipeline.interleaved_one_f_one_b


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("timeline", __doc__)
    parser.add_argument("--schedule", choices=GENERATORS, default="1f1b")
    parser.add_argument("-K", type=int, default=4, help="devices (pipeline stages)")
    parser.add_argument("-M", type=int, default=8, help="microbatches")
    parser.add_argument("-v", type=int, default=2, help="chunks per device (interleaved only)")
    parser.add_argument("--t-f", type=float, default=1.0, help="time of one forward (default 1)")
    parser.add_argument("--t-b", type=float, default=2.0, help="time of one full backward (default 2)")
    parser.add_argument("--t-w", type=float, default=None, help="W part of t_b (zb-h1; default t_b/2)")
    parser.add_argument("--t-comm", type=float, default=0.0, help="delay of a transfer between devices (default 0)")
    parser.add_argument("--width", type=int, default=None, help="widest line to draw (default: the terminal's)")
    parser.add_argument("--svg", help="also write the timeline as an SVG picture to this path")
    args = parser.parse_args(argv)
    try:
        if args.schedule == "interleaved":
            schedule = generator("interleaved")(args.K, args.M, args.v)
        else:
            schedule = generator(args.schedule)(args.K, args.M)
        t_w = args.t_w if args.t_w is not None else args.t_b / 2
        timeline = schedules.simulate(schedule, args.t_f, args.t_b, t_w=t_w, t_comm=args.t_comm)
    except ValueError as error:
        parser.error(str(error))
    title = f"{args.schedule}, K = {args.K}, M = {args.M}{f', v = {args.v}' if args.schedule == 'interleaved' else ''}"
    print(f"{title}, t_f = {args.t_f:g}, t_b = {args.t_b:g}, t_comm = {args.t_comm:g}")
    print(schedules.render_ascii(timeline, width=args.width or cli.terminal_width()))
    print(schedules.describe(timeline))
    if args.svg:
        with open(args.svg, "w", encoding="utf-8") as file:
            file.write(schedules.render_svg(timeline, title=title))
        print(f"wrote {args.svg}")
    return 0


def run_command(argv: Sequence[str] | None = None) -> int:
    """``main`` as a command: a reader that stops early (``... | head``) ends it quietly."""
    try:
        status = cli.run(main, "python -m minitorch.timeline", argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python's recipe: point stdout at devnull so the flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    raise SystemExit(run_command())
