"""The paired statistics' verdict and interval come from one test: the exact Wilcoxon signed-rank test (the
same p-values as scipy) and the shifts it does not reject, so an interval excludes 0 exactly when p < 0.05.
Constructed differences whose answers are known, the committed study's case among them."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy.stats import PermutationMethod, wilcoxon

from harness.stats import hodges_lehmann, paired_measure, rank_direction, signed_rank_p, wilcoxon_interval, wilcoxon_p


def scipy_p(diffs: list[float]) -> float:
    nonzero = [d for d in diffs if d != 0]
    ties = len(set(abs(d) for d in nonzero)) < len(nonzero)
    method = PermutationMethod(n_resamples=np.inf) if ties else "exact"
    return float(wilcoxon(nonzero, alternative="two-sided", method=method).pvalue)


def zero_inside(ci: dict) -> bool:
    low_ok = ci["low"] < 0 or (ci["low"] == 0 and ci["low_closed"])
    high_ok = ci["high"] > 0 or (ci["high"] == 0 and ci["high_closed"])
    return low_ok and high_ok


@pytest.mark.parametrize("diffs", [
    [1, 2, 3, 4, 5, 6], [-1, 2, -3, 4, 5, 6, 7], [5, 5, 5, 5, 4], [-5, -5, -5, -5, -4, 0, 0, 0],
    [0.5, -0.5, 1, 1, 2, -2, 3, 0.25, 0.25], [1, 1, 1, -1, 2, 2, -3, 4, 4, 4, 5, -5],
])
def test_the_exact_p_is_scipys(diffs):
    assert signed_rank_p(diffs) == pytest.approx(scipy_p(diffs), abs=1e-12)


def test_the_exact_p_is_scipys_on_random_tied_differences():
    rng = random.Random(3)
    for _ in range(60):
        diffs = [rng.choice([0, 1, -1, 2, -2, 3, 0.5, -5, 5]) for _ in range(rng.randint(1, 11))]
        if any(diffs):
            assert signed_rank_p(diffs) == pytest.approx(scipy_p(diffs), abs=1e-12), diffs


def test_a_known_interval():
    # six differences 1..6: below a shift of 1 all six are positive, p = 2/64 (rejected); at 1 the zero is dropped
    # and five positives give 2/32 (kept); the other end mirrors it. The Walsh averages' median is 3.5.
    assert wilcoxon_interval([1, 2, 3, 4, 5, 6]) == {"low": 1, "high": 6, "low_closed": True, "high_closed": True}
    assert hodges_lehmann([1, 2, 3, 4, 5, 6]) == 3.5
    assert wilcoxon_interval([1, 2, 3, 4, 5]) is None  # five tasks: p >= 2/32 whatever the shift, no end


def bootstrap_of_the_mean(diffs: list[float], resamples: int = 4000) -> tuple[float, float]:
    """The percentile bootstrap of the mean shown before (resample tasks, 2.5th and 97.5th percentiles)."""
    rng = random.Random(0)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def test_the_committed_trained_vs_sft_case_no_longer_contradicts_itself():
    """results/study-b4-self-20261206, trained vs sft, steps to gold: better on 5 tasks (by 5, 5, 5, 5 and 4 steps),
    tied on 11. The bootstrap of the mean excluded 0 ([-2.69, -0.56] there) beside Wilcoxon p = 0.0625."""
    sft = [5, 0, 0, 5, 5, 0, 5, 0, 5, 5, 0, 5, 0, 5, 0, 5]
    trained = [5, 0, 0, 0, 5, 0, 5, 0, 0, 5, 0, 0, 0, 0, 0, 1]
    diffs = [a - b for a, b in zip(trained, sft)]
    low, high = bootstrap_of_the_mean(diffs)
    assert high < 0  # the old interval excluded 0 ...
    m = paired_measure(trained, sft, lower_is_better=True)
    assert m["wilcoxon_p"] == pytest.approx(0.0625) and m["verdict"] == "no measurable difference"  # ... the test did not
    assert m["ci95"] == [-2.5, 0.0] and m["ci95_closed"] == [True, True] and m["ci_excludes_zero"] is False
    assert "95% interval [-2.5, +0]" in m["in_words"]
    one_more = paired_measure(trained + [0], sft + [5], lower_is_better=True)  # a sixth better task: p = 2/64
    assert one_more["verdict"] == "better" and one_more["ci_excludes_zero"] is True
    assert one_more["ci95"][1] == 0.0 and one_more["ci95_closed"][1] is False  # [.., 0): 0 itself is rejected


def test_interval_and_verdict_agree_on_random_differences():
    rng = random.Random(7)
    checked = 0
    for _ in range(250):
        n = rng.randint(6, 16)
        diffs = [rng.choice([0, 0, 0, 1, -1, 2, -3, 0.5, 5, -5, 0.25, 4]) for _ in range(n)]
        if len(set(diffs)) == 1:
            continue
        m = paired_measure(diffs, [0.0] * n, lower_is_better=True)
        ci = wilcoxon_interval(diffs)
        assert ci is not None
        assert zero_inside(ci) == (m["wilcoxon_p"] >= 0.05) == (m["verdict"] == "no measurable difference"), diffs
        assert m["ci_excludes_zero"] == (m["wilcoxon_p"] < 0.05)
        checked += 1
    assert checked > 200


def test_the_verdict_takes_its_side_from_the_ranks_not_from_counting_tasks():
    # 21 tasks a little better, 19 much worse: more tasks better, but the rank sum leans worse and p = 0.015
    diffs = [-(i + 1) * 0.01 for i in range(21)] + [1 + i * 0.1 for i in range(19)]
    m = paired_measure(diffs, [0.0] * 40, lower_is_better=True)
    assert (m["better_tasks"], m["worse_tasks"]) == (21, 19) and rank_direction(diffs) == 1
    assert m["wilcoxon_p"] < 0.05 and m["verdict"] == "worse" and m["ci95"][0] > 0


def test_wilcoxon_method_names():
    assert wilcoxon_p([0, 0]) == (1.0, "all zero")
    assert wilcoxon_p([1, 2, 3])[1] == "exact" and wilcoxon_p([1, 1, 3])[1] == "exact permutation"


def test_differences_equal_in_exact_arithmetic_tie_whatever_the_float_error():
    # 0.6 - 0.4 and 0.8 - 0.6 are 0.2 both, but 0.19999999999999996 and 0.20000000000000007 as floats: one tie
    floats = [0.6 - 0.4, 0.8 - 0.6, -0.1, 0.3, 0.5, 0.7]
    assert floats[0] != floats[1]
    assert signed_rank_p(floats) == signed_rank_p([0.2, 0.2, -0.1, 0.3, 0.5, 0.7]) == scipy_p([0.2, 0.2, -0.1, 0.3, 0.5, 0.7])
