"""What is wrong with a matplotlib figure's layout, from matplotlib's own layout information
(window extents from the figure's renderer, paths in display coordinates), never from pixels.

:func:`layout_problems` draws the figure once and returns one line per problem:

- two texts overlap (titles, axis labels, tick labels, annotations, the suptitle, a legend);
- a legend covers a series (a line, its markers or error bars, a bar) or a text;
- something drawn in an axes (a line's points, an error bar, a bar, an annotation) lies outside
  the axes' view, i.e. it is clipped or runs off the axis;
- something lies outside the figure (cut off in the PNG);
- a line is drawn without a label, or a labelled series has no legend entry.
"""
from __future__ import annotations

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.collections import Collection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.transforms import Bbox

TOLERANCE = 1.0  # pixels: edges that touch are not an overlap


def overlap(first: Bbox, second: Bbox) -> bool:
    return (min(first.x1, second.x1) - max(first.x0, second.x0) > TOLERANCE
            and min(first.y1, second.y1) - max(first.y0, second.y0) > TOLERANCE)


def inside(inner: Bbox, outer: Bbox) -> bool:
    return (inner.x0 >= outer.x0 - TOLERANCE and inner.x1 <= outer.x1 + TOLERANCE
            and inner.y0 >= outer.y0 - TOLERANCE and inner.y1 <= outer.y1 + TOLERANCE)


def shown(text: Text) -> bool:
    return text.get_visible() and bool(text.get_text().strip())


def tick_labels(axis: Axes) -> list[tuple[str, Text]]:
    """The tick labels drawn: visible, not empty, at a tick inside the view."""
    found = []
    for name, ticks, view in (("x", axis.xaxis.get_major_ticks(), axis.get_xlim()),
                              ("y", axis.yaxis.get_major_ticks(), axis.get_ylim())):
        low, high = sorted(view)
        for tick in ticks:
            if low - 1e-9 * abs(high - low) <= tick.get_loc() <= high + 1e-9 * abs(high - low):
                found += [(f"{name} tick label {label.get_text()!r}", label) for label in (tick.label1, tick.label2)
                          if shown(label)]
    return found


def texts(figure: Figure) -> list[tuple[str, Artist]]:
    """Every text of the figure drawn on its own (the suptitle is one of ``figure.texts``), and
    every legend (one box each), by name."""
    found: list[tuple[str, Artist]] = [(f"figure text {t.get_text()[:40]!r}", t) for t in figure.texts if shown(t)]
    found += [(f"figure legend {index}", legend) for index, legend in enumerate(figure.legends)]
    for index, axis in enumerate(figure.axes):
        where = f"axes {index}"
        labelled = [("title", axis.title), ("x label", axis.xaxis.label), ("y label", axis.yaxis.label)]
        found += [(f"{where} {name} {text.get_text()[:40]!r}", text) for name, text in labelled if shown(text)]
        found += [(f"{where} {name}", text) for name, text in tick_labels(axis)]
        found += [(f"{where} text {t.get_text()[:40]!r}", t) for t in axis.texts if shown(t)]
        if axis.get_legend() is not None:
            found.append((f"{where} legend", axis.get_legend()))
    return found


def series(axis: Axes) -> list[tuple[str, Artist]]:
    """The data drawn in an axes: lines, collections (error bars) and bars."""
    found: list[tuple[str, Artist]] = [(f"line {line.get_label()!r}", line) for line in axis.lines if line.get_visible()]
    found += [(f"collection {c.get_label()!r}", c) for c in axis.collections if c.get_visible()]
    found += [(f"bar {p.get_label()!r}", p) for p in axis.patches if p.get_visible() and isinstance(p, Rectangle)]
    return found


def display_points(artist: Artist) -> np.ndarray:
    """The points of a line or a collection's paths, in display pixels (finite ones)."""
    if isinstance(artist, Line2D):
        paths = [artist.get_transform().transform_path(artist.get_path())]
    else:
        assert isinstance(artist, Collection)
        transform = artist.get_transform()
        paths = [transform.transform_path(path) for path in artist.get_paths()]
    points = np.concatenate([path.vertices for path in paths]) if paths else np.empty((0, 2))
    return points[np.isfinite(points).all(axis=1)]


def covers(legend: Bbox, artist: Artist, renderer) -> bool:
    """Whether a legend's box covers part of a series: a bar's box, a line's segments or markers."""
    if isinstance(artist, Rectangle):
        return overlap(legend, artist.get_window_extent(renderer))
    paths = ([artist.get_transform().transform_path(artist.get_path())] if isinstance(artist, Line2D) else
             [artist.get_transform().transform_path(path) for path in artist.get_paths()])
    pad = artist.get_markersize() * renderer.points_to_pixels(1.0) / 2 if isinstance(artist, Line2D) else 0.0
    padded = Bbox.from_extents(legend.x0 - pad, legend.y0 - pad, legend.x1 + pad, legend.y1 + pad)
    return any(path.intersects_bbox(padded, filled=False) for path in paths)


def extent(artist: Artist, renderer) -> Bbox:
    return artist.get_window_extent(renderer)


def text_problems(figure: Figure, renderer) -> list[str]:
    named = [(name, extent(artist, renderer)) for name, artist in texts(figure)]
    problems = [f"{first} overlaps {second}" for i, (first, box) in enumerate(named)
                for second, other in named[i + 1:] if overlap(box, other)]
    problems += [f"{name} is cut off: outside the figure" for name, box in named if not inside(box, figure.bbox)]
    return problems


def legend_problems(figure: Figure, renderer) -> list[str]:
    legends = [(f"figure legend {i}", legend) for i, legend in enumerate(figure.legends)]
    legends += [(f"axes {i} legend", axis.get_legend()) for i, axis in enumerate(figure.axes) if axis.get_legend()]
    problems = []
    for name, legend in legends:
        box = extent(legend, renderer)
        for index, axis in enumerate(figure.axes):
            problems += [f"{name} covers axes {index} {what}" for what, artist in series(axis)
                         if covers(box, artist, renderer)]
    return problems


def clipping_problems(figure: Figure, renderer) -> list[str]:
    problems = []
    for index, axis in enumerate(figure.axes):
        view = axis.bbox
        for what, artist in series(axis):
            if isinstance(artist, Rectangle):
                outside = not inside(artist.get_window_extent(renderer), view)
            else:
                points = display_points(artist)
                outside = bool(len(points)) and not inside(Bbox.from_extents(*points.min(0), *points.max(0)), view)
            if outside:
                problems.append(f"axes {index} {what} runs outside the axes (clipped)")
        problems += [f"axes {index} text {t.get_text()[:40]!r} lies outside the axes" for t in axis.texts
                     if shown(t) and not inside(extent(t, renderer), view)]
        if not inside(axis.get_tightbbox(renderer), figure.bbox):
            problems.append(f"axes {index} (with its labels) is cut off: outside the figure")
    return problems


def legend_entries(figure: Figure) -> list[str]:
    legends = list(figure.legends) + [axis.get_legend() for axis in figure.axes if axis.get_legend()]
    return [text.get_text() for legend in legends for text in legend.get_texts()]


def unnamed_series(figure: Figure) -> list[str]:
    """Lines without a label, and labelled lines, bars or error bars missing from every legend."""
    entries = set(legend_entries(figure))
    problems = []
    for index, axis in enumerate(figure.axes):
        inner = {id(part) for container in axis.containers for part in container.get_children()}
        labelled = [(c.get_label(), type(c).__name__) for c in axis.containers
                    if isinstance(c, (BarContainer, ErrorbarContainer))]
        for line in axis.lines:
            if id(line) not in inner:
                labelled.append((line.get_label(), "line"))
        for label, kind in labelled:
            if label.startswith("_") and kind == "line":
                problems.append(f"axes {index}: a line without a label")
            elif not label.startswith("_") and label not in entries:
                problems.append(f"axes {index}: {kind} {label!r} is not in a legend")
    return problems


def layout_problems(figure: Figure) -> list[str]:
    """Every problem of the figure as it would be saved, one line each (empty: none)."""
    figure.canvas.draw()  # runs the layout engine: extents are those of the saved image
    renderer = figure.canvas.get_renderer()
    return (text_problems(figure, renderer) + legend_problems(figure, renderer)
            + clipping_problems(figure, renderer) + unnamed_series(figure))
