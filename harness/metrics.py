"""Training metrics: one record per step in metrics.json, and its plot metrics.png.

    from harness.metrics import write_metrics, summarize_skyrl_metrics
    write_metrics(out_dir, "grpo", steps, meta)              # the local TRL trainer
    summarize_skyrl_metrics(out_dir / "metrics.jsonl", out_dir, "grpo")   # what SkyRL logged, per step

Our metric names, the same for both backends (None where a backend does not report one):
step, loss, reward_mean, reward_std, valid_rate (share of valid programs), balanced_accuracy,
zero_variance_groups (share of GRPO groups whose samples all scored the same: no signal),
sandbox_failure_rate, kl, completion_length, step_time_s, prompts_zero_shot and prompts_refine
(the step's prompts of each kind), refine_improved and refine_identical (shares of the step's
refinement samples whose child beat its parent / was the parent unchanged); SkyRL steps also
keep every `timing/*` value under `timing`. SkyRL's own names for them are in `skyrl_step_record`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.files import atomic_path, atomic_write_json
from harness.plots import fit_y, titled

SHARES = ("balanced_accuracy", "valid_rate", "zero_variance_groups")  # in 0-1: their y-range shows the data (fit_y)


def write_metrics(out_dir: Path, kind: str, steps: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """metrics.json (one record per step + the run's settings) and metrics.png next to it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = atomic_write_json(out_dir / "metrics.json", {"kind": kind, **meta, "steps": steps}, indent=1)
    plot_metrics(steps, out_dir / "metrics.png", kind)
    return path


def plot_metrics(steps: list[dict[str, Any]], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    keys = [k for k in ("reward_mean", "balanced_accuracy", "valid_rate", "zero_variance_groups", "loss", "kl")
            if any(s.get(k) is not None for s in steps)]
    fig, axes = plt.subplots(1, max(1, len(keys)), figsize=(3.2 * max(1, len(keys)), 2.8), squeeze=False)
    for ax, key in zip(axes[0], keys):
        pts = [(s["step"], s[key]) for s in steps if s.get(key) is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3)
        if key == "reward_mean":
            stds = [s.get("reward_std") or 0.0 for s in steps if s.get(key) is not None]
            ax.fill_between([p[0] for p in pts], [p[1] - d for p, d in zip(pts, stds)],
                            [p[1] + d for p, d in zip(pts, stds)], alpha=0.2)
        titled(ax, key, fit_y(ax, [p[1] for p in pts]) if key in SHARES else "")
        ax.set_xlabel("step", fontsize=8)
        ax.set_xlim(pts[0][0] - 0.4, max(pts[-1][0], pts[0][0] + 1) + 0.4)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # the trainer's kind and the folder it trained into: grpo_only's, refine's and self's GRPO say which arm they are
    fig.suptitle(title if title == Path(png).parent.name else f"{title}: {Path(png).parent.name}", fontsize=10)
    fig.tight_layout()
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=90)
    plt.close(fig)


def summarize_skyrl_metrics(jsonl: str | Path, out_dir: str | Path, kind: str) -> Path | None:
    """metrics.json/png from the rows MetricsLog wrote: one record per training step, SkyRL's key names."""
    path = Path(jsonl)
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [skyrl_step_record(row) for row in rows if "timing/step" in row]
    evals = [{"step": row["step"], **{k: v for k, v in row.items() if k.startswith("eval/")}}
             for row in rows if any(k.startswith("eval/") for k in row)]
    return write_metrics(Path(out_dir), kind, steps, {"backend": "skyrl", "source": path.name, "evals": evals})


def skyrl_step_record(row: dict) -> dict:
    """One training step's numbers under our metric names (None where SkyRL did not log them)."""
    timing = {k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("timing/")}
    return {"step": int(row["step"]), "step_time_s": row.get("timing/step"),
            "reward_mean": row.get("reward/avg_raw_reward"), "reward_std": row.get("harness/reward_std"),
            "valid_rate": row.get("environment/valid"), "balanced_accuracy": row.get("environment/balanced_accuracy"),
            "sandbox_failure_rate": row.get("environment/sandbox_failed"),
            "zero_variance_groups": row.get("harness/zero_variance_groups"),
            "prompts_zero_shot": row.get("harness/prompts_zero_shot"), "prompts_refine": row.get("harness/prompts_refine"),
            "refine_improved": row.get("environment/improved"), "refine_identical": row.get("environment/identical"),
            "loss": row.get("policy/final_loss", row.get("train/loss")), "kl": row.get("policy/policy_kl"),
            "completion_length": row.get("generate/avg_num_tokens"), "timing": timing}
