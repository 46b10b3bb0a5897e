"""Benchmark report: label balance, per-type stats, oracle accuracy, trivial baselines.

    make benchmark-report
    python scripts/benchmark_report.py --tasks 50 --examples-per-obs 24

The oracle (harness/oracle.py, trusted code: runs in this process) is scored on every
labeled action of the snapshot; always-True / always-False are scored on sampled
held-out tasks with the same reward arithmetic the search uses (harness.rewards).
Then the rule split's check (harness.split_check), with W8_HELDOUT_RULES: per held-out task
the full oracle's, the restricted target's and a constant's balanced accuracy, how many of the
first refinement prompt's failures depend on the held-out rules, and the steps a rule-adding
operator needs. Writes nothing; ends with one summary line.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.config import load_config_or_exit  # noqa: E402
from harness.dataset import DatasetError, examples_of, load_snapshot, make_task, n_pages  # noqa: E402
from harness.manifest import error_kind, snapshot_stats  # noqa: E402
from harness.oracle import is_legal_action  # noqa: E402
from harness.rewards import score_predictions  # noqa: E402
from harness.rule_split import Design  # noqa: E402
from harness.split_check import check_split, report_lines  # noqa: E402
from harness.traces import trace_tasks  # noqa: E402
from harness.training_data import train_tasks  # noqa: E402


def oracle_accuracy(records: list[dict]) -> tuple[dict, dict[str, tuple[int, int]], list]:
    """Whole-snapshot score of the oracle, per-type (right, total), and its mistakes."""
    examples = [e for r in records for e in examples_of(r)]
    predictions = [is_legal_action(e.state, e.action) for e in examples]
    per_type: dict[str, list[int]] = {}
    for p, e in zip(predictions, examples):
        right_total = per_type.setdefault(e.action_type, [0, 0])
        right_total[0] += p == e.legal
        right_total[1] += 1
    mistakes = [(e, p) for p, e in zip(predictions, examples) if p != e.legal]
    return score_predictions(predictions, examples).summary(), {t: tuple(v) for t, v in per_type.items()}, mistakes


def trivial_baselines(n_tasks: int, examples_per_obs: int) -> dict[str, dict[str, float]]:
    out = {}
    tasks = [make_task("heldout", seed, examples_per_obs) for seed in range(n_tasks)]
    for name, constant in (("always-True", True), ("always-False", False)):
        scores = [score_predictions([constant] * len(t.examples), t.examples) for t in tasks]
        out[name] = {k: sum(getattr(s, k) for s in scores) / len(scores)
                     for k in ("balanced_accuracy", "accuracy", "reward")}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=50, help="held-out tasks sampled for the baselines")
    parser.add_argument("--examples-per-obs", type=int, default=24)
    parser.add_argument("--show-mistakes", type=int, default=10, help="oracle mistakes to print")
    args = parser.parse_args()
    cfg = load_config_or_exit([])
    rule = cfg.replace(split="rule", trace_tasks=n_pages("heldout", design=Design("rule", tuple(
        cfg.heldout_rules.split(",")))), trace_examples_per_obs=args.examples_per_obs, trace_task_seed=7)
    try:
        records = load_snapshot()
        baselines = trivial_baselines(args.tasks, args.examples_per_obs)
    except DatasetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    stats = snapshot_stats(records)
    t = stats["totals"]
    print(f"snapshot: {t['observations']} observations from {t['pages']} pages, {t['actions']} labeled actions, "
          f"legal share {t['legal_share']:.3f}, per-observation minority class >= {t['minority_class_share_per_obs_min']:.2f} "
          f"(median {t['minority_class_share_per_obs_median']:.2f})")
    for split, c in stats["splits"].items():
        print(f"  {split:<8} {c['pages']:>4} pages {c['observations']:>5} obs {c['actions']:>6} actions  "
              f"legal {c['legal'] / c['actions']:.3f}  dom_changed {c['dom_changed'] / c['actions']:.3f}")
    oracle, per_type, mistakes = oracle_accuracy(records)
    print(f"\n{'action type':<15} {'actions':>8} {'legal':>7} {'oracle acc':>11}")
    for name, c in sorted(stats["action_types"].items(), key=lambda kv: -kv[1]["actions"]):
        right, total = per_type.get(name, (0, 0))
        print(f"{name:<15} {c['actions']:>8} {c['legal'] / c['actions']:>7.3f} {right / total:>11.4f}")
    print("\nerror kinds: " + ", ".join(f"{k} {v}" for k, v in sorted(stats["error_kinds"].items(), key=lambda kv: -kv[1])))
    print(f"\n{'harness':<14} {'balanced acc':>13} {'accuracy':>9} {'reward':>7}   (scope)")
    print(f"{'oracle':<14} {oracle['balanced_accuracy']:>13.4f} {oracle['accuracy']:>9.4f} {oracle['reward']:>7.3f}   "
          f"whole snapshot, {oracle['n_examples']} actions")
    for name, b in baselines.items():
        print(f"{name:<14} {b['balanced_accuracy']:>13.4f} {b['accuracy']:>9.4f} {b['reward']:>7.3f}   "
              f"mean of {args.tasks} held-out tasks x {args.examples_per_obs}")
    if mistakes and args.show_mistakes:
        kinds = Counter(error_kind(e.error) or "legal" for e, _ in mistakes)
        print(f"\noracle mistakes: {len(mistakes)} ({dict(kinds)}); first {args.show_mistakes}:")
        for e, p in mistakes[: args.show_mistakes]:
            print(f"  {e.obs_id:<28} {e.action:<36} label={e.legal!s:<5} oracle={p!s:<5} {e.error[:90]}")
    design = Design.of(rule)
    report = check_split(design, trace_tasks(rule), train_tasks(64, args.examples_per_obs, design),
                         cfg.harness_gold_threshold)
    print(f"\nrule split (W8_SPLIT=rule, W8_HELDOUT_RULES={','.join(design.heldout_rules)}): every held-out page "
          f"that can serve a task, {args.examples_per_obs} examples each; train: tasks 0-63")
    print("\n".join(report_lines(report)))
    print(f"\nbenchmark-report: oracle accuracy {oracle['accuracy']:.4f} / balanced {oracle['balanced_accuracy']:.4f} "
          f"on {oracle['n_examples']} actions; always-True BA {baselines['always-True']['balanced_accuracy']:.3f}, "
          f"always-False BA {baselines['always-False']['balanced_accuracy']:.3f}; rule split: restricted target below gold "
          f"on {report['restricted_below_gold']}/{report['n_heldout']} held-out tasks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
