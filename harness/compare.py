"""Strict comparison of frozen and trained search traces -> trace_compare.json and trace.png.

    from harness.compare import compare_traces, plot_traces
    result = compare_traces([frozen], [trained])        # trace JSON dicts (Trace.to_trace())
    plot_traces([frozen], [trained], "results/<run>/trace.png")

    python -m harness.compare --frozen f.json --trained t.json --out results/<run>/

The rules:
- two traces compare only if they searched the same task (task id, split, seed,
  observation, examples hash and count) with the same knobs (gold threshold, budget,
  reward weight, C, search seed); anything else is refused with a CompareError naming
  the first field that differs. A task with a class under 40% of its examples is refused;
  so is an unfinished trace;
- a search that never reached gold counts as max_iterations + 1 steps;
- `shrunk` is true only when the trained steps are strictly fewer: equal is not success.
With several tasks (traces paired by position) the result lists each task and reports
the mean steps of each side, the counts of shrunk / tied / grown tasks, a two-sided
exact sign test over the untied tasks, and `shrunk` = mean trained steps strictly below
mean frozen steps.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.dataset import is_balanced, min_class_count
from harness.files import atomic_path
from harness.search import load_trace, steps_to_first_gold, write_json

COMPARE_VERSION = 1
TASK_FIELDS = ("task_id", "split", "seed", "obs_id", "examples_per_obs", "examples_hash")
KNOB_FIELDS = ("gold_threshold", "max_iterations", "reward_recall_weight", "search_c", "search_seed")
# How the operator decodes: both arms must match (the model is the one thing that differs).
DECODING_FIELDS = ("name", "max_new_tokens", "temperature", "dtype", "generation_config")


class CompareError(ValueError):
    """Two traces cannot be compared; the message names the mismatch."""


def check_balanced(trace: dict[str, Any], side: str) -> None:
    task = trace["task"]
    n_legal, n_illegal = task.get("n_legal"), task.get("n_illegal")
    if n_legal is None or n_illegal is None:
        raise CompareError(f"{side} trace has no class counts (task.n_legal/n_illegal): re-run the search")
    need = min_class_count(n_legal + n_illegal)
    if not is_balanced(n_legal, n_illegal):
        raise CompareError(f"{side} trace's task {task.get('task_id')} is unbalanced: {n_legal} legal / "
                           f"{n_illegal} illegal (each class needs >= {need})")


def check_comparable(frozen: dict[str, Any], trained: dict[str, Any]) -> None:
    """Raise CompareError unless the two traces searched the same task under the same knobs."""
    for side, trace in (("frozen", frozen), ("trained", trained)):
        if not trace.get("finished", False):
            raise CompareError(f"{side} trace of {trace['task'].get('task_id')} is unfinished "
                               f"({trace.get('n_nodes', len(trace.get('nodes', [])))} nodes): resume the search first")
    for key in TASK_FIELDS:
        a, b = frozen["task"].get(key), trained["task"].get(key)
        if a != b:
            raise CompareError(f"different tasks: task.{key} is {a!r} in the frozen trace, {b!r} in the trained one")
    for key in KNOB_FIELDS:
        a, b = frozen["knobs"].get(key), trained["knobs"].get(key)
        if a != b:
            raise CompareError(f"different search settings: knobs.{key} is {a!r} in the frozen trace, "
                               f"{b!r} in the trained one")
    for key in DECODING_FIELDS:
        a, b = frozen.get("operator", {}).get(key), trained.get("operator", {}).get(key)
        if a != b:
            raise CompareError(f"different decoding: operator.{key} is {a!r} in the frozen trace, {b!r} in the "
                               "trained one")
    check_balanced(frozen, "frozen")
    check_balanced(trained, "trained")


def steps_or_budget(trace: dict[str, Any]) -> int:
    """steps_to_first_gold with gold recomputed from each node's balanced accuracy and the trace's threshold
    (never trusted from the file), or max_iterations + 1 when no node is gold."""
    steps = steps_to_first_gold(trace, trace["knobs"]["gold_threshold"])
    return steps if steps is not None else trace["knobs"]["max_iterations"] + 1


def compare_pair(frozen: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    """The strict comparison of one task's frozen and trained traces."""
    check_comparable(frozen, trained)
    f_steps, t_steps = steps_or_budget(frozen), steps_or_budget(trained)
    budget = frozen["knobs"]["max_iterations"]
    return {
        "task_id": frozen["task"]["task_id"], "examples_hash": frozen["task"]["examples_hash"],
        "frozen_steps": f_steps, "trained_steps": t_steps,
        "frozen_reached": f_steps <= budget, "trained_reached": t_steps <= budget,
        "delta": t_steps - f_steps, "shrunk": t_steps < f_steps,
        "frozen_best_balanced_accuracy": max(n["balanced_accuracy"] for n in frozen["nodes"]),
        "trained_best_balanced_accuracy": max(n["balanced_accuracy"] for n in trained["nodes"]),
        "frozen_tokens": frozen.get("tokens", {}).get("total"), "trained_tokens": trained.get("tokens", {}).get("total"),
        "frozen_operator": frozen.get("operator", {}), "trained_operator": trained.get("operator", {}),
    }


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value for `wins` vs `losses` untied pairs (1.0 with none)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def compare_traces(frozen: Sequence[dict[str, Any]], trained: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-task strict comparisons (paired by position), their means and a sign test."""
    if not frozen or len(frozen) != len(trained):
        raise CompareError(f"need the same non-zero number of frozen and trained traces, got {len(frozen)} "
                           f"and {len(trained)}")
    tasks = [compare_pair(f, t) for f, t in zip(frozen, trained)]
    ids = [t["task_id"] for t in tasks]
    if len(set(ids)) != len(ids):
        raise CompareError(f"task listed twice: {sorted({i for i in ids if ids.count(i) > 1})[0]}")
    wins = sum(t["shrunk"] for t in tasks)
    losses = sum(t["delta"] > 0 for t in tasks)
    mean_f = sum(t["frozen_steps"] for t in tasks) / len(tasks)
    mean_t = sum(t["trained_steps"] for t in tasks) / len(tasks)
    return {
        "version": COMPARE_VERSION, "n_tasks": len(tasks),
        "rule": "steps = index of the first gold node; not reached = max_iterations + 1; "
                "shrunk only if strictly fewer (several tasks: mean trained < mean frozen)",
        "max_iterations": frozen[0]["knobs"]["max_iterations"], "gold_threshold": frozen[0]["knobs"]["gold_threshold"],
        "mean_frozen_steps": mean_f, "mean_trained_steps": mean_t, "mean_delta": mean_t - mean_f,
        "shrunk_tasks": wins, "tied_tasks": len(tasks) - wins - losses, "grown_tasks": losses,
        "sign_test_p": sign_test(wins, losses), "shrunk": mean_t < mean_f, "tasks": tasks,
    }


# ---- the plot -----------------------------------------------------------------------

def best_so_far(values: Sequence[float]) -> list[float]:
    out, best = [], -math.inf
    for v in values:
        best = max(best, v)
        out.append(best)
    return out


def plot_traces(frozen: Sequence[dict[str, Any]], trained: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """trace.png: best-so-far reward and balanced accuracy per node, one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(frozen)
    fig, axes = plt.subplots(n, 1, figsize=(7, 3.2 * n), squeeze=False)
    for ax, f, t in zip(axes[:, 0], frozen, trained):
        _plot_one(ax, f, t)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return Path(path)


def _plot_one(ax: Any, frozen: dict[str, Any], trained: dict[str, Any]) -> None:
    budget = frozen["knobs"]["max_iterations"]
    for trace, label, color in ((frozen, "frozen", "tab:blue"), (trained, "trained", "tab:orange")):
        nodes = trace["nodes"]
        x = [nd["index"] for nd in nodes]
        ba = best_so_far([nd["balanced_accuracy"] for nd in nodes])
        ax.step(x, best_so_far([nd["reward"] for nd in nodes]), where="post", color=color, label=f"{label} reward")
        ax.step(x, ba, where="post", color=color, linestyle="--", label=f"{label} balanced acc.")
        gold = next((nd["index"] for nd in nodes if nd["gold"]), None)
        if gold is not None:
            ax.plot([gold], [ba[gold]], marker="*", markersize=14, color=color, linestyle="none",
                    label=f"{label} first gold: node {gold}")
    ax.axhline(frozen["knobs"]["gold_threshold"], color="gray", linestyle=":", label="gold threshold")
    ax.set_xlim(-0.3, budget + 0.3)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("node index (search step)")
    ax.set_ylabel("best so far")
    ax.set_title(frozen["task"]["task_id"], fontsize=9)
    ax.legend(fontsize=7, loc="lower right")


# ---- CLI ----------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.compare", description="Strictly compare search traces.")
    p.add_argument("--frozen", nargs="+", required=True, help="frozen trace JSON file(s)")
    p.add_argument("--trained", nargs="+", required=True, help="trained trace JSON file(s), same task order")
    p.add_argument("--out", required=True, help="folder for trace_compare.json and trace.png")
    args = p.parse_args(argv)
    try:
        frozen = [load_trace(x) for x in args.frozen]
        trained = [load_trace(x) for x in args.trained]
        result = compare_traces(frozen, trained)
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    write_json(out / "trace_compare.json", result)
    plot_traces(frozen, trained, out / "trace.png")
    print(f"{result['n_tasks']} task(s): steps frozen {result['mean_frozen_steps']:.2f} -> trained "
          f"{result['mean_trained_steps']:.2f} (shrunk {result['shrunk']}, sign test p {result['sign_test_p']:.3f}) "
          f"| {out / 'trace_compare.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
