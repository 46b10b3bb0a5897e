"""The strict compare of a run's arms: paired steps_to_gold, bootstrap intervals, curves.

    from harness.compare import compare_arms, plot_arms
    result = compare_arms({"frozen": [...], "sft": [...], "trained": [...]}, sft_target=program_text)
    plot_arms(arms, "results/<run>/trace.png")

    python -m harness.compare --arm frozen=frozen_trace.json --arm trained=trained_trace.json --out DIR

The rules:
- every arm searched the same (task, seed) pairs: the same tasks (task id, split, seed,
  observation, examples hash and count), the same search seeds, with the same knobs (gold
  threshold, budget, reward weight, C, sandbox timeout) and the same decoding (operator,
  token budget, temperature, dtype, generation config); anything else is refused with a
  CompareError naming the field. A task with a class under 40% of its examples is refused,
  so is an unfinished trace;
- gold is recomputed from each node's balanced accuracy and the threshold, never trusted
  from the file; a search that never reached gold counts as max_iterations + 1 steps;
- for a pair of arms (A vs B) over their paired searches: the mean difference of steps with a
  seeded paired-bootstrap 95% interval, whether that interval excludes zero, the two-sided
  exact sign test, the probability of improvement P(A fewer steps than B) with ties counting
  half, and the counts of shrunk / tied / grown pairs. `shrunk` keeps its strict meaning:
  the mean steps of A strictly fewer than B's (equal is not success);
- every first gold harness carries its accuracy on other held-out observations and its
  similarity (difflib ratio) to the SFT target program: a gold harness that memorised its
  task's examples, or that is the SFT target itself, shows there.
"""

from __future__ import annotations

import argparse
import difflib
import math
import random
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.dataset import is_balanced, min_class_count
from harness.files import atomic_path
from harness.search import load_trace, steps_to_first_gold, write_json

COMPARE_VERSION = 2
TASK_FIELDS = ("task_id", "split", "seed", "obs_id", "examples_per_obs", "examples_hash")
KNOB_FIELDS = ("gold_threshold", "max_iterations", "reward_recall_weight", "search_c", "sandbox_timeout_s")
# How the operator decodes: every arm must match (the model is the one thing that differs).
DECODING_FIELDS = ("name", "max_new_tokens", "temperature", "dtype", "generation_config")
# (A, B): does A need fewer steps than B? trained vs sft is what GRPO added on top of SFT.
COMPARISONS = (("trained", "frozen"), ("sft", "frozen"), ("trained", "sft"), ("grpo_only", "frozen"),
               ("trained", "grpo_only"))
RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


class CompareError(ValueError):
    """Traces cannot be compared; the message names the mismatch."""


# ---- checks -----------------------------------------------------------------------------------

def check_balanced(trace: dict[str, Any], side: str) -> None:
    task = trace["task"]
    n_legal, n_illegal = task.get("n_legal"), task.get("n_illegal")
    if n_legal is None or n_illegal is None:
        raise CompareError(f"{side} trace has no class counts (task.n_legal/n_illegal): re-run the search")
    if not is_balanced(n_legal, n_illegal):
        raise CompareError(f"{side} trace's task {task.get('task_id')} is unbalanced: {n_legal} legal / "
                           f"{n_illegal} illegal (each class needs >= {min_class_count(n_legal + n_illegal)})")


def pair_key(trace: dict[str, Any]) -> tuple[str, str, int]:
    return trace["task"]["task_id"], trace["task"]["examples_hash"], trace["knobs"].get("search_seed", 0)


def _same(field: str, a: Any, b: Any, a_side: str, b_side: str) -> None:
    if a != b:
        raise CompareError(f"different {field.split('.')[0] if '.' in field else 'settings'}: {field} is {a!r} in "
                           f"{a_side}, {b!r} in {b_side}")


def check_arms(arms: dict[str, list[dict[str, Any]]]) -> None:
    """Raise CompareError unless every arm searched the same pairs with the same knobs and decoding."""
    if not arms or any(not traces for traces in arms.values()):
        raise CompareError("every arm needs at least one trace")
    first_arm = next(iter(arms))
    ref = arms[first_arm][0]
    for arm, traces in arms.items():
        keys = [pair_key(t) for t in traces]
        if len(set(keys)) != len(keys):
            raise CompareError(f"{arm}: a (task, seed) pair listed twice: {sorted(k for k in keys if keys.count(k) > 1)[0]}")
        for trace in traces:
            side = f"the {arm} trace of {trace['task'].get('task_id')} seed {trace['knobs'].get('search_seed')}"
            if not trace.get("finished", False):
                raise CompareError(f"{side} is unfinished ({len(trace.get('nodes', []))} nodes): resume the search first")
            for key in KNOB_FIELDS:
                _same(f"knobs.{key}", ref["knobs"].get(key), trace["knobs"].get(key), f"the {first_arm} arm", side)
            for key in DECODING_FIELDS:
                _same(f"operator.{key}", ref["operator"].get(key), trace["operator"].get(key), f"the {first_arm} arm",
                      side)
            check_balanced(trace, side)
    for arm, traces in arms.items():
        mine = {pair_key(t): t for t in traces}
        theirs = {pair_key(t): t for t in arms[first_arm]}
        if set(mine) != set(theirs):
            missing = sorted(set(theirs) ^ set(mine))[0]
            raise CompareError(f"different tasks: the {arm} and {first_arm} arms do not search the same (task, seed) "
                               f"pairs (e.g. task.task_id {missing[0]!r} seed {missing[2]})")
        for key, trace in mine.items():
            for field in TASK_FIELDS:
                _same(f"task.{field}", theirs[key]["task"].get(field), trace["task"].get(field),
                      f"the {first_arm} arm", f"the {arm} arm")


# ---- numbers ----------------------------------------------------------------------------------

def steps_or_budget(trace: dict[str, Any]) -> int:
    """steps_to_first_gold with gold recomputed from each node's balanced accuracy and the trace's threshold
    (never trusted from the file), or max_iterations + 1 when no node is gold."""
    steps = steps_to_first_gold(trace, trace["knobs"]["gold_threshold"])
    return steps if steps is not None else trace["knobs"]["max_iterations"] + 1


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value for `wins` vs `losses` untied pairs (1.0 with none)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, linear between neighbours (numpy's default)."""
    pos = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_mean_ci(values: Sequence[float], resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED,
                      level: float = 95.0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean: resample the values (pairs) with replacement."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (100 - level) / 2
    return percentile(means, tail), percentile(means, 100 - tail)


def probability_of_improvement(diffs: Sequence[float]) -> float:
    """P(A needs fewer steps than B) over the pairs, a tie counting half."""
    return sum(1.0 if d < 0 else 0.5 if d == 0 else 0.0 for d in diffs) / len(diffs)


def similarity(code: str, target: str | None) -> float | None:
    """How close a harness is to the SFT target program (difflib's ratio: 1.0 = the same text)."""
    return None if target is None else round(difflib.SequenceMatcher(None, code, target).ratio(), 4)


def first_gold_node(trace: dict[str, Any]) -> dict[str, Any] | None:
    steps = steps_to_first_gold(trace, trace["knobs"]["gold_threshold"])
    return None if steps is None else trace["nodes"][steps]


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present) / len(present), 4) if present else None


# ---- the compare ------------------------------------------------------------------------------

def arm_summary(traces: list[dict[str, Any]], sft_target: str | None, resamples: int) -> dict[str, Any]:
    steps = [steps_or_budget(t) for t in traces]
    budget = traces[0]["knobs"]["max_iterations"]
    golds = [first_gold_node(t) for t in traces]
    lo, hi = bootstrap_mean_ci(steps, resamples)
    return {"n": len(steps), "mean_steps": round(sum(steps) / len(steps), 4), "ci95": [round(lo, 4), round(hi, 4)],
            "solved": sum(s <= budget for s in steps), "solved_share": round(sum(s <= budget for s in steps) / len(steps), 4),
            "tokens_mean": _mean([t.get("tokens", {}).get("total") for t in traces]),
            "gold_heldout_accuracy_mean": _mean([g.get("heldout_accuracy") for g in golds if g]),
            "gold_similarity_to_sft_target_mean": _mean([similarity(g["code"], sft_target) for g in golds if g]),
            "model": traces[0]["operator"].get("model")}


def compare_two(a: str, b: str, arms: dict[str, list[dict[str, Any]]], resamples: int) -> dict[str, Any]:
    """A vs B over their paired searches (see the module doc)."""
    b_by_key = {pair_key(t): t for t in arms[b]}
    pairs = [(t, b_by_key[pair_key(t)]) for t in arms[a]]
    a_steps = [steps_or_budget(x) for x, _ in pairs]
    b_steps = [steps_or_budget(y) for _, y in pairs]
    diffs = [x - y for x, y in zip(a_steps, b_steps)]
    lo, hi = bootstrap_mean_ci(diffs, resamples)
    wins, losses = sum(d < 0 for d in diffs), sum(d > 0 for d in diffs)
    mean_a, mean_b = sum(a_steps) / len(a_steps), sum(b_steps) / len(b_steps)
    return {"a": a, "b": b, "n_pairs": len(pairs), "mean_a": round(mean_a, 4), "mean_b": round(mean_b, 4),
            "mean_diff": round(mean_a - mean_b, 4), "ci95": [round(lo, 4), round(hi, 4)], "resamples": resamples,
            "bootstrap_seed": BOOTSTRAP_SEED, "ci_excludes_zero": hi < 0 or lo > 0,
            "sign_test_p": round(sign_test(wins, losses), 6), "prob_improvement": round(probability_of_improvement(diffs), 4),
            "shrunk_pairs": wins, "tied_pairs": len(diffs) - wins - losses, "grown_pairs": losses,
            "shrunk": mean_a < mean_b,
            "pairs": [{"task_id": x["task"]["task_id"], "search_seed": x["knobs"].get("search_seed", 0),
                       f"{a}_steps": sa, f"{b}_steps": sb} for (x, _), sa, sb in zip(pairs, a_steps, b_steps)]}


def compare_arms(arms: dict[str, list[dict[str, Any]]], sft_target: str | None = None,
                 resamples: int = RESAMPLES) -> dict[str, Any]:
    """Every arm summarised and every pair of COMPARISONS present compared; CompareError when not comparable."""
    check_arms(arms)
    ref = next(iter(arms.values()))[0]
    comparisons = [compare_two(a, b, arms, resamples) for a, b in COMPARISONS if a in arms and b in arms]
    headline = next((c for c in comparisons if (c["a"], c["b"]) == ("trained", "frozen")), None)
    return {"version": COMPARE_VERSION,
            "rule": "steps = index of the first gold node (gold recomputed: valid and balanced accuracy >= "
                    "threshold); not reached = max_iterations + 1; shrunk only if the mean is strictly fewer",
            "max_iterations": ref["knobs"]["max_iterations"], "gold_threshold": ref["knobs"]["gold_threshold"],
            "not_reached_counts": ref["knobs"]["max_iterations"] + 1,
            "n_pairs": len(next(iter(arms.values()))), "pairs_are": "(task_id, examples_hash, search_seed)",
            "decoding": {k: ref["operator"].get(k) for k in DECODING_FIELDS},
            "arms": {arm: arm_summary(traces, sft_target, resamples) for arm, traces in arms.items()},
            "comparisons": comparisons, "shrunk": bool(headline and headline["shrunk"])}


# ---- curves -----------------------------------------------------------------------------------

def best_so_far(values: Sequence[float]) -> list[float]:
    out, best = [], -math.inf
    for v in values:
        best = max(best, v)
        out.append(best)
    return out


def solved_by_node(traces: list[dict[str, Any]]) -> list[float]:
    """Share of searches with a gold node at index <= k, for k = 0..budget (REx's solved-vs-steps curve)."""
    budget = traces[0]["knobs"]["max_iterations"]
    steps = [steps_or_budget(t) for t in traces]
    return [sum(s <= k for s in steps) / len(steps) for k in range(budget + 1)]


def best_accuracy_by_node(trace: dict[str, Any]) -> list[float]:
    """Best-so-far balanced accuracy at node 0..budget (a search that stopped at gold keeps its value)."""
    best = best_so_far([n["balanced_accuracy"] for n in trace["nodes"]])
    budget = trace["knobs"]["max_iterations"]
    return best + [best[-1]] * (budget + 1 - len(best))


def solved_by_tokens(traces: list[dict[str, Any]]) -> tuple[list[int], list[float]]:
    """(token budgets, share of searches gold within that many operator tokens).

    The curve runs to the most tokens any search of the arm spent, solved or not."""
    spent, most = [], 0
    for trace in traces:
        first = steps_to_first_gold(trace, trace["knobs"]["gold_threshold"])
        costs = [node.get("prompt_tokens", 0) + node.get("completion_tokens", 0) for node in trace["nodes"]]
        most = max(most, sum(costs))
        spent.append(sum(costs[: first + 1]) if first is not None else None)
    xs = sorted({0, most, *[s for s in spent if s is not None]})
    return xs, [sum(s is not None and s <= x for s in spent) / len(spent) for x in xs]


LINE_STYLES = ("-", "--", ":", "-.")


def plot_arms(arms: dict[str, list[dict[str, Any]]], path: str | Path, resamples: int = 2000) -> Path:
    """trace.png: solved share by node, mean best-so-far balanced accuracy (bootstrap band), solved share by tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.2))
    from matplotlib.ticker import MaxNLocator

    rng = random.Random(BOOTSTRAP_SEED)
    for i, (arm, traces) in enumerate(arms.items()):
        style = {"linestyle": LINE_STYLES[i % len(LINE_STYLES)], "linewidth": 2.4 - 0.5 * (i % 3)}  # overlaps show
        solved = solved_by_node(traces)
        ax1.step(range(len(solved)), solved, where="post", label=f"{arm} ({len(traces)} searches)", **style)
        curves = [best_accuracy_by_node(t) for t in traces]
        mean = [sum(c[k] for c in curves) / len(curves) for k in range(len(curves[0]))]
        boots = [[sum(curves[rng.randrange(len(curves))][k] for _ in curves) / len(curves) for k in range(len(mean))]
                 for _ in range(resamples)]
        lo = [percentile(sorted(b[k] for b in boots), 2.5) for k in range(len(mean))]
        hi = [percentile(sorted(b[k] for b in boots), 97.5) for k in range(len(mean))]
        line = ax2.plot(range(len(mean)), mean, marker="o", ms=3, label=arm, **style)[0]
        ax2.fill_between(range(len(mean)), lo, hi, alpha=0.2, color=line.get_color())
        xs, ys = solved_by_tokens(traces)
        ax3.step(xs, ys, where="post", label=arm, **style)
    ref = next(iter(arms.values()))[0]["knobs"]
    ax2.axhline(ref["gold_threshold"], color="gray", linestyle=":", label="gold threshold")
    for ax, xlabel, ylabel in ((ax1, "node index k (search step)", "share of searches gold by node k"),
                               (ax2, "node index k", "mean best-so-far balanced accuracy (95% band)"),
                               (ax3, "operator tokens (prompt + completion)", "share of searches gold")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (ax1, ax3):
        ax.set_ylim(-0.02, 1.02)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return Path(path)


# ---- CLI ----------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.compare", description="Strictly compare the arms' traces.")
    p.add_argument("--arm", action="append", required=True, metavar="NAME=FILE",
                   help="an arm's trace file (<arm>_trace.json, or one plain trace); give at least two")
    p.add_argument("--out", required=True, help="folder for trace_compare.json and trace.png")
    args = p.parse_args(argv)
    try:
        arms = {}
        for item in args.arm:
            name, _, path = item.partition("=")
            data = load_trace(path)
            arms[name] = data["traces"] if "traces" in data else [data]
        result = compare_arms(arms)
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    write_json(out / "trace_compare.json", result)
    plot_arms(arms, out / "trace.png")
    for c in result["comparisons"]:
        print(f"{c['a']} vs {c['b']}: {c['mean_a']:.2f} vs {c['mean_b']:.2f} steps, diff {c['mean_diff']:+.2f} "
              f"(95% CI [{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}]), shrunk {'yes' if c['shrunk'] else 'no'}")
    print(f"{out / 'trace_compare.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
