"""Simulate and draw a pipeline schedule from the command line (provided).

    python -m minitorch.timeline --schedule 1f1b -K 4 -M 8 [--t-comm 0.2] [--svg out.svg]

GPipe and ZB-H1 come from :mod:`minitorch.schedules`; ``1f1b`` and ``interleaved`` are
YOUR ``one_f_one_b`` / ``interleaved_one_f_one_b`` from ``minitorch/pipeline.py``
(Problems 4.1 and 4.2). This is the one provided module that looks up the student's
schedule generators, so that :mod:`minitorch.schedules` stays a leaf.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from minitorch import schedules

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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m minitorch.timeline", description=__doc__.split("\n")[0])
    parser.add_argument("--schedule", choices=GENERATORS, default="1f1b")
    parser.add_argument("-K", type=int, default=4, help="devices (pipeline stages)")
    parser.add_argument("-M", type=int, default=8, help="microbatches")
    parser.add_argument("-v", type=int, default=2, help="chunks per device (interleaved only)")
    parser.add_argument("--t-f", type=float, default=1.0)
    parser.add_argument("--t-b", type=float, default=2.0)
    parser.add_argument("--t-w", type=float, default=None, help="W part of t_b (zb-h1; default t_b/2)")
    parser.add_argument("--t-comm", type=float, default=0.0)
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
    except NotImplementedError as error:
        parser.exit(1, f"{error}: implement it in minitorch/pipeline.py first\n")
    print(f"{args.schedule}, K = {args.K}, M = {args.M}, t_f = {args.t_f:g}, t_b = {args.t_b:g}, t_comm = {args.t_comm:g}")
    print(schedules.render_ascii(timeline))
    print(schedules.describe(timeline))
    if args.svg:
        with open(args.svg, "w", encoding="utf-8") as file:
            file.write(schedules.render_svg(timeline, title=f"{args.schedule} K={args.K} M={args.M}"))


if __name__ == "__main__":
    main()
