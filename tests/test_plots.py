"""The budget figures: arms whose curves coincide share one labelled line (each arm's end marked), the legend
sits outside the axes, and solved share against generated tokens counts a search's completion tokens up to its
first gold node. Constructed traces whose answers are known."""

from __future__ import annotations

from harness.compare import compare_arms
from harness.plots import budget_figure, group_coinciding, plot_budget_curves, plot_token_curves, token_figure
from harness.search_stats import token_curve
from harness.traces import prefix_trace
from tests.test_compare import arm


def test_token_curve_counts_completion_tokens_up_to_the_first_gold_node():
    # 50 completion tokens a node: gold at node 0 costs 50, at node 2 150; the unsolved search spends 4 nodes = 200
    traces = arm([0, 2, None, 1], max_iterations=3)  # tasks p0 (seeds 0, 1) and p1 (seeds 0, 1)
    curve = token_curve(traces)
    assert curve["tokens"] == [0, 50, 100, 150, 200] and curve["max_tokens"] == 200
    # p0: 1/2 of its seeds by 50 tokens, 2/2 by 150; p1: 0/2, then 1/2 at 100 (its seed 1: gold at node 1)
    assert curve["solved"] == [0.0, 0.25, 0.5, 0.75, 0.75] and curve["n_tasks"] == 2


def arms_like_the_self_study():
    """frozen never solves and frozen_matched is its search cut at a larger budget; self never solves either."""
    long = arm([None] * 4, max_iterations=9)
    return {"frozen": [prefix_trace(t, 4) for t in long], "frozen_matched": [prefix_trace(t, 6) for t in long],
            "sft": arm([0, None, 0, None], max_iterations=4), "trained": arm([0, 1, 0, None], max_iterations=4),
            "self": arm([None] * 4, max_iterations=4)}


def test_coinciding_arms_share_one_labelled_line_and_the_legend_sits_outside():
    result = compare_arms(arms_like_the_self_study(), resamples=200)
    assert group_coinciding(result["budget_curves"], lambda c: (c["k"], [c["solved"], c["lo"], c["hi"]])) == \
        [["frozen_matched", "frozen", "self"], ["sft"], ["trained"]]
    fig = budget_figure(result["budget_curves"], budget=4)
    ax = fig.axes[0]
    labels = [t.get_text().replace("\n", " ") for t in ax.get_legend().get_texts()]
    assert labels[0] == "frozen_matched (to k = 6) = frozen (to k = 4) = self (to k = 4): one curve"
    assert "  frozen ends here" in labels and "  self ends here" in labels and "sft (to k = 4)" in labels
    fig.canvas.draw()
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 > axes.x1  # right of the data, covering no band
    assert ax.get_ylim()[0] < 0 < 1 < ax.get_ylim()[1]  # a line on y = 0 or 1 stays visible


def test_the_token_figure_groups_the_same_way_and_both_files_are_written(tmp_path):
    result = compare_arms(arms_like_the_self_study(), resamples=200)
    fig = token_figure(result["token_curves"])
    labels = [t.get_text().replace("\n", " ") for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0].startswith("frozen_matched (to 350 tokens) = frozen (to 250 tokens) = self (to 250 tokens)")
    for path in (plot_budget_curves(result["budget_curves"], tmp_path / "b.png", 4),
                 plot_token_curves(result["token_curves"], tmp_path / "t.png")):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
