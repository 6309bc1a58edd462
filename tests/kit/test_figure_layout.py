"""The layout check the report's figures must pass (tests/figure_layout.py) finds each kind of
problem it names, on small figures made to have exactly that problem, and passes a clean one."""
import matplotlib
import pytest

matplotlib.use("Agg")
from figure_layout import layout_problems  # noqa: E402
from matplotlib import pyplot  # noqa: E402


@pytest.fixture
def axes():
    figure, axis = pyplot.subplots(figsize=(5, 3.5), layout="constrained")
    axis.plot([1, 2, 3], [1, 4, 9], "o-", label="squares")
    axis.set(title="A clean figure", xlabel="x", ylabel="y")
    yield figure, axis
    pyplot.close(figure)


def only(problems, *words):
    assert problems and all(all(word in problem for word in words) for problem in problems), problems


def test_a_clean_figure_with_its_legend_outside_the_axes_passes(axes):
    figure, _ = axes
    figure.legend(loc="outside lower center")
    assert layout_problems(figure) == []


def test_a_legend_over_a_line_is_found(axes):
    figure, axis = axes
    axis.legend(loc="center", bbox_to_anchor=(0.5, 0.4), fontsize=14)
    only(layout_problems(figure), "legend covers", "squares")


def test_a_legend_over_bars_is_found(axes):
    figure, axis = axes
    axis.bar([1, 2, 3], [9, 9, 9], label="bars")
    axis.legend(loc="upper left")
    assert any("legend covers" in problem and "bar" in problem for problem in layout_problems(figure))


def test_a_legend_over_tick_labels_is_found(axes):
    figure, axis = axes
    axis.legend(loc="center right", bbox_to_anchor=(0.02, 0.5))
    assert any("tick label" in problem and "overlaps axes 0 legend" in problem for problem in layout_problems(figure))


def test_a_bar_that_runs_off_its_axis_is_found(axes):
    figure, axis = axes
    axis.barh([2], [50], label="long")
    axis.set_xlim(0, 4)
    figure.legend(loc="outside lower center")
    only(layout_problems(figure), "bar", "runs outside the axes")


def test_a_point_outside_the_view_is_found(axes):
    figure, axis = axes
    axis.set_ylim(0, 5)
    figure.legend(loc="outside lower center")
    only(layout_problems(figure), "line 'squares' runs outside the axes")


def test_texts_that_overlap_and_texts_cut_off_are_found(axes):
    figure, axis = axes
    axis.text(2, 9.5, "an annotation over the title", ha="center", va="bottom", fontsize=12)
    figure.suptitle("a title far wider than the figure it sits on, so that both its ends are cut off")
    figure.legend(loc="outside lower center")
    problems = layout_problems(figure)
    assert any("overlaps" in p and "an annotation" in p for p in problems), problems
    assert any("a title far wider" in p and "cut off" in p for p in problems), problems
    assert any("an annotation" in p and "lies outside the axes" in p for p in problems), problems


def test_a_line_without_a_label_and_a_series_without_a_legend_entry_are_found(axes):
    figure, axis = axes
    axis.plot([1, 3], [2, 2], color="grey")
    axis.errorbar([1, 2], [3, 4], yerr=0.5, label="with error bars")
    axis.legend(handles=axis.lines[:1], loc="upper left", bbox_to_anchor=(1.02, 1))  # "squares" only
    problems = layout_problems(figure)
    assert "axes 0: a line without a label" in problems
    assert "axes 0: ErrorbarContainer 'with error bars' is not in a legend" in problems
