"""The lecture companion's deterministic numbers (sections 1, 2, 4, 5 and the bubble lesson)."""
import pytest

from minitorch import companion, schedules

LECTURE_NAIVE_K4 = """\
设备 0 |F0F0····································B0B0B0B0|
设备 1 |····F0F0························B0B0B0B0········|
设备 2 |········F0F0············B0B0B0B0················|
设备 3 |············F0F0B0B0B0B0························|"""


def test_gpt3_layer_split():
    split = companion.gpt3_layer_split()
    assert split["embedding_layers"] == pytest.approx(0.35, abs=0.005)
    assert split["fewest_stages"] == {"inference": 8, "training": 48}


def test_naive_pipeline_timeline_and_utilisation():
    naive = companion.naive_pipeline()
    assert schedules.render_ascii(naive["timeline"], cells_per_unit=2, label="设备") == LECTURE_NAIVE_K4
    assert naive["utilisation"] == pytest.approx(0.25, abs=1e-12)
    assert naive["utilisation_with_transfers"] == pytest.approx(0.20, abs=1e-12)


def test_communication_intensity_orders():
    rows = {r["scheme"].split()[0]: r["gb_per_s"] for r in companion.communication_intensity(sequences_per_gpu=(1,))}
    assert rows["tensor"] / rows["pipeline"] > 100  # two orders of magnitude
    assert 25 < rows["tensor"] < 300  # more than InfiniBand, less than NVLink


def test_bubble_vs_microbatches_matches_formula():
    rows = companion.bubble_vs_microbatches()
    assert max(abs(r["simulated"] - r["formula"]) for r in rows) < 1e-12
    assert [r["M"] for r in rows if r["M"] == 8][0] == 8
    assert schedules.bubble_fraction_of_total(4, 16) == pytest.approx(0.16, abs=0.005)  # M = 4K: 16-18%
    assert schedules.bubble_fraction_of_total(8, 32) == pytest.approx(0.18, abs=0.005)


def test_throughput_table():
    rows = {(r["K"], r["M"]): r for r in companion.throughput_table()}
    assert rows[8, 32]["formula"] == pytest.approx(6.56, abs=0.005)
    assert all(rows[k, 1]["formula"] == 1 for k in (1, 2, 4, 8))
    assert [round(rows[k, 1]["with_transfers"], 2) for k in (2, 4, 8)] == [0.86, 0.8, 0.77]


def test_exercise_3_microbatch_cost():
    assert companion.step_time(4, 4, 0.2, 0.01, 1024) == pytest.approx(58.0, abs=0.05)
    assert companion.step_time(64, 4, 0.2, 0.01, 1024) == pytest.approx(72.4, abs=0.05)
    assert companion.step_time(16, 4, 0.2, 0.01, 1024) == pytest.approx(47.9, abs=0.05)
    assert companion.best_microbatches(4, 0.2, 0.01, 1024) == pytest.approx(12.4, abs=0.05)
    assert companion.fit_line([1, 2, 3], [5, 7, 9]) == pytest.approx((3, 2), abs=1e-12)


def test_recomputation_tables():
    strategies = companion.recomputation_strategies(64)
    assert [r["stored"] for r in strategies] == [64, 2, 16, 16]
    assert [r["extra_forwards"] for r in strategies] == [0, 2016, 56, 64]
    pipeline = {r["M"]: r["saving"] for r in companion.pipeline_recomputation()}
    assert pipeline[32] == pytest.approx(8.7, abs=0.05)
    assert pipeline[1] < 1  # M = 1 stores a little more


def test_activation_memory_per_layer():
    rows = {r["setting"].split(" t =")[0]: r["bytes"] for r in companion.activation_memory_per_layer(t=8)}
    s, h = 2048, 12288
    assert rows["no parallelism"] == pytest.approx(s * h * (34 + 5 * 96 * s / h), rel=1e-12)
    assert rows["tensor + sequence parallel"] == pytest.approx(rows["no parallelism"] / 8, rel=1e-12)


def test_bubble_lesson_numbers():
    lesson = companion.bubble_lesson()
    assert lesson["over_ideal"] == pytest.approx(0.219, abs=0.0005)
    assert lesson["fraction_of_total"] == pytest.approx(0.179, abs=0.0005)
    assert lesson["interleaved_v4_over_ideal"] == pytest.approx(0.055, abs=0.0005)
    assert lesson["idle_zb_h1"] == pytest.approx(lesson["idle_1f1b"] / 3, abs=1e-12)
    assert (lesson["peak_gpipe"], lesson["peak_1f1b"]) == (32, 8)
    assert lesson["over_ideal_2m"] == pytest.approx(lesson["over_ideal"] / 2, abs=1e-12)
    assert lesson["deepseek"] == {"1F1B": 21, "ZB1P": 7, "DualPipe": (3, 6)}


@pytest.mark.parametrize("section", ["1", "4", "5", "6", "bubble"])
def test_sections_print(section, capsys):
    companion.main([section])
    assert capsys.readouterr().out.strip()


def test_unknown_section_exits():
    with pytest.raises(SystemExit):
        companion.main(["3"])
