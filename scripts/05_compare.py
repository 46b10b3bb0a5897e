"""Step 05: the strict, paired compare of the run's arms, the curves, and summary.md.

    python scripts/05_compare.py                      # needs <run>/frozen_trace.json and trained_trace.json
    W8_RUN_ID=demo python scripts/05_compare.py

Writes <run>/trace_compare.json and <run>/trace.png (harness.compare: every arm on the same
(task, seed) pairs with the same knobs and decoding, or refused; gold recomputed; not reached
= max_iterations + 1; per pair of arms the mean difference with a paired bootstrap 95%
interval, sign test, probability of improvement; shrunk only if strictly fewer) and
<run>/summary.md: what ran, the per-arm table, the paired comparisons (trained vs frozen,
sft vs frozen, trained vs sft: what GRPO added to the warm-start), every search's steps,
what the gold harnesses look like (held-out accuracy, similarity to the SFT target), the
training metrics, the sandbox that ran, wall times. Ends with one line: the headline pair
and shrunk yes/no.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.compare import CompareError, compare_arms, plot_arms, steps_or_budget  # noqa: E402
from harness.files import atomic_write_json, atomic_write_text  # noqa: E402
from harness.oracle import sft_target_source  # noqa: E402
from harness.pipeline import STEPS, StepError, StepResult, load_run_config, read_marker, run_step  # noqa: E402
from harness.traces import ARMS, arm_file, load_traces  # noqa: E402
from harness.training_data import sft_target_for  # noqa: E402

STEP = "05_compare"
METRICS = ("sft_metrics.json", "grpo_metrics.json", "grpo_only_metrics.json")
METRIC_KEYS = ("loss", "reward_mean", "reward_std", "valid_rate", "zero_variance_groups", "step_time_s")


def _num(value, fmt: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def arm_table(result: dict) -> list[str]:
    budget = result["max_iterations"]
    lines = ["| arm | mean steps to gold (95% CI) | solved | gold harnesses: held-out accuracy, similarity to the "
             "SFT target |", "|---|---|---|---|"]
    for arm, a in result["arms"].items():
        lines.append(f"| {arm} | {a['mean_steps']:.2f} [{a['ci95'][0]:.2f}, {a['ci95'][1]:.2f}] | "
                     f"{a['solved']}/{a['n']} ({a['solved_share']:.0%}) | "
                     f"{_num(a['gold_heldout_accuracy_mean'], '.3f')}, "
                     f"{_num(a['gold_similarity_to_sft_target_mean'], '.3f')} |")
    return lines + ["", f"Not reached counts {budget + 1} (the budget of {budget} refinements + 1); fewer is better."]


def comparison_lines(result: dict) -> list[str]:
    names = {("trained", "frozen"): "trained vs frozen", ("sft", "frozen"): "sft vs frozen (the warm-start alone)",
             ("trained", "sft"): "trained vs sft (what GRPO added)", ("grpo_only", "frozen"): "grpo_only vs frozen",
             ("trained", "grpo_only"): "trained vs grpo_only (what SFT added)"}
    lines = []
    for c in result["comparisons"]:
        lines.append(f"- **{names[(c['a'], c['b'])]}**: {c['mean_a']:.2f} vs {c['mean_b']:.2f} steps, difference "
                     f"{c['mean_diff']:+.2f} (95% CI [{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}], {c['resamples']} "
                     f"paired bootstrap resamples; excludes 0: {'yes' if c['ci_excludes_zero'] else 'no'}), "
                     f"P(improvement) {c['prob_improvement']:.2f}, sign test p = {c['sign_test_p']:.3f} "
                     f"({c['shrunk_pairs']} shrunk / {c['tied_pairs']} tied / {c['grown_pairs']} grown): "
                     f"shrunk {'yes' if c['shrunk'] else 'no'}")
    return lines


def searches_table(arms: dict[str, list[dict]]) -> list[str]:
    names = list(arms)
    lines = ["| task | seed | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for i, trace in enumerate(next(iter(arms.values()))):
        cells = [str(steps_or_budget(arms[name][i])) for name in names]
        lines.append(f"| `{trace['task']['task_id']}` | {trace['knobs'].get('search_seed', 0)} | " + " | ".join(cells)
                     + " |")
    return lines


def metrics_lines(run_dir: Path) -> list[str]:
    """One line per metrics file: its per-step numbers (first and last step when there are many)."""
    lines = []
    for name in METRICS:
        path = run_dir / name
        if not path.exists():
            continue
        steps = json.loads(path.read_text()).get("steps") or []
        shown = steps if len(steps) <= 4 else [steps[0], steps[-1]]
        parts = ["step {}: {}".format(s.get("step"), ", ".join(f"{k} {s[k]:.3g}" for k in METRIC_KEYS
                                                               if isinstance(s.get(k), (int, float))))
                 for s in shown]
        lines.append(f"- `{name}` ({len(steps)} steps): {'; '.join(parts) or 'no steps recorded'}")
    return lines


def sandbox_lines(config: dict) -> list[str]:
    """Which backend ran each step's programs (run_config.json["sandbox"]), with counts and fallbacks."""
    lines = []
    for step, record in sorted((config.get("sandbox") or {}).items()):
        runs = ", ".join(f"{backend} {n}" for backend, n in sorted((record.get("runs") or {}).items())) or "none"
        falls = record.get("fallbacks") or []
        fallback = "; fallbacks: " + "; ".join(f"{f['at']} {f['reason']}" for f in falls) if falls else ""
        day = record.get("daytona") or {}
        daytona = (f"; Daytona sandbox {day.get('sandbox')}: network block "
                   f"{'confirmed' if day.get('network_block_all') else 'NOT confirmed'} (probe reached "
                   f"{', '.join(k for k, v in (day.get('probe') or {}).items() if v) or 'nothing'}), Python "
                   f"{day.get('python')}, {day.get('slots')} slot(s), retries {(day.get('stats') or {}).get('retries', 0)}"
                   f", recreated {(day.get('stats') or {}).get('recreated', 0)}") if day.get("sandbox") else ""
        lines.append(f"- {step}: asked {record.get('requested')}, programs run: {runs}, sandbox failures "
                     f"{record.get('infra_failures', 0)}{fallback}{daytona}")
    return lines


def summary_markdown(run_dir: Path, result: dict, arms: dict[str, list[dict]]) -> str:
    config = load_run_config(run_dir)
    knobs, hp = config["knobs"], config.get("hparams", {})
    headline = next((c for c in result["comparisons"] if (c["a"], c["b"]) == ("trained", "frozen")), None)
    dec = result["decoding"]
    lines = [
        f"# r3 run `{config['run_id']}`",
        "",
        f"- model: `{config['model']}` (backend `{config['backend']}`, preset `{knobs.get('preset') or 'none'}`), "
        f"git `{config['git_sha']}`",
        f"- hardware: {', '.join(config['accelerators']['detected'])}; started {config['started_at']}",
        f"- searches: {knobs.get('trace_tasks')} held-out task(s) (each from its own page) x {knobs.get('trace_seeds')} "
        f"search seed(s) = {result['n_pairs']} paired searches per arm, {knobs.get('trace_examples_per_obs')} "
        f"examples each; budget {result['max_iterations']} refinements; gold = balanced accuracy >= "
        f"{result['gold_threshold']}",
        f"- decoding, every arm: operator `{dec.get('name')}`, temperature {dec.get('temperature')}, up to "
        f"{dec.get('max_new_tokens')} tokens" + (f", {dec['dtype']}" if dec.get("dtype") else ""),
        f"- training: SFT steps {knobs.get('harness_sft_steps')}, GRPO on {knobs.get('train_count')} train tasks "
        f"x {knobs.get('grpo_epochs')} epoch(s)"
        + (f", capped at {knobs['grpo_max_steps']} step(s)" if knobs.get("grpo_max_steps") else "")
        + (f"; hyperparameters ({hp.get('backend')}): " + ", ".join(f"{k} {v}" for k, v in hp.items() if k != "backend")
           if hp else ""),
        "",
        "## steps_to_gold per arm",
        "",
        *arm_table(result),
        "",
        "## paired comparisons",
        "",
        *comparison_lines(result),
        "",
        f"**shrunk: {'yes' if result['shrunk'] else 'no'}** (trained vs frozen: mean steps strictly fewer"
        + (f"; the 95% interval {'excludes' if headline['ci_excludes_zero'] else 'does not exclude'} zero)"
           if headline else ")"),
        "",
        "## every search (steps to gold)",
        "",
        *searches_table(arms),
        "",
        "## training metrics",
        "",
        *(metrics_lines(run_dir) or ["- none recorded"]),
        "",
        "## sandbox (what actually ran the programs)",
        "",
        *(sandbox_lines(config) or ["- not recorded"]),
        "",
        "## wall times",
        "",
        "| step | wall s | summary |",
        "|---|---|---|",
    ]
    for step in STEPS[:-1]:
        marker = read_marker(run_dir, step) or {}
        lines.append(f"| {step} | {marker.get('wall_s', '-')} | {marker.get('summary', 'not run')} |")
    return "\n".join(lines) + "\n"


def body(cfg, run_dir: Path, args) -> StepResult:
    missing = [arm_file(arm) for arm in ("frozen", "trained") if not (run_dir / arm_file(arm)).exists()]
    if missing:
        raise StepError(f"missing {', '.join(missing)} in {run_dir}: run steps 01 and 04 first")
    arms = {arm: load_traces(run_dir / arm_file(arm)) for arm in ARMS if (run_dir / arm_file(arm)).exists()}
    try:
        result = compare_arms(arms, sft_target=sft_target_source(sft_target_for(cfg.backend)))
    except CompareError as err:
        raise StepError(f"compare refused: {err}") from None
    atomic_write_json(run_dir / "trace_compare.json", result)
    plot_arms(arms, run_dir / "trace.png")
    atomic_write_text(run_dir / "summary.md", summary_markdown(run_dir, result, arms))
    head = next((c for c in result["comparisons"] if (c["a"], c["b"]) == ("trained", "frozen")), None)
    summary = (f"steps_to_gold frozen {head['mean_b']:.2f} -> trained {head['mean_a']:.2f} over {head['n_pairs']} "
               f"paired searches (95% CI of the difference [{head['ci95'][0]:+.2f}, {head['ci95'][1]:+.2f}]): "
               f"shrunk {'yes' if result['shrunk'] else 'no'}")
    return StepResult(["trace_compare.json", "trace.png", "summary.md"], summary)


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
