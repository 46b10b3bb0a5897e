"""Step 05: strict compare of the frozen and trained traces, the plot, and summary.md.

    python scripts/05_compare.py                      # needs <run>/frozen_trace.json and trained_trace.json
    W8_RUN_ID=demo python scripts/05_compare.py

Writes <run>/trace_compare.json and <run>/trace.png (harness.compare: same task and knobs
or refused; not reached = max_iterations + 1; shrunk only if strictly fewer) and
<run>/summary.md: what ran, steps_to_gold before and after, shrunk or not, held-out
accuracy of the gold harnesses, training metrics and wall times. Ends with one line:
steps frozen -> trained, shrunk yes/no.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.compare import CompareError, compare_traces, plot_traces  # noqa: E402
from harness.files import atomic_write_json, atomic_write_text  # noqa: E402
from harness.pipeline import STEPS, StepError, StepResult, load_run_config, read_marker, run_step  # noqa: E402
from harness.traces import load_traces  # noqa: E402

STEP = "05_compare"
METRICS = ("sft_metrics.json", "grpo_metrics.json")


def _steps(steps: int, reached: bool) -> str:
    return f"{steps}" if reached else f"not reached (counts {steps})"


def gold_heldout(traces: list[dict]) -> list[str]:
    rows = []
    for trace in traces:
        for node in trace["nodes"]:
            if node["gold"]:
                acc = node.get("heldout_accuracy")
                rows.append(f"{trace['task']['task_id']} node {node['index']}: "
                            f"{'n/a' if acc is None else f'{acc:.3f}'}")
    return rows


METRIC_KEYS = ("loss", "reward_mean", "reward_std", "valid_rate", "zero_variance_groups", "step_time_s")


def sandbox_lines(config: dict) -> list[str]:
    """Which backend ran each step's programs (run_config.json["sandbox"]), with counts and fallbacks."""
    lines = []
    for step, record in sorted((config.get("sandbox") or {}).items()):
        runs = ", ".join(f"{backend} {n}" for backend, n in sorted((record.get("runs") or {}).items())) or "none"
        falls = record.get("fallbacks") or []
        fallback = "; fallbacks: " + "; ".join(f"{f['at']} {f['reason']}" for f in falls) if falls else ""
        lines.append(f"- {step}: asked {record.get('requested')}, programs run: {runs}, sandbox failures "
                     f"{record.get('infra_failures', 0)}{fallback}")
    return lines


def metrics_lines(run_dir: Path) -> list[str]:
    """One line per metrics file: its per-step numbers (first and last step when there are many)."""
    lines = []
    for name in METRICS:
        path = run_dir / name
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        steps = data.get("steps") or []
        shown = steps if len(steps) <= 4 else [steps[0], steps[-1]]
        parts = ["step {}: {}".format(s.get("step"), ", ".join(f"{k} {s[k]:.3g}" for k in METRIC_KEYS
                                                               if isinstance(s.get(k), (int, float))))
                 for s in shown]
        lines.append(f"- `{name}` ({len(steps)} steps): {'; '.join(parts) or 'no steps recorded'}")
    return lines


def summary_markdown(run_dir: Path, result: dict, frozen: list[dict], trained: list[dict]) -> str:
    config = load_run_config(run_dir)
    trained_model = json.loads((run_dir / "trained_trace.json").read_text()).get("model", "?")
    knobs = config["knobs"]
    budget = result["max_iterations"]
    lines = [
        f"# r3 run `{config['run_id']}`",
        "",
        f"- model: `{config['model']}` (backend `{config['backend']}`, operator `{knobs.get('operator')}`), "
        f"git `{config['git_sha']}`; trained model `{trained_model}`",
        f"- hardware: {', '.join(config['accelerators']['detected'])}; started {config['started_at']}",
        f"- trace tasks: {result['n_tasks']} held-out, {knobs.get('trace_examples_per_obs')} examples each; "
        f"budget {budget} refinements; gold = balanced accuracy >= {result['gold_threshold']}",
        f"- training: SFT steps {knobs.get('harness_sft_steps')}, GRPO on {knobs.get('train_count')} train tasks "
        f"x {knobs.get('grpo_epochs')} epoch(s)"
        + (f", capped at {knobs['grpo_max_steps']} step(s)" if knobs.get("grpo_max_steps") else ""),
        "",
        "## steps_to_gold (fewer is better; strict)",
        "",
        "| task | frozen | trained | shrunk |",
        "|---|---|---|---|",
    ]
    for row in result["tasks"]:
        lines.append(f"| `{row['task_id']}` | {_steps(row['frozen_steps'], row['frozen_reached'])} | "
                     f"{_steps(row['trained_steps'], row['trained_reached'])} | {'yes' if row['shrunk'] else 'no'} |")
    lines += ["", f"**shrunk: {'yes' if result['shrunk'] else 'no'}** - mean steps {result['mean_frozen_steps']:.2f} "
              f"-> {result['mean_trained_steps']:.2f} (not reached counts {budget + 1}; equal is not success)"]
    if result["n_tasks"] > 1:
        lines.append(f"; sign test p = {result['sign_test_p']:.3f} over {result['shrunk_tasks']} shrunk / "
                     f"{result['grown_tasks']} grown / {result['tied_tasks']} tied")
    lines += ["", "## held-out accuracy of the gold harnesses (other held-out observations)", ""]
    lines += [f"- frozen {row}" for row in gold_heldout(frozen)] or ["- frozen: no gold harness"]
    lines += [f"- trained {row}" for row in gold_heldout(trained)] or ["- trained: no gold harness"]
    lines += ["", "## training metrics", ""] + (metrics_lines(run_dir) or ["- none recorded"])
    lines += ["", "## sandbox (what actually ran the programs)", ""] + (sandbox_lines(config) or ["- not recorded"])
    lines += ["", "## wall times", "", "| step | wall s | summary |", "|---|---|---|"]
    for step in STEPS[:-1]:
        marker = read_marker(run_dir, step) or {}
        lines.append(f"| {step} | {marker.get('wall_s', '-')} | {marker.get('summary', 'not run')} |")
    return "\n".join(lines) + "\n"


def body(cfg, run_dir: Path, args) -> StepResult:
    missing = [name for name in ("frozen_trace.json", "trained_trace.json") if not (run_dir / name).exists()]
    if missing:
        raise StepError(f"missing {', '.join(missing)} in {run_dir}: run steps 01 and 04 first")
    frozen = load_traces(run_dir / "frozen_trace.json")
    trained = load_traces(run_dir / "trained_trace.json")
    try:
        result = compare_traces(frozen, trained)
    except CompareError as err:
        raise StepError(f"compare refused: {err}") from None
    atomic_write_json(run_dir / "trace_compare.json", result)
    plot_traces(frozen, trained, run_dir / "trace.png")
    atomic_write_text(run_dir / "summary.md", summary_markdown(run_dir, result, frozen, trained))
    summary = (f"steps_to_gold frozen {result['mean_frozen_steps']:.2f} -> trained {result['mean_trained_steps']:.2f} "
               f"over {result['n_tasks']} task(s): shrunk {'yes' if result['shrunk'] else 'no'}")
    return StepResult(["trace_compare.json", "trace.png", "summary.md"], summary)


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
