"""The schedule renderers: text timelines that fit a width and keep actions apart, and SVG
pictures that read on their own (every box labelled, a legend, readable text colours)."""
import re
import xml.etree.ElementTree as ET

import pytest

from minitorch import pipeline, schedules
from minitorch.schedules import simulate

SVG = "{http://www.w3.org/2000/svg}"
TIMELINES = {
    "1f1b K4 M8, transfers 0.2": lambda: simulate(pipeline.one_f_one_b(4, 8), t_comm=0.2),
    "interleaved K4 M8 v2": lambda: simulate(pipeline.interleaved_one_f_one_b(4, 8, 2)),
    "interleaved K2 M4 v2": lambda: simulate(pipeline.interleaved_one_f_one_b(2, 4, 2)),
    "gpipe K4 M12": lambda: simulate(schedules.gpipe(4, 12)),
    "gpipe K8 M64": lambda: simulate(schedules.gpipe(8, 64)),
    "zb-h1 K4 M8, transfers 0.5": lambda: simulate(schedules.zb_h1(4, 8), t_w=1.0, t_comm=0.5),
}


def labels(timeline, device):
    return [schedules.format_action(s.action, timeline.num_devices, timeline.num_chunks) for s in timeline.slots[device]]


def device_rows(text):
    """Each device's line, bands joined back together (band headers and notes dropped)."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"device (\d+) (.*)$", line)
        if match:
            rows[int(match[1])] = rows.get(int(match[1]), "") + match[2]
    return rows


@pytest.mark.parametrize("name", ["1f1b K4 M8, transfers 0.2", "interleaved K4 M8 v2", "interleaved K2 M4 v2",
                                  "gpipe K4 M12", "zb-h1 K4 M8, transfers 0.5"])
def test_without_a_width_every_action_is_a_separate_labelled_box_in_order(name):
    timeline = TIMELINES[name]()
    rows = device_rows(schedules.render_ascii(timeline))
    for device in range(timeline.num_devices):
        assert re.findall(r"\|(\d*[FBIW]\d+) *", rows[device]) == labels(timeline, device), rows[device]


@pytest.mark.parametrize("name", sorted(TIMELINES))
@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_every_line_fits_the_width_and_still_shows_each_devices_work_in_order(name, width):
    timeline = TIMELINES[name]()
    text = schedules.render_ascii(timeline, width=width)
    assert max(map(len, text.splitlines())) <= width, text
    rows = device_rows(text)
    for device in range(timeline.num_devices):
        row = rows[device]
        boxes = re.findall(r"\|(\d*[FBIW]\d+) *", row)
        if boxes:  # labelled boxes, maybe in bands: every action, in order
            assert boxes == labels(timeline, device), row
        else:  # squeezed: the kinds in order (consecutive actions of one kind merge)
            drawn = re.sub(r"(.)\1*", r"\1", row.replace(schedules.IDLE, "").replace("|", ""))
            kinds = re.sub(r"(.)\1*", r"\1", "".join(s.action.kind for s in timeline.slots[device]))
            assert drawn == kinds, row


def test_the_lecture_style_stays_where_it_reads():
    text = schedules.render_ascii(simulate(pipeline.one_f_one_b(4, 8)), width=80)
    assert text.splitlines()[0] == "device 0 |F0F1F2F3············B0B0F4B1B1F5B2B2F6B3B3F7B4B4··B5B5··B6B6··B7B7|"


def test_a_squeezed_timeline_says_what_a_column_is():
    text = schedules.render_ascii(simulate(schedules.gpipe(8, 64)), width=80)
    assert text.startswith("(squeezed to fit: 1 column = 1 time unit,")
    assert "time 0 to" in text  # 213 units in 69 columns: bands of consecutive time


def _boxes_and_labels(svg_text):
    root = ET.fromstring(svg_text)
    boxes = [e for e in root.iter(f"{SVG}rect") if e.get("class") == "action"]
    texts = [e for e in root.iter(f"{SVG}text")]
    return root, boxes, texts


def _luminance(colour):
    named = {"black": "#000000", "white": "#ffffff"}
    colour = named.get(colour, colour)
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a, b):
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.parametrize("name", ["interleaved K4 M8 v2", "zb-h1 K4 M8, transfers 0.5", "gpipe K4 M12"])
def test_every_svg_box_is_labelled_in_a_readable_colour(name):
    timeline = TIMELINES[name]()
    _, boxes, texts = _boxes_and_labels(schedules.render_svg(timeline, title=name))
    assert len(boxes) == sum(len(row) for row in timeline.slots)
    every_label = sorted(label for device in range(timeline.num_devices) for label in labels(timeline, device))
    by_position = {(t.get("x"), t.get("y")): t for t in texts}
    drawn = []
    for box in boxes:
        x, y, w = float(box.get("x")), float(box.get("y")), float(box.get("width"))
        text = next(t for (tx, ty), t in by_position.items() if abs(float(tx) - (x + w / 2)) < 0.11
                    and y < float(ty) < y + float(box.get("height")))
        assert len(text.text) * 6.7 <= w, f"label {text.text} wider than its box ({w:.1f} px)"
        assert _contrast(box.get("fill"), text.get("fill")) >= 4.5, (text.text, box.get("fill"), text.get("fill"))
        drawn.append(text.text)
    assert sorted(drawn) == every_label


def test_the_svg_legend_names_every_kind_and_chunk_drawn():
    timeline = TIMELINES["interleaved K4 M8 v2"]()
    root, boxes, texts = _boxes_and_labels(schedules.render_svg(timeline))
    words = [t.text for t in texts]
    for entry in ("F forward, chunk 0", "F forward, chunk 1", "B backward, chunk 0", "B backward, chunk 1", "idle"):
        assert entry in words
    fills = {box.get("fill") for box in boxes}
    assert len(fills) == 4  # F and B, two chunks each: four different colours
    swatches = {r.get("fill") for r in root.iter(f"{SVG}rect") if r.get("width") == "14"}
    assert fills <= swatches
