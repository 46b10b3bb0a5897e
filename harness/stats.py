"""Paired statistics over held-out tasks: pure functions of per-task numbers, no trace format.

    from harness.stats import paired_measure
    m = paired_measure([1.0, 0.0, 2.0], [3.0, 0.0, 3.0], lower_is_better=True)
    m["mean_diff"], m["ci95"], m["wilcoxon_p"], m["sign_test_p"], m["mde80"], m["in_words"]

The unit is the task: each value is one task's number (its seeds already averaged), and
a - b is taken task by task. What is reported, and why:
- the exact two-sided sign test (scipy's binomtest) on the tasks that differ, and the Wilcoxon
  signed-rank test, which gives the verdict (`verdict`: better or worse when p < 0.05, on the side its
  rank sum leans to; else no measurable difference): exact at every n (every sign flip of the tasks'
  differences counted through its rank sum, midranks for ties), zero differences dropped
  (Wilcoxon's rule); the same p-values scipy gives (exact without ties, exact permutation with);
- the 95% interval is that same test inverted: every shift d for which the test of the
  differences minus d is not rejected at 0.05 (Hodges-Lehmann's interval, with the Hodges-Lehmann
  shift, the median of the Walsh averages, as its point). So the interval and the verdict cannot
  disagree: the interval excludes 0 exactly when p < 0.05. A percentile bootstrap of the mean was
  shown here before: at n = 16 with 11 tied tasks it excluded 0 while the exact test gave p = 0.0625,
  since a bootstrap of 16 values underestimates the spread of the mean and knows nothing of ties.
  An end of the interval may be open: the test drops zero differences, so at a shift equal to
  some task's difference the p-value jumps (shown as `(` or `)`). No interval when every task's
  difference is the same number (a zero-width interval says nothing about the next task), nor
  over 5 tasks or fewer, where no shift can be rejected (the smallest p is 2^(1-n));
- mde80: the smallest mean difference a paired test at alpha 0.05 (two-sided) finds with
  power 0.8 over this many tasks, (z_0.975 + z_0.8) * sd / sqrt(n) (normal approximation),
  with sd the spread of the task differences; when they are all equal, the spread of the two
  arms' task values taken as independent (an upper bound for a paired design); None when
  that is zero too. It answers "could this design have seen an effect?".
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist, median, pstdev, stdev
from typing import Any, Sequence

BOOTSTRAP_SEED = 0  # the curves' bands (harness.search_stats, harness.compare.plot_arms)
ALPHA = 0.05
POWER = 0.8
DIGITS = 9  # differences are means over seeds: rounded before ranking, so equal ones tie exactly
P_DIGITS = 6  # p-values are stored rounded to 6 decimals: a stored 0 is a p below 1e-6, printed so (p_text)


def p_text(p: float) -> str:
    """'p = 0.0312', or 'p < 1e-6' for a p below what P_DIGITS decimals hold (never 'p = 0')."""
    return "p < 1e-6" if p < 10.0 ** -P_DIGITS else f"p = {p:.3g}"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, linear between neighbours (numpy's default)."""
    pos = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def sign_test(better: int, worse: int) -> float:
    """Two-sided exact sign test p-value of `better` vs `worse` untied tasks (1.0 with none)."""
    from scipy.stats import binomtest

    n = better + worse
    return 1.0 if n == 0 else float(binomtest(better, n, 0.5).pvalue)


# ---- the Wilcoxon signed-rank test, exact, and its interval --------------------------------------

def doubled_ranks(values: Sequence[float]) -> list[int]:
    """Twice the 1-based midrank of each value (ties share their mean rank), so every rank is an integer."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = start + end + 2
        start = end + 1
    return ranks


@lru_cache(maxsize=4096)
def rank_sum_counts(ranks: tuple[int, ...]) -> tuple[int, ...]:
    """counts[s]: how many of the 2^n sign flips give the positive differences a doubled-rank sum of s."""
    counts = [1]
    for rank in ranks:
        grown = counts + [0] * rank
        for total, count in enumerate(counts):
            grown[total + rank] += count
        counts = grown
    return tuple(counts)


def signed_rank_p(diffs: Sequence[float]) -> float:
    """Exact two-sided p of the Wilcoxon signed-rank test (zero differences dropped; 1.0 when none differ):
    2 * the smaller tail of the statistic's distribution over every sign flip, at most 1."""
    nonzero = [d for d in (round(x, DIGITS) for x in diffs) if d != 0]
    if not nonzero:
        return 1.0
    ranks = doubled_ranks([abs(d) for d in nonzero])
    observed = sum(r for r, d in zip(ranks, nonzero) if d > 0)
    counts = rank_sum_counts(tuple(sorted(ranks)))
    tail = min(sum(counts[: observed + 1]), sum(counts[observed:]))
    return min(1.0, 2 * tail / 2 ** len(nonzero))


def wilcoxon_p(diffs: Sequence[float]) -> tuple[float, str]:
    """(two-sided Wilcoxon signed-rank p-value, method) of paired differences; (1.0, 'all zero') when none differ."""
    nonzero = [d for d in (round(x, DIGITS) for x in diffs) if d != 0]
    if not nonzero:
        return 1.0, "all zero"
    tied = len(set(abs(d) for d in nonzero)) < len(nonzero)
    return signed_rank_p(nonzero), "exact permutation" if tied else "exact"


def rank_direction(diffs: Sequence[float]) -> int:
    """The side the signed-rank statistic leans to: +1 when the positive differences' ranks outweigh the negative
    ones', -1 the other way, 0 balanced (zeros dropped). A verdict's direction comes from here, the test's own
    statistic, not from counting tasks."""
    nonzero = [d for d in (round(x, DIGITS) for x in diffs) if d != 0]
    ranks = doubled_ranks([abs(d) for d in nonzero])
    lean = sum(r if d > 0 else -r for r, d in zip(ranks, nonzero))
    return (lean > 0) - (lean < 0)


def hodges_lehmann(diffs: Sequence[float]) -> float:
    """The Hodges-Lehmann shift: the median of the Walsh averages (d_i + d_j) / 2, i <= j."""
    values = [round(d, DIGITS) for d in diffs]
    return median((a + b) / 2 for i, a in enumerate(values) for b in values[i:])


def wilcoxon_interval(diffs: Sequence[float], alpha: float = ALPHA) -> dict[str, Any] | None:
    """Every shift d the signed-rank test does not reject (p of diffs - d >= alpha), as [low, high] with each end
    open or closed; None when that set is unbounded (n <= 5 at alpha 0.05) or empty.

    The test's p changes only where a difference minus d changes sign, hits zero, or ties another one in
    size: at the Walsh averages. So it is constant on each open stretch between two of them, and the set
    is found exactly by testing every Walsh average and one point inside each stretch, from the outside in."""
    values = [round(d, DIGITS) for d in diffs]
    walsh = sorted({round((a + b) / 2, DIGITS) for i, a in enumerate(values) for b in values[i:]})
    # pieces in order: (-inf, w0), w0, (w0, w1), w1, ..., wK, (wK, inf); each (low, high, probe, closed)
    pieces = [(-math.inf, walsh[0], walsh[0] - 1.0, False)]
    for k, w in enumerate(walsh):
        pieces.append((w, w, w, True))
        upper = walsh[k + 1] if k + 1 < len(walsh) else math.inf
        pieces.append((w, upper, (w + upper) / 2 if upper != math.inf else w + 1.0, False))

    def accepted(piece: tuple[float, float, float, bool]) -> bool:
        return signed_rank_p([v - piece[2] for v in values]) >= alpha

    first = next((p for p in pieces if accepted(p)), None)
    last = next((p for p in reversed(pieces) if accepted(p)), None)
    if first is None or last is None or first[0] == -math.inf or last[1] == math.inf:
        return None
    return {"low": first[0], "high": last[1], "low_closed": first[3], "high_closed": last[3]}


def interval_text(ci: dict[str, Any]) -> str:
    """[a, b] with ( or ) at an open end."""
    return (f"{'[' if ci['low_closed'] else '('}{ci['low']:+.3g}, {ci['high']:+.3g}"
            f"{']' if ci['high_closed'] else ')'}")


# ---- power ---------------------------------------------------------------------------------------

def min_detectable_effect(diffs: Sequence[float], a: Sequence[float], b: Sequence[float],
                          alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Smallest mean difference detectable with `power` at two-sided `alpha` over len(diffs) tasks (module doc)."""
    n = len(diffs)
    if n < 2:
        return None
    sd = stdev(diffs)
    if sd == 0:
        sd = math.sqrt(pstdev(a) ** 2 + pstdev(b) ** 2)
    if sd == 0:
        return None
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return z * sd / math.sqrt(n)


def tasks_for_effect(sd: float, effect: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """Tasks a paired test needs to find a mean difference `effect` with `power`, given the task differences' sd
    (normal approximation); None when sd is 0 (no spread measured)."""
    if sd <= 0:
        return None
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return max(2, math.ceil((z * sd / effect) ** 2))


# ---- one measure, paired over tasks ----------------------------------------------------------------

def spread_in_words(diffs: Sequence[float], all_equal: bool, ci: dict[str, Any] | None, p: float,
                    shift: float) -> str:
    """What the interval says, in words (module doc): the interval of the verdict's own test, or why none."""
    n = len(diffs)
    if all_equal:
        return (f"every one of the {n} tasks differs by exactly {diffs[0]:+.3g}: no spread, so no interval "
                "(a zero-width interval is not evidence)")
    if ci is None:
        return (f"no 95% interval: over {n} tasks the signed-rank test rejects no shift at {ALPHA} (its smallest "
                f"p is {2.0 ** (1 - n):.3g})")
    hole = p < ALPHA and ci["low"] < 0 < ci["high"]
    return (f"Hodges-Lehmann shift {shift:+.3g}, 95% interval {interval_text(ci)}: the shifts the Wilcoxon test "
            f"does not reject" + (f"; 0 itself is rejected ({p_text(p)})" if hole else ""))


def paired_measure(a: Sequence[float], b: Sequence[float], lower_is_better: bool) -> dict[str, Any]:
    """A vs B on one measure, task by task (a[i] and b[i] are task i's values); see the module doc."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_measure needs two equal, non-empty lists (got {len(a)} and {len(b)})")
    diffs = [x - y for x, y in zip(a, b)]
    better = sum((d < 0) if lower_is_better else (d > 0) for d in diffs)
    worse = sum((d > 0) if lower_is_better else (d < 0) for d in diffs)
    all_equal = len(set(round(d, 12) for d in diffs)) == 1
    p_wilcoxon, method = wilcoxon_p(diffs)
    lean = rank_direction(diffs) * (-1 if lower_is_better else 1)  # +1: the ranks favour a
    verdict = "no measurable difference" if p_wilcoxon >= ALPHA or lean == 0 else "better" if lean > 0 else "worse"
    ci = None if all_equal else wilcoxon_interval(diffs)
    shift = hodges_lehmann(diffs)
    mde = min_detectable_effect(diffs, a, b)
    n = len(diffs)
    return {"n_tasks": n, "mean_a": round(sum(a) / n, 4), "mean_b": round(sum(b) / n, 4),
            "mean_diff": round(sum(diffs) / n, 4), "lower_is_better": lower_is_better,
            "hodges_lehmann_shift": round(shift, 4),
            "ci95": None if ci is None else [round(ci["low"], 4), round(ci["high"], 4)],
            "ci95_closed": None if ci is None else [ci["low_closed"], ci["high_closed"]],
            "ci95_method": "the Wilcoxon signed-rank test inverted: every shift d with p(a - b - d) >= 0.05",
            "ci_excludes_zero": p_wilcoxon < ALPHA, "all_differences_equal": all_equal,
            "better_tasks": better, "tied_tasks": n - better - worse, "worse_tasks": worse,
            "sign_test_p": round(sign_test(better, worse), P_DIGITS), "wilcoxon_p": round(p_wilcoxon, P_DIGITS),
            "wilcoxon_method": method, "verdict": verdict, "mde80": None if mde is None else round(mde, 4),
            "sd_of_differences": round(stdev(diffs), 4) if n > 1 else None,
            "in_words": spread_in_words(diffs, all_equal, ci, p_wilcoxon, shift)}
