"""The budget figures of a compare: solved share by node index (budget_curves.png) and by generated tokens
(budget_curves_tokens.png), drawn so that every arm can be read.

    from harness.plots import plot_budget_curves, plot_token_curves
    plot_budget_curves(result["budget_curves"], "results/<run>/budget_curves.png", budget=4)
    plot_token_curves(result["token_curves"], "results/<run>/budget_curves_tokens.png")

The curves come from harness.search_stats (budget_curve, token_curve), so the figures draw exactly
what trace_compare.json holds. Arms whose curves coincide (frozen, frozen_matched and the frozen@k
cuts are one search cut at several budgets; an arm that never solves lies on y = 0 like frozen)
would hide one another: they are drawn as one line whose label names every arm on it with where
each one ends, each arm over its own stretch in its own colour (narrower on top of wider, so every
colour shows) with its end marked. Every arm has one colour in every figure (harness.arms), each
group its own line style and marker; the y-axis shows the data (fit_y: cut to the data's range
when that is under half of 0-1, with the range shown in the title), and the legend sits outside
the axes, right of the data. "Tokens" on every axis are completion tokens: what the operator
generated, prompts not counted.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.arms import colour
from harness.files import atomic_path

LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
END_MARKERS = ("|", "x", "+", "1", "2", "3", "4", "_")
LABEL_WIDTH = 34  # legend text wraps here, so the figure keeps its width


def step_value(xs: list[float], ys: list[float], x: float) -> float:
    """A post-step curve's value at x (the last point at or before x)."""
    value = ys[0]
    for xi, yi in zip(xs, ys):
        if xi > x:
            break
        value = yi
    return value


def coincide(a: tuple[list[float], list[list[float]]], b: tuple[list[float], list[list[float]]]) -> bool:
    """Do two post-step curves (xs, [ys, band_lo, band_hi...]) take the same values wherever both are drawn?"""
    (xa, series_a), (xb, series_b) = a, b
    end = min(xa[-1], xb[-1])
    points = sorted({x for x in xa + xb if x <= end})
    return all(abs(step_value(xa, ya, x) - step_value(xb, yb, x)) < 1e-9
               for ya, yb in zip(series_a, series_b) for x in points)


def group_coinciding(curves: dict[str, Any], shape: Callable[[Any], tuple[list[float], list[list[float]]]]
                     ) -> list[list[str]]:
    """Arms in groups whose curves coincide, each group led by its longest curve (first appearance order)."""
    groups: list[list[str]] = []
    for arm, curve in curves.items():
        home = next((g for g in groups if all(coincide(shape(curve), shape(curves[m])) for m in g)), None)
        if home is None:
            groups.append([arm])
        else:
            home.append(arm)
    return [sorted(g, key=lambda m: -shape(curves[m])[0][-1]) for g in groups]


def group_label(group: list[str], ends: dict[str, str]) -> str:
    """'trained (to k = 4)', or for arms on one line 'frozen@9 (to k = 9) = frozen (to k = 4): one curve'."""
    text = " = ".join(f"{m} ({ends[m]})" for m in group) + (": one curve" if len(group) > 1 else "")
    return "\n".join(textwrap.wrap(text, LABEL_WIDTH))


def draw_groups(ax, curves: dict[str, Any], shape, ends: dict[str, str], band: bool) -> None:
    """One line per group of coinciding arms, each member over its own stretch in its own colour, end marked."""
    names = list(curves)
    for i, group in enumerate(group_coinciding(curves, shape)):
        xs, series = shape(curves[group[0]])
        wide = 1.8 + 2.0 * (len(group) - 1)  # the lead under the members: every colour shows
        style = {"linestyle": LINE_STYLES[i % len(LINE_STYLES)], "marker": MARKERS[i % len(MARKERS)],
                 "markersize": 4, "linewidth": wide, "color": colour(group[0], names)}
        ax.step(xs, series[0], where="post", label=group_label(group, ends), **style)
        if band:
            ax.fill_between(xs, series[1], series[2], step="post", alpha=0.12, color=style["color"])
        for j, member in enumerate(group[1:], 1):
            mx, ms = shape(curves[member])
            ax.step(mx, ms[0], where="post", color=colour(member, names), linewidth=wide - 2.0 * j,
                    linestyle=style["linestyle"], marker=END_MARKERS[j % len(END_MARKERS)], markevery=[len(mx) - 1],
                    markersize=11, markeredgewidth=2, label=f"  {member} ends here")


def fit_y(ax, values: Sequence[float], also: Sequence[float] = ()) -> str:
    """A y-range that shows `values` (shares or accuracies in 0-1): the full 0-1 when they span half of it or more,
    else their range widened to the next 0.05 steps; '' for the full range, else a note naming the range shown
    and the full one, for the panel's title."""
    lo, hi = min([*values, *also]), max([*values, *also])
    if hi - lo >= 0.5:
        low, high = 0.0, 1.0
    else:
        low = max(0.0, math.floor(lo / 0.05 - 1e-9) * 0.05 - (0.05 if lo > 0 else 0.0))
        high = min(1.0, math.ceil(hi / 0.05 + 1e-9) * 0.05)
    pad = 0.05 * (high - low)
    ax.set_ylim(low - pad, high + pad)  # a line on the range's ends stays visible
    return "" if (low, high) == (0.0, 1.0) else f"y-axis cut to {low:.2f}-{high:.2f} of the full 0-1"


def node_axis(ax, last: int) -> None:
    """Integer node ticks over 0..last, at least 0..1 so a budget of 0 does not get fractional ticks."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlim(-0.4, max(1, last) + 0.4)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def titled(ax, title: str, note: str) -> None:
    ax.set_title(title + (f"\n({note})" if note else ""), fontsize=9)


def place_legend(ax) -> None:
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def save(fig, path: str | Path) -> Path:
    """The figure to `path` (temp, then rename), cropped to its contents with the outside legend; then closed."""
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return Path(path)


def budget_figure(curves: dict[str, dict[str, Any]], budget: int | None = None):
    """The figure of budget_curves.png: per arm the share of tasks solved by node k with its 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    shape = lambda c: (c["k"], [c["solved"], c["lo"], c["hi"]])  # noqa: E731
    draw_groups(ax, curves, shape, {arm: f"to k = {c['budget']}" for arm, c in curves.items()}, band=True)
    if budget is not None:
        ax.axvline(budget, color="gray", linestyle=":", linewidth=1, label=f"the study's budget ({budget})")
    n = next(iter(curves.values()))["n_tasks"] if curves else 0
    ax.set_xlabel("node index k (0 = the zero-shot answer; each later node one refinement)")
    ax.set_ylabel(f"share of the {n} held-out tasks solved by node k")
    note = fit_y(ax, [v for c in curves.values() for v in (*c["solved"], *c["lo"], *c["hi"])] or [0.0])
    titled(ax, "Solved by budget (95% bands: tasks resampled; a mark on a shared line: where that arm ends)", note)
    node_axis(ax, max((c["k"][-1] for c in curves.values()), default=0))
    place_legend(ax)
    return fig


def token_figure(curves: dict[str, dict[str, Any]]):
    """The figure of budget_curves_tokens.png: per arm the share of tasks solved within t completion tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    shape = lambda c: (c["tokens"], [c["solved"]])  # noqa: E731
    draw_groups(ax, curves, shape, {arm: f"to {c['max_tokens']} tokens" for arm, c in curves.items()}, band=False)
    n = next(iter(curves.values()))["n_tasks"] if curves else 0
    ax.set_xlabel("completion tokens (generated by the operator; prompts not counted), cumulative from node 0")
    ax.set_ylabel(f"share of the {n} held-out tasks solved")
    note = fit_y(ax, [v for c in curves.values() for v in c["solved"]] or [0.0])
    titled(ax, "Solved by completion tokens (each line runs to the most tokens a search of that arm spent)", note)
    place_legend(ax)
    return fig


def plot_budget_curves(curves: dict[str, dict[str, Any]], path: str | Path, budget: int | None = None) -> Path:
    """budget_curves.png (budget_figure)."""
    return save(budget_figure(curves, budget), path)


def plot_token_curves(curves: dict[str, dict[str, Any]], path: str | Path) -> Path:
    """budget_curves_tokens.png (token_figure)."""
    return save(token_figure(curves), path)
