"""What the searches did, arm by arm: solved-by-budget curves, refinement statistics and the compute ledger.

    from harness.search_stats import budget_curve, token_curve, refinement_stats, search_ledger
    budget_curve(traces)        # {"k": [0..budget], "solved": [...], "lo": [...], "hi": [...], "n_tasks": n}
    token_curve(traces)         # {"tokens": [...], "solved": [...]}: solved by completion tokens generated
    refinement_stats(traces)    # refinements asked, share valid, share better than the parent, ...
    search_ledger(traces)       # search nodes, tokens generated, sandbox evaluations, wall time

Solved by budget. For each arm, the share of held-out tasks solved by node k (a gold node at
index <= k, gold recomputed from balanced accuracy), for every k up to the arm's budget: one
number per budget instead of a mean of steps whose size depends on the cap (RL-trained models
may win at small budgets and lose at large ones; Yue et al. 2025). The unit is the task: a
task's value at k is the share of its search seeds solved by node k; the 95% band resamples
tasks (bootstrap, harness.stats' seed). The same share against the compute spent instead of the
node index (Olausson et al. 2024 put compute on the x-axis): a task counts as solved within t
tokens when its search's completion tokens, summed up to and including its first gold node, are
at most t (completion tokens: what the operator generated; prompts are read, not generated).
harness.plots draws both.

Refinement statistics: can the operator refine at all? Of the refinements a search asked (every
node with a parent): the share valid, the share whose child scores strictly above its parent,
the mean reward change child - parent, and the share whose child is the parent's program
unchanged (harness.interface.program_key). A search that only resamples shows ~0 better.

The ledger counts what an arm's searches spent: operator generations (nodes), tokens generated
(completion tokens) and read (prompt tokens), sandbox evaluations (one per node, one more per
gold node for its held-out check) and wall time (the nodes' own: each node carries its share of
its round's batch). Training costs come from the metrics files (scripts/05_compare.py).
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from harness.interface import program_key
from harness.search import steps_to_first_gold
from harness.stats import BOOTSTRAP_SEED, percentile

CURVE_RESAMPLES = 2000


def first_gold(trace: dict[str, Any]) -> int | None:
    """The first gold node's index, gold recomputed from balanced accuracy and the trace's threshold."""
    return steps_to_first_gold(trace, trace["knobs"]["gold_threshold"])


def tasks_of(traces: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for trace in traces:
        groups.setdefault((trace["task"]["task_id"], trace["task"]["examples_hash"]), []).append(trace)
    return groups


def solved_matrix(traces: list[dict[str, Any]], budget: int | None = None) -> list[list[float]]:
    """Per task, per k = 0..budget: the share of the task's searches solved by node k."""
    budget = traces[0]["knobs"]["max_iterations"] if budget is None else budget
    rows = []
    for group in tasks_of(traces).values():
        firsts = [first_gold(t) for t in group]
        rows.append([sum(f is not None and f <= k for f in firsts) / len(firsts) for k in range(budget + 1)])
    return rows


def budget_curve(traces: list[dict[str, Any]], resamples: int = CURVE_RESAMPLES) -> dict[str, Any]:
    """The share of tasks solved by node k, k = 0..budget, with a 95% band from resampling tasks."""
    rows = solved_matrix(traces)
    n, width = len(rows), len(rows[0])
    mean = [sum(r[k] for r in rows) / n for k in range(width)]
    rng = random.Random(BOOTSTRAP_SEED)
    boots = []
    for _ in range(resamples):
        pick = [rows[rng.randrange(n)] for _ in range(n)]
        boots.append([sum(r[k] for r in pick) / n for k in range(width)])
    lo = [percentile(sorted(b[k] for b in boots), 2.5) for k in range(width)]
    hi = [percentile(sorted(b[k] for b in boots), 97.5) for k in range(width)]
    return {"k": list(range(width)), "solved": [round(v, 4) for v in mean], "lo": [round(v, 4) for v in lo],
            "hi": [round(v, 4) for v in hi], "n_tasks": n, "budget": width - 1, "resamples": resamples,
            "unit": "task (a task's value: the share of its search seeds solved by node k)"}


def tokens_to_gold(trace: dict[str, Any]) -> int | None:
    """Completion tokens the search generated up to and including its first gold node; None when none is gold."""
    first = first_gold(trace)
    return None if first is None else sum(n.get("completion_tokens", 0) for n in trace["nodes"][: first + 1])


def token_curve(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """The share of tasks solved within t generated tokens, at every t where it changes; it runs to the most
    completion tokens any search of the arm generated, solved or not (a task's value: the share of its seeds)."""
    groups = list(tasks_of(traces).values())
    spent = [[tokens_to_gold(t) for t in group] for group in groups]
    most = max(sum(n.get("completion_tokens", 0) for n in t["nodes"]) for t in traces)
    xs = sorted({0, most, *[s for row in spent for s in row if s is not None]})
    solved = [sum(sum(s is not None and s <= x for s in row) / len(row) for row in spent) / len(spent) for x in xs]
    return {"tokens": xs, "solved": [round(v, 4) for v in solved], "n_tasks": len(spent), "max_tokens": most,
            "unit": "task (a task's value: the share of its search seeds gold within t completion tokens)"}


def refinement_stats(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """Of every refinement the searches asked: share valid, share better than the parent, mean reward change,
    share identical to the parent program."""
    pairs = [(t["nodes"][n["parent"]], n) for t in traces for n in t["nodes"] if n.get("parent") is not None]
    if not pairs:
        return {"refinements": 0, "valid_share": None, "better_share": None, "mean_reward_change": None,
                "identical_share": None, "searches_refined": 0, "searches": len(traces)}
    k = len(pairs)
    return {"refinements": k,
            "valid_share": round(sum(bool(c["valid"]) for _, c in pairs) / k, 4),
            "better_share": round(sum(c["reward"] > p["reward"] for p, c in pairs) / k, 4),
            "mean_reward_change": round(sum(c["reward"] - p["reward"] for p, c in pairs) / k, 4),
            "identical_share": round(sum(program_key(c["code"]) == program_key(p["code"]) for p, c in pairs) / k, 4),
            "searches_refined": sum(any(n.get("parent") is not None for n in t["nodes"]) for t in traces),
            "searches": len(traces)}


def mention_stats(programs_by_search: Sequence[Sequence[str]], attributes: Sequence[str]) -> dict[str, Any]:
    """Of refinement programs (grouped by search): the share that names any of `attributes` (the held-out rule
    families' attributes: a program that tests one has at least written the rule's subject), and the searches
    with at least one such program."""
    programs = [code or "" for search in programs_by_search for code in search]
    named = [any(a in code for a in attributes) for code in programs]
    return {"refinements": len(programs), "mention_share": round(sum(named) / len(named), 4) if named else None,
            "searches": len(programs_by_search),
            "searches_mentioning": sum(any(any(a in (c or "") for a in attributes) for c in search)
                                       for search in programs_by_search)}


def refinement_programs(traces: list[dict[str, Any]]) -> list[list[str]]:
    """Per search, the programs of its refinements (every node with a parent)."""
    return [[n["code"] for n in t["nodes"] if n.get("parent") is not None] for t in traces]


def search_ledger(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """What an arm's searches spent: generations, tokens, sandbox evaluations, wall time."""
    nodes = [n for t in traces for n in t["nodes"]]
    gold_checks = sum(n.get("heldout_accuracy") is not None for n in nodes)
    return {"search_generations": len(nodes), "completion_tokens": sum(n.get("completion_tokens", 0) for n in nodes),
            "prompt_tokens": sum(n.get("prompt_tokens", 0) for n in nodes),
            "sandbox_evaluations": len(nodes) + gold_checks,
            "search_wall_s": round(sum(n.get("wall_s", 0.0) for n in nodes), 1),
            "operator_wall_s": round(sum(n.get("operator_wall_s", 0.0) for n in nodes), 1)}


def first_gold_both(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Per task solved by both arms (every seed), the mean first-gold node of each: a budget-free paired measure."""
    a_tasks, b_tasks = tasks_of(a), tasks_of(b)
    xs, ys = [], []
    for key, group in a_tasks.items():
        fa, fb = [first_gold(t) for t in group], [first_gold(t) for t in b_tasks.get(key, [])]
        if fb and all(f is not None for f in fa + fb):
            xs.append(sum(fa) / len(fa))
            ys.append(sum(fb) / len(fb))
    return xs, ys


def curve_table(curves: dict[str, dict[str, Any]], ks: Sequence[int] | None = None) -> list[str]:
    """Markdown: one row per arm, one column per k (share solved and its band)."""
    width = max(c["budget"] for c in curves.values()) + 1
    ks = list(range(width)) if ks is None else list(ks)
    lines = ["| arm | " + " | ".join(f"k={k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for arm, c in curves.items():
        cells = [f"{c['solved'][k]:.2f} [{c['lo'][k]:.2f}, {c['hi'][k]:.2f}]" if k <= c["budget"] else "-" for k in ks]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines
