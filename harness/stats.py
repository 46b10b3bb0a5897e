"""Paired statistics over held-out tasks: pure functions of per-task numbers, no trace format.

    from harness.stats import paired_measure
    m = paired_measure([1.0, 0.0, 2.0], [3.0, 0.0, 3.0], lower_is_better=True, resamples=10_000)
    m["mean_diff"], m["ci95"], m["wilcoxon_p"], m["sign_test_p"], m["mde80"], m["in_words"]

The unit is the task: each value is one task's number (its seeds already averaged), and
a - b is taken task by task. What is reported, and why:
- the mean difference with a percentile bootstrap 95% interval that resamples tasks; when
  every task's difference is the same number the interval would have zero width and say
  nothing about the next task, so it is left out (None) and the summary says it in words;
- the exact two-sided sign test (scipy's binomtest) on the tasks that differ, and the
  Wilcoxon signed-rank test (scipy; exact, by permutation when ranks tie; zero differences
  dropped, Wilcoxon's rule);
- mde80: the smallest mean difference a paired test at alpha 0.05 (two-sided) finds with
  power 0.8 over this many tasks, (z_0.975 + z_0.8) * sd / sqrt(n) (normal approximation),
  with sd the spread of the task differences; when they are all equal, the spread of the two
  arms' task values taken as independent (an upper bound for a paired design); None when
  that is zero too. It answers "could this design have seen an effect?".
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist, pstdev, stdev
from typing import Any, Sequence

RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
ALPHA = 0.05
POWER = 0.8


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, linear between neighbours (numpy's default)."""
    pos = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_mean_ci(values: Sequence[float], resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED,
                      level: float = 95.0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean: resample the values (tasks) with replacement."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (100 - level) / 2
    return percentile(means, tail), percentile(means, 100 - tail)


def sign_test(better: int, worse: int) -> float:
    """Two-sided exact sign test p-value of `better` vs `worse` untied tasks (1.0 with none)."""
    from scipy.stats import binomtest

    n = better + worse
    return 1.0 if n == 0 else float(binomtest(better, n, 0.5).pvalue)


EXACT_PERMUTATION_MAX = 16  # 2**16 sign flips: under a second; more tasks with ties take the normal approximation


def wilcoxon_p(diffs: Sequence[float]) -> tuple[float, str]:
    """(two-sided Wilcoxon signed-rank p-value, method) of paired differences; (1.0, 'all zero') when none differ.

    Zero differences are dropped (Wilcoxon's rule). Without ties scipy's exact null distribution is
    used; with tied ranks it enumerates every sign flip (exact permutation) up to EXACT_PERMUTATION_MAX
    tasks, where the normal approximation would be poor (3 equal differences: 0.083 instead of 0.25)."""
    import numpy as np
    from scipy.stats import PermutationMethod, wilcoxon

    nonzero = [d for d in diffs if d != 0]
    if not nonzero:
        return 1.0, "all zero"
    if len(set(abs(d) for d in nonzero)) == len(nonzero):
        method, how = "exact", "exact"
    elif len(nonzero) <= EXACT_PERMUTATION_MAX:
        method, how = PermutationMethod(n_resamples=np.inf), "exact permutation"
    else:
        method, how = "approx", "normal approximation"
    result = wilcoxon(nonzero, alternative="two-sided", method=method)
    return float(result.pvalue), how


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


def paired_measure(a: Sequence[float], b: Sequence[float], lower_is_better: bool,
                   resamples: int = RESAMPLES) -> dict[str, Any]:
    """A vs B on one measure, task by task (a[i] and b[i] are task i's values); see the module doc."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_measure needs two equal, non-empty lists (got {len(a)} and {len(b)})")
    diffs = [x - y for x, y in zip(a, b)]
    better = sum((d < 0) if lower_is_better else (d > 0) for d in diffs)
    worse = sum((d > 0) if lower_is_better else (d < 0) for d in diffs)
    all_equal = len(set(round(d, 12) for d in diffs)) == 1
    ci = None if all_equal else [round(v, 4) for v in bootstrap_mean_ci(diffs, resamples)]
    p_wilcoxon, method = wilcoxon_p(diffs)
    mde = min_detectable_effect(diffs, a, b)
    n = len(diffs)
    mean_diff = sum(diffs) / n
    if all_equal:
        words = (f"every one of the {n} tasks differs by exactly {diffs[0]:+.3g}: no spread, so no interval "
                 "(a zero-width interval is not evidence)")
    else:
        words = f"95% interval over tasks [{ci[0]:+.3g}, {ci[1]:+.3g}]"
    return {"n_tasks": n, "mean_a": round(sum(a) / n, 4), "mean_b": round(sum(b) / n, 4),
            "mean_diff": round(mean_diff, 4), "lower_is_better": lower_is_better, "ci95": ci,
            "ci_excludes_zero": bool(ci and (ci[1] < 0 or ci[0] > 0)), "all_differences_equal": all_equal,
            "resamples": resamples, "bootstrap_seed": BOOTSTRAP_SEED,
            "better_tasks": better, "tied_tasks": n - better - worse, "worse_tasks": worse,
            "sign_test_p": round(sign_test(better, worse), 6), "wilcoxon_p": round(p_wilcoxon, 6),
            "wilcoxon_method": method, "mde80": None if mde is None else round(mde, 4),
            "sd_of_differences": round(stdev(diffs), 4) if n > 1 else None,
            "in_words": words}
