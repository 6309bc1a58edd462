"""The provided schedule simulator against the lecture (section 2.3, 4) and the bubble lesson.

Timelines are the lecture's, copied character by character; numbers are the lecture's
figures with the tolerance of their printed rounding.
"""
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitorch import pipeline, schedules
from minitorch import timeline as timeline_cli
from minitorch.schedules import Action, simulate

LECTURE_GPIPE_K4_M8 = """\
设备 0 |F0F1F2F3F4F5F6F7··················B7B7B6B6B5B5B4B4B3B3B2B2B1B1B0B0|
设备 1 |··F0F1F2F3F4F5F6F7············B7B7B6B6B5B5B4B4B3B3B2B2B1B1B0B0····|
设备 2 |····F0F1F2F3F4F5F6F7······B7B7B6B6B5B5B4B4B3B3B2B2B1B1B0B0········|
设备 3 |······F0F1F2F3F4F5F6F7B7B7B6B6B5B5B4B4B3B3B2B2B1B1B0B0············|"""

LECTURE_1F1B_K4_M8 = """\
设备 0 |F0F1F2F3············B0B0F4B1B1F5B2B2F6B3B3F7B4B4··B5B5··B6B6··B7B7|
设备 1 |··F0F1F2········B0B0F3B1B1F4B2B2F5B3B3F6B4B4F7B5B5··B6B6··B7B7····|
设备 2 |····F0F1····B0B0F2B1B1F3B2B2F4B3B3F5B4B4F6B5B5F7B6B6··B7B7········|
设备 3 |······F0B0B0F1B1B1F2B2B2F3B3B3F4B4B4F5B5B5F6B6B6F7B7B7············|"""

PERCENT = 0.05e-2  # the lecture prints one decimal of a percentage


def test_gpipe_lecture_timeline_and_numbers():
    timeline = simulate(schedules.gpipe(4, 8), 1.0, 2.0)
    assert schedules.render_ascii(timeline, label="设备") == LECTURE_GPIPE_K4_M8
    assert timeline.makespan == pytest.approx(33, abs=1e-12)
    assert timeline.bubble_fraction_of_total == pytest.approx(0.273, abs=PERCENT)
    assert timeline.peak_in_flight == [8, 8, 8, 8]


def test_one_f_one_b_lecture_timeline_and_numbers():
    timeline = simulate(pipeline.one_f_one_b(4, 8), 1.0, 2.0)
    assert schedules.render_ascii(timeline, label="设备") == LECTURE_1F1B_K4_M8
    assert timeline.makespan == pytest.approx(33, abs=1e-12)
    assert timeline.bubble_fraction_of_total == pytest.approx(0.273, abs=PERCENT)
    assert timeline.peak_in_flight == [4, 3, 2, 1]


def test_interleaved_v2_halves_bubble_and_holds_5_5():
    one = simulate(pipeline.one_f_one_b(4, 8), 1.0, 2.0)
    two = simulate(pipeline.interleaved_one_f_one_b(4, 8, 2), 1.0, 2.0)
    assert two.idle_per_device == pytest.approx([i / 2 for i in one.idle_per_device], abs=1e-12)
    assert two.peak_in_flight[0] == pytest.approx(5.5, abs=1e-12)


def test_transfers_make_1f1b_worse_than_gpipe():
    gpipe = simulate(schedules.gpipe(4, 32), 1.0, 2.0, t_comm=0.2)
    one = simulate(pipeline.one_f_one_b(4, 32), 1.0, 2.0, t_comm=0.2)
    assert gpipe.bubble_fraction_of_total == pytest.approx(0.096, abs=PERCENT)
    assert one.bubble_fraction_of_total == pytest.approx(0.168, abs=PERCENT)


@pytest.mark.parametrize("num_microbatches", [4, 8, 16, 32, 64])
def test_with_transfers_v4_worse_than_v2(num_microbatches):
    v2 = simulate(pipeline.interleaved_one_f_one_b(4, num_microbatches, 2), 1.0, 2.0, t_comm=0.2)
    v4 = simulate(pipeline.interleaved_one_f_one_b(4, num_microbatches, 4), 1.0, 2.0, t_comm=0.2)
    assert v4.makespan > v2.makespan


def test_lesson_two_conventions_interleaved_and_zero_bubble():
    one = simulate(pipeline.one_f_one_b(8, 32), 1.0, 2.0)
    assert one.bubble_over_ideal == pytest.approx(0.219, abs=PERCENT)
    assert one.bubble_fraction_of_total == pytest.approx(0.179, abs=PERCENT)
    interleaved = simulate(pipeline.interleaved_one_f_one_b(8, 32, 4), 1.0, 2.0)
    assert interleaved.bubble_over_ideal == pytest.approx(0.055, abs=PERCENT)
    zb = simulate(schedules.zb_h1(8, 32), 1.0, 2.0, t_w=1.0)  # F = I = W = 1
    assert zb.idle_per_device == pytest.approx([i / 3 for i in one.idle_per_device], abs=1e-12)
    assert zb.peak_in_flight == one.peak_in_flight


def test_throughput_and_dualpipe_closed_forms():
    assert schedules.speedup(8, 32) == pytest.approx(6.56, abs=0.005)
    assert schedules.idle_one_f_one_b(8, 1, 2) == 21
    assert schedules.idle_zb_h1(8, 1, 2, 1) == 7
    assert (schedules.idle_dualpipe(8, 2, 1, 2), schedules.idle_dualpipe(8, 2, 1, 3)) == (3, 6)
    with pytest.raises(ValueError, match="even"):
        schedules.idle_dualpipe(7, 2, 1, 2)


@pytest.mark.parametrize("num_stages", [2, 4, 8])
def test_single_microbatch_with_half_forward_transfers_is_slower_than_one_device(num_stages):
    timeline = simulate(schedules.gpipe(num_stages, 1), 1.0, 2.0, t_comm=0.5)
    assert 0.77 - 0.005 <= num_stages * 3.0 / timeline.makespan <= 0.86 + 0.005


@given(num_stages=st.integers(1, 8), num_microbatches=st.integers(1, 24), t_b=st.sampled_from([0.5, 1.0, 2.0]))
def test_gpipe_and_1f1b_match_closed_forms(num_stages, num_microbatches, t_b):
    for make in (schedules.gpipe, pipeline.one_f_one_b):
        timeline = simulate(make(num_stages, num_microbatches), 1.0, t_b)
        assert timeline.makespan == pytest.approx(schedules.makespan(num_stages, num_microbatches, 1.0, t_b), rel=1e-12)
        expected = schedules.bubble_fraction_of_total(num_stages, num_microbatches)
        assert timeline.bubble_fraction_of_total == pytest.approx(expected, abs=1e-12)
        assert timeline.bubble_over_ideal == pytest.approx(schedules.bubble_over_ideal(num_stages, num_microbatches), abs=1e-12)


@given(num_stages=st.integers(1, 6), groups=st.integers(1, 4), num_chunks=st.integers(1, 4))
def test_interleaved_matches_closed_form(num_stages, groups, num_chunks):
    m = groups * num_stages
    timeline = simulate(pipeline.interleaved_one_f_one_b(num_stages, m, num_chunks), 1.0, 2.0)
    assert timeline.makespan == pytest.approx(schedules.makespan(num_stages, m, 1.0, 2.0, num_chunks), rel=1e-12)
    assert timeline.bubble_over_ideal == pytest.approx(schedules.bubble_over_ideal(num_stages, m, num_chunks), abs=1e-12)


@given(num_stages=st.integers(1, 8), extra=st.integers(0, 16))
def test_zb_h1_idle_is_closed_form_when_m_at_least_k(num_stages, extra):
    timeline = simulate(schedules.zb_h1(num_stages, num_stages + extra), 1.0, 2.0, t_w=1.0)
    for idle in timeline.idle_per_device:
        assert idle == pytest.approx(schedules.idle_zb_h1(num_stages, 1.0, 2.0, 1.0), abs=1e-12)


def test_strings_round_trip_and_simulate_accepts_them():
    rows = schedules.format_schedule(pipeline.interleaved_one_f_one_b(2, 2, 2))
    assert rows[0].startswith("0F0 0F1 1F0")
    assert schedules.parse_schedule(rows) == pipeline.interleaved_one_f_one_b(2, 2, 2)
    assert simulate(["F0 B0", "F0 B0"]).makespan == pytest.approx(6, abs=1e-12)


@pytest.mark.parametrize(
    "schedule, message",
    [
        ([["F0", "B0"], ["F0"]], "device 1: missing B0"),
        ([["F0", "F0", "B0"], ["F0", "B0"]], "device 0 step 1: F0 repeats step 0"),
        ([[Action(1, "F", 0), Action(0, "B", 0)], ["F0", "B0"]], "device 0 step 0: F0 of stage 1 belongs on device 1"),
        ([["B0", "F0"], ["F0", "B0"]], "deadlock.*device 0 step 0 \\(B0\\) waits for B0 of stage 1 \\(device 1 step 1\\)"),
        ([["F0", "X0"]], "cannot read action 'X0'"),
        ([[(0, "F", 0), (0, "Q", 0)]], "device 0 step 1: kind must be one of"),
        ([["F0", "I0", "W0"]], "needs 0 < t_w < t_b"),
        ([], "at least one device"),
    ],
)
def test_invalid_schedules_name_device_and_step(schedule, message):
    with pytest.raises(ValueError, match=message):
        simulate(schedule, 1.0, 2.0)


def test_missing_microbatch_caught_when_m_given():
    with pytest.raises(ValueError, match="missing F1"):
        simulate(schedules.gpipe(2, 1), num_microbatches=2)


def test_svg_has_one_box_per_action_and_parses():
    timeline = simulate(schedules.zb_h1(3, 4), 1.0, 2.0, t_w=1.0)
    root = ET.fromstring(schedules.render_svg(timeline, title="ZB-H1 <K=3>"))
    boxes = [e for e in root.iter("{http://www.w3.org/2000/svg}rect") if e.get("class") == "action"]
    assert len(boxes) == sum(len(row) for row in timeline.slots)


def test_cli_prints_timeline_and_metrics(capsys, tmp_path):
    timeline_cli.main(["--schedule", "1f1b", "-K", "4", "-M", "8", "--width", "80", "--svg", str(tmp_path / "t.svg")])
    out = capsys.readouterr().out
    assert LECTURE_1F1B_K4_M8.replace("设备", "device") in out
    assert "27.3% of total time" in out and "[4, 3, 2, 1]" in out
    assert (tmp_path / "t.svg").read_text().startswith("<svg")


@pytest.mark.parametrize("make, args", [(schedules.gpipe, (0, 2)), (pipeline.one_f_one_b, (2, 0)),
                                        (pipeline.interleaved_one_f_one_b, (4, 6, 2)), (schedules.zb_h1, (True, 2))])
def test_generators_reject_bad_sizes(make, args):
    with pytest.raises(ValueError):
        make(*args)
