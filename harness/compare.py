"""The strict compare of a run's arms, task by task: paired statistics over held-out tasks, curves.

    from harness.compare import compare_arms, plot_arms
    result = compare_arms({"frozen": [...], "sft": [...], "trained": [...]}, sft_target=program_text)
    plot_arms(arms, "results/<run>/trace.png")

    python -m harness.compare --arm frozen=frozen_trace.json --arm trained=trained_trace.json --out DIR

The rules:
- every arm searched the same (task, seed) pairs: the same tasks (task id, split, seed,
  observation, examples hash and count), the same search seeds, with the same knobs (gold
  threshold, budget, reward weight, C, sandbox timeout) and the same decoding (operator,
  token budget, temperature, dtype, sampling arguments); anything else is refused with a
  CompareError naming the field. A task with a class under 40% of its examples is refused,
  so is an unfinished trace. Searches are matched by their (task, seed) key, never by position;
- gold is recomputed from each node's balanced accuracy and the threshold, never trusted
  from the file; a search that never reached gold counts as max_iterations + 1 steps;
- the unit of analysis is the held-out task: a task's value is the mean over its search seeds
  (repeats inside a task, not independent evidence), and every test runs over tasks
  (harness.stats: exact sign test, exact Wilcoxon signed-rank test with the interval of the
  shifts it does not reject, so interval and verdict agree; the smallest detectable effect). Four measures per pair of arms: mean steps to gold (its size depends on
  the budget cap), solved within budget, node-0 gold rate and node-0 reward (budget-free; node
  0 is the zero-shot answer, the very prompt GRPO trains on, so they are GRPO's own target);
- `shrunk` keeps its strict meaning: the mean steps of A strictly fewer than B's (equal is not
  success); a verdict in words goes with every comparison, and a comparison with trained vs sft
  whose sft arm is already gold at node 0 on every task says there was no headroom;
- every arm's node-0 programs and gold harnesses carry their similarity (difflib ratio) to the SFT
  target program and the gold ones their accuracy on other held-out observations: a harness
  that memorised its task's examples, or that is the SFT target itself, shows there.
"""

from __future__ import annotations

import argparse
import difflib
import math
import random
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.arms import BY_NAME, colour, comparisons
from harness.dataset import is_balanced, min_class_count
from harness.files import atomic_write_json
from harness.plots import LINE_STYLES, fit_y, node_axis, save, titled
from harness.search import load_trace, steps_to_first_gold
from harness.search_stats import (CURVE_RESAMPLES, budget_curve, first_gold_both, refinement_stats, search_ledger,
                                  token_curve)
from harness.stats import BOOTSTRAP_SEED, p_text, paired_measure, percentile

COMPARE_VERSION = 4
TASK_FIELDS = ("task_id", "split", "seed", "obs_id", "examples_per_obs", "examples_hash")
KNOB_FIELDS = ("gold_threshold", "reward_recall_weight", "search_c", "sandbox_timeout_s")
# frozen's cuts at other budgets (harness.traces.frozen_budgets): the one knob they may differ in is the budget
VARIABLE_BUDGET_ARMS = tuple(name for name, a in BY_NAME.items() if a.cut_from)
# How the operator decodes: every arm must match (the model is the one thing that differs).
DECODING_FIELDS = ("name", "max_new_tokens", "temperature", "dtype", "generation_config", "do_sample", "top_p",
                   "top_k")
# (A, B): is A better than B? From harness/arms.py's table: the headline pairs first, then by arm.
COMPARISONS = tuple(c.pair for c in comparisons())
# measure -> (lower is better, what it is)
MEASURES = {"steps": (True, "mean steps to gold (not reached = budget + 1)"),
            "solved": (False, "share of searches gold within the budget"),
            "node0_gold": (False, "share of searches whose node 0 (the zero-shot answer) is gold"),
            "node0_reward": (False, "reward of node 0 (the zero-shot answer)")}


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


def variable_budget(arm: str) -> bool:
    """frozen_matched and the frozen@<budget> cuts: frozen's own search at another budget (harness.arms: cut_from)."""
    return arm in VARIABLE_BUDGET_ARMS or arm.startswith("frozen@")


def check_arms(arms: dict[str, list[dict[str, Any]]]) -> None:
    """Raise CompareError unless every arm searched the same pairs with the same knobs and decoding."""
    if not arms or any(not traces for traces in arms.values()):
        raise CompareError("every arm needs at least one trace")
    first_arm = next((arm for arm in arms if not variable_budget(arm)), next(iter(arms)))
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
            if not variable_budget(arm):
                _same("knobs.max_iterations", ref["knobs"].get("max_iterations"), trace["knobs"].get("max_iterations"),
                      f"the {first_arm} arm", side)
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


def node0_gold(trace: dict[str, Any]) -> bool:
    return steps_to_first_gold(trace, trace["knobs"]["gold_threshold"]) == 0


def search_values(trace: dict[str, Any]) -> dict[str, float]:
    """The four measures of one search (MEASURES)."""
    steps = steps_or_budget(trace)
    return {"steps": float(steps), "solved": float(steps <= trace["knobs"]["max_iterations"]),
            "node0_gold": float(node0_gold(trace)), "node0_reward": float(trace["nodes"][0].get("reward", 0.0))}


def task_key(trace: dict[str, Any]) -> tuple[str, str]:
    return trace["task"]["task_id"], trace["task"]["examples_hash"]


def by_task(traces: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Traces grouped by task, each group sorted by search seed (insertion order of first appearance)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for trace in traces:
        groups.setdefault(task_key(trace), []).append(trace)
    return {k: sorted(v, key=lambda t: t["knobs"].get("search_seed", 0)) for k, v in groups.items()}


def task_values(traces: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    """Per task, each measure averaged over the task's search seeds."""
    out = {}
    for key, group in by_task(traces).items():
        values = [search_values(t) for t in group]
        out[key] = {m: sum(v[m] for v in values) / len(values) for m in MEASURES}
    return out


def similarity(code: str, target: str | None) -> float | None:
    """How close a harness is to the SFT target program (difflib's ratio: 1.0 = the same text)."""
    return None if target is None else round(difflib.SequenceMatcher(None, code, target).ratio(), 4)


def gold_nodes(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Every gold node of a trace (gold recomputed)."""
    threshold = trace["knobs"]["gold_threshold"]
    return [n for n in trace["nodes"] if n.get("valid", True) and n["balanced_accuracy"] >= threshold]


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present) / len(present), 4) if present else None


# ---- the compare ------------------------------------------------------------------------------

def arm_summary(traces: list[dict[str, Any]], sft_target: str | None) -> dict[str, Any]:
    """An arm's numbers: per-task means averaged over tasks (n in tasks), and its programs' similarity."""
    values = list(task_values(traces).values())
    golds = [g for t in traces for g in gold_nodes(t)]
    mean = {m: round(sum(v[m] for v in values) / len(values), 4) for m in MEASURES}
    return {"n_tasks": len(values), "n_searches": len(traces), "mean_steps": mean["steps"],
            "solved_share": mean["solved"], "node0_gold_rate": mean["node0_gold"],
            "node0_reward_mean": mean["node0_reward"],
            "node0_gold_tasks": sum(v["node0_gold"] == 1.0 for v in values),
            "golds_at_node0": sum(1 for t in traces if gold_nodes(t) and gold_nodes(t)[0]["index"] == 0),
            "golds_from_refinements": sum(1 for t in traces if gold_nodes(t) and gold_nodes(t)[0]["index"] > 0),
            "node0_valid_share": _mean([float(t["nodes"][0].get("valid", False)) for t in traces]),
            "tokens_mean": _mean([t.get("tokens", {}).get("total") for t in traces]),
            "gold_heldout_accuracy_mean": _mean([g.get("heldout_accuracy") for g in golds]),
            "gold_similarity_to_sft_target_mean": _mean([similarity(g["code"], sft_target) for g in golds]),
            "node0_similarity_to_sft_target_mean": _mean([similarity(t["nodes"][0]["code"], sft_target)
                                                          for t in traces]),
            "model": traces[0]["operator"].get("model"), "budget": traces[0]["knobs"]["max_iterations"],
            "refinements": refinement_stats(traces), "search_ledger": search_ledger(traces)}


def programs_differ(a_traces: list[dict[str, Any]], b_traces: list[dict[str, Any]]) -> dict[str, int]:
    """On how many tasks (and searches) A's node-0 program differs from B's for the same (task, seed)."""
    b_code = {pair_key(t): t["nodes"][0]["code"] for t in b_traces}
    differ_pairs = {pair_key(t) for t in a_traces if t["nodes"][0]["code"] != b_code[pair_key(t)]}
    return {"tasks": len({k[:2] for k in differ_pairs}), "searches": len(differ_pairs),
            "of_tasks": len({task_key(t) for t in a_traces}), "of_searches": len(a_traces)}


def verdict(a: str, b: str, measures: dict[str, dict[str, Any]]) -> str:
    """One sentence per comparison, from the tests over tasks (alpha 0.05, Wilcoxon; its interval is the same test
    inverted, harness.stats): steps to gold (when both arms had the same budget), solved within the budget, and
    node-0 gold rate."""
    parts = []
    for name, label, unit in (("steps", "steps to gold", "steps"), ("solved", "tasks solved within the budget", ""),
                              ("node0_gold", "node-0 gold rate", "")):
        m = measures.get(name)
        if m is None:
            continue
        n = m["n_tasks"]
        if m["verdict"] in ("better", "worse"):
            parts.append(f"{a} is {m['verdict']} than {b} in {label} ({m['mean_a']:.3g} vs {m['mean_b']:.3g}, "
                         f"Wilcoxon {p_text(m['wilcoxon_p'])}, n = {n} tasks)")
        else:
            mde = "" if m["mde80"] is None else f"; a difference of {m['mde80']:.2g}{' ' + unit if unit else ''} " \
                                                "would have been found with power 0.8"
            parts.append(f"no measurable difference in {label} ({m['mean_a']:.3g} vs {m['mean_b']:.3g}, "
                         f"Wilcoxon {p_text(m['wilcoxon_p'])}, n = {n} tasks{mde})")
    return "; ".join(parts)


def budget_of(traces: list[dict[str, Any]]) -> int:
    return traces[0]["knobs"]["max_iterations"]


def compare_two(a: str, b: str, arms: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A vs B over tasks: each measure paired task by task (harness.stats.paired_measure), matched by key.

    Arms with different budgets (frozen_matched: frozen at the trained arm's compute) are compared in
    budget-free terms only: solved within each arm's own budget, node 0, and the first-gold node on the
    tasks both solved; mean steps, whose size depends on the cap, only when the budgets are equal."""
    a_tasks, b_tasks = task_values(arms[a]), task_values(arms[b])
    keys = list(a_tasks)
    same_budget = budget_of(arms[a]) == budget_of(arms[b])
    measures = {m: paired_measure([a_tasks[k][m] for k in keys], [b_tasks[k][m] for k in keys], lower)
                for m, (lower, _) in MEASURES.items() if same_budget or m != "steps"}
    xs, ys = first_gold_both(arms[a], arms[b])
    both = paired_measure(xs, ys, True) if xs else None
    steps = measures.get("steps")
    b_by_pair = {pair_key(t): t for t in arms[b]}
    out = {"a": a, "b": b, "n_tasks": len(keys), "n_searches": len(arms[a]),
           "budget_a": budget_of(arms[a]), "budget_b": budget_of(arms[b]),
           "seeds_per_task": round(len(arms[a]) / len(keys), 2), "measures": measures,
           "first_gold_where_both_solved": both,
           "shrunk": bool(steps and steps["mean_a"] < steps["mean_b"]), "verdict": verdict(a, b, measures),
           "programs_differ_at_node0": programs_differ(arms[a], arms[b]),
           "tasks": [{"task_id": k[0], **{f"{a}_{m}": round(a_tasks[k][m], 4) for m in MEASURES},
                      **{f"{b}_{m}": round(b_tasks[k][m], 4) for m in MEASURES}} for k in keys],
           "searches": [{"task_id": t["task"]["task_id"], "search_seed": t["knobs"].get("search_seed", 0),
                         f"{a}_steps": steps_or_budget(t), f"{b}_steps": steps_or_budget(b_by_pair[pair_key(t)])}
                        for t in arms[a]]}
    return out


def headroom_warnings(result: dict[str, Any], grpo_zero_variance: dict[str, float | None] | None) -> list[str]:
    """Why a GRPO effect cannot be read from this run, each with its number (empty when it can)."""
    warnings = []
    sft = result["arms"].get("sft")
    if sft and sft["node0_gold_tasks"] == sft["n_tasks"]:
        warnings.append(f"the sft arm is gold at node 0 on every task ({sft['n_tasks']}/{sft['n_tasks']}): no headroom "
                        "for GRPO to show, so no GRPO effect is reported")
    for name, share in (grpo_zero_variance or {}).items():
        if share is not None and share >= 1.0:
            warnings.append(f"every GRPO group of `{name}` had zero reward variance (share 1.00): GRPO took no "
                            "gradient from reward, so no GRPO effect is reported")
    return warnings


def compare_arms(arms: dict[str, list[dict[str, Any]]], sft_target: str | None = None,
                 resamples: int = CURVE_RESAMPLES, grpo_zero_variance: dict[str, float | None] | None = None,
                 extra_pairs: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """Every arm summarised and every pair of COMPARISONS present (and `extra_pairs`) compared over tasks;
    CompareError when not comparable. resamples: the budget curves' bootstrap over tasks. grpo_zero_variance: the
    zero-variance share of each GRPO training's groups (a headroom check)."""
    if len(arms) < 2:
        raise CompareError(f"a compare needs two arms or more (got {', '.join(arms) or 'none'})")
    check_arms(arms)
    pairs = [*COMPARISONS, *(p for p in extra_pairs if p not in COMPARISONS)]
    comparisons = [compare_two(a, b, arms) for a, b in pairs if a in arms and b in arms]
    headline = next((c for c in comparisons if (c["a"], c["b"]) == ("trained", "frozen")), None)
    n_tasks = len(by_task(next(iter(arms.values()))))
    ref = next(arms[arm] for arm in arms if not variable_budget(arm))[0]
    result = {"version": COMPARE_VERSION,
              "rule": "steps = index of the first gold node (gold recomputed: valid and balanced accuracy >= "
                      "threshold); not reached = max_iterations + 1; shrunk only if the mean is strictly fewer; "
                      "the unit of analysis is the held-out task (seeds averaged inside a task)",
              "unit": "task", "measures": {m: text for m, (_, text) in MEASURES.items()},
              "max_iterations": ref["knobs"]["max_iterations"], "gold_threshold": ref["knobs"]["gold_threshold"],
              "not_reached_counts": ref["knobs"]["max_iterations"] + 1, "n_tasks": n_tasks,
              "n_searches": len(next(iter(arms.values()))), "pairs_are": "(task_id, examples_hash, search_seed)",
              "decoding": {k: ref["operator"].get(k) for k in DECODING_FIELDS},
              "arms": {arm: arm_summary(traces, sft_target) for arm, traces in arms.items()},
              "comparisons": comparisons, "shrunk": bool(headline and headline["shrunk"]),
              "budget_curves": {arm: budget_curve(traces, resamples) for arm, traces in arms.items()},
              "token_curves": {arm: token_curve(traces) for arm, traces in arms.items()}}
    result["warnings"] = headroom_warnings(result, grpo_zero_variance)
    result["grpo_effect_readable"] = not result["warnings"]
    return result


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
    """(token budgets, share of searches gold within that many completion tokens: what the operator generated,
    prompts not counted, as in budget_curves_tokens.png). The curve runs to the most any search of the arm spent."""
    spent, most = [], 0
    for trace in traces:
        first = steps_to_first_gold(trace, trace["knobs"]["gold_threshold"])
        costs = [node.get("completion_tokens", 0) for node in trace["nodes"]]
        most = max(most, sum(costs))
        spent.append(sum(costs[: first + 1]) if first is not None else None)
    xs = sorted({0, most, *[s for s in spent if s is not None]})
    return xs, [sum(s is not None and s <= x for s in spent) / len(spent) for x in xs]


def accuracy_band(traces: list[dict[str, Any]], rng: random.Random, resamples: int) -> list[list[float]]:
    """[mean, 2.5th, 97.5th percentile] of the best-so-far balanced accuracy by node, searches resampled."""
    curves = [best_accuracy_by_node(t) for t in traces]
    width = len(curves[0])
    mean = [sum(c[k] for c in curves) / len(curves) for k in range(width)]
    boots = [[sum(curves[rng.randrange(len(curves))][k] for _ in curves) / len(curves) for k in range(width)]
             for _ in range(resamples)]
    return [mean, *([percentile(sorted(b[k] for b in boots), q) for k in range(width)] for q in (2.5, 97.5))]


def plot_arms(arms: dict[str, list[dict[str, Any]]], path: str | Path, resamples: int = 2000) -> Path:
    """trace.png (trace_figure)."""
    return save(trace_figure(arms, resamples), path)


def trace_figure(arms: dict[str, list[dict[str, Any]]], resamples: int = 2000):
    """The figure of trace.png: per search, solved share by node, mean best-so-far balanced accuracy (bootstrap
    band), solved share by completion tokens; each arm in its colour (harness.arms), one legend right of them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.4))
    rng, names, drawn = random.Random(BOOTSTRAP_SEED), list(arms), {ax: [] for ax in (ax1, ax2, ax3)}
    ref = next(arms[arm] for arm in arms if not variable_budget(arm))[0]["knobs"]
    for i, (arm, traces) in enumerate(arms.items()):
        style = {"linestyle": LINE_STYLES[i % len(LINE_STYLES)], "color": colour(arm, names),
                 "linewidth": max(0.8, 3.6 - 0.5 * i)}  # each later arm narrower, on top: lines that coincide show
        solved = solved_by_node(traces)
        ax1.step(range(len(solved)), solved, where="post", label=f"{arm} ({len(traces)} searches)",
                 marker="o" if len(solved) == 1 else None, **style)  # one node: a point, not a line
        mean, lo, hi = accuracy_band(traces, rng, resamples)
        ax2.plot(range(len(mean)), mean, marker="o", ms=3, **style)
        ax2.fill_between(range(len(mean)), lo, hi, alpha=0.2, color=style["color"])
        xs, ys = solved_by_tokens(traces)
        ax3.step(xs, ys, where="post", **style)
        drawn[ax1] += solved
        drawn[ax2] += [*lo, *hi]
        drawn[ax3] += ys
    ax2.axhline(ref["gold_threshold"], color="gray", linestyle=":", label="gold threshold")
    for ax, title, xlabel, ylabel, also in (
            (ax1, "Solved by node", "node index k (search step)", "share of searches gold by node k", ()),
            (ax2, "Best balanced accuracy so far", "node index k", "mean best-so-far balanced accuracy (95% band)",
             (ref["gold_threshold"],)),
            (ax3, "Solved by completion tokens", "completion tokens (generated; prompts not counted)",
             "share of searches gold", ())):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel, fontsize=9)
        titled(ax, title, fit_y(ax, drawn[ax], also))
    for ax in (ax1, ax2):
        node_axis(ax, max(t["knobs"]["max_iterations"] for traces in arms.values() for t in traces))
    handles = [*ax1.get_legend_handles_labels()[0], *ax2.get_legend_handles_labels()[0]]
    fig.tight_layout()
    fig.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 0.92), frameon=False)
    return fig


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
    atomic_write_json(out / "trace_compare.json", result, indent=1)
    plot_arms(arms, out / "trace.png")
    for c in result["comparisons"]:
        print(f"{c['a']} vs {c['b']} over {c['n_tasks']} tasks: {c['verdict']}; shrunk {'yes' if c['shrunk'] else 'no'}")
    print(f"{out / 'trace_compare.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
