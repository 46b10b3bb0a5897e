"""Step 05 on constructed arms whose answers are known: any two arms compare (no frozen arm needed), the
summary states n in tasks, puts what GRPO added beside trained vs frozen, reports the GRPO groups'
zero-variance share per step, and refuses to report a GRPO effect without headroom."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import load_config
from harness.pipeline import open_run
from tests.test_compare import arm

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def run(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_") and k != "DAYTONA_API_KEY"}
    env.update({"W8_RUNS_ROOT": str(tmp_path / "runs"), "W8_RUN_ID": "r3-compare", "W8_SANDBOX": "local",
                "W8_TRACE_TASKS": "3", "W8_TRACE_SEEDS": "2", "W8_TRACE_MAX_ITERATIONS": "16"})
    run_dir = open_run(load_config(env=env), tmp_path / "runs")
    return env, run_dir


def write_arm(run_dir: Path, name: str, traces: list[dict]) -> None:
    """An arm's trace file as a step writes it, with where its programs ran (step 05 refuses one without)."""
    sandbox = {"requested": "local", "backend": "local", "runs": {"local": sum(len(t["nodes"]) for t in traces)},
               "infra_failures": 0, "fallbacks": []}
    (run_dir / f"{name}_trace.json").write_text(json.dumps({"role": name, "model": name, "sandbox": sandbox,
                                                            "traces": traces}))


def compare(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/05_compare.py"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def test_sft_and_trained_alone_compare_with_task_level_numbers(run):
    env, run_dir = run
    write_arm(run_dir, "sft", arm([None, None, 3, 5, 0, 1]))
    write_arm(run_dir, "trained", list(reversed(arm([0, 1, 3, 3, 0, 0]))))  # other order: matched by key
    (run_dir / "grpo_metrics.json").write_text(json.dumps({"steps": [
        {"step": 1, "zero_variance_groups": 0.0, "prompts_zero_shot": 1, "prompts_refine": 0},
        {"step": 2, "zero_variance_groups": 1.0, "prompts_zero_shot": 0, "prompts_refine": 1}],
        "repair_grpo": {"prefilter": {"samples": 4, "candidates": 8, "with_signal": 3, "kept": 4, "kept_with_signal": 3,
                                      "generations": 32, "wall_s": 61.2, "tasks": []}}}))
    proc = compare(env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((run_dir / "trace_compare.json").read_text())
    [c] = result["comparisons"]
    assert (c["a"], c["b"], c["n_tasks"]) == ("trained", "sft", 3) and result["grpo_effect_readable"] is True
    assert c["measures"]["steps"]["mean_b"] == pytest.approx((17 + 4 + 0.5) / 3, abs=1e-4)
    summary = (run_dir / "summary.md").read_text()
    assert "**trained vs sft (what training added to the oracle warm-start)** (n = 3 tasks)" in summary
    assert ("zero-variance share of groups per step: 0.00 1.00; over all steps 0.50 (a zero-variance group gives "
            "GRPO no gradient); prompts per step (zero-shot/refinement): 1/0 0/1") in summary
    assert ("its prompts, chosen by pass rate: 3 of 8 repair prompts had unequal rewards over 4 answers of its start "
            "model; 3 of the 4 trained on (32 generations, 61 s)") in summary
    table = summary.split("## every search")[1]
    assert "| `heldout/p0/1/seed0/n24` | 0 | 17 | 0 |" in table  # the sft and trained cells of one key
    assert result["grpo_zero_variance"]["trained"]["steps"] == 2


def test_an_sft_arm_gold_everywhere_gets_no_grpo_effect(run):
    env, run_dir = run
    write_arm(run_dir, "frozen", arm([None] * 6))
    write_arm(run_dir, "sft", arm([0] * 6))
    write_arm(run_dir, "trained", arm([0] * 6))
    proc = compare(env)
    assert proc.returncode == 0, proc.stderr
    summary = (run_dir / "summary.md").read_text()
    assert "no GRPO effect is reported**: the sft arm is gold at node 0 on every task (3/3)" in summary
    assert "every one of the 3 tasks differs by exactly -17" in summary  # said in words, no interval
    assert "no GRPO effect readable" in proc.stdout


def test_a_results_folder_is_redone_from_its_own_files(run, tmp_path):
    """--results DIR: the compare of a results folder (traces, run_config.json, an older summary.md, no step markers)
    redone there; the wall-time rows its run recorded are kept, and no run folder is opened or touched. Its
    run_config.json predates W8_SPLIT and W8_HELDOUT_RULES: those knobs take their defaults (the page split)."""
    env, run_dir = run
    write_arm(run_dir, "frozen", arm([None] * 6))
    write_arm(run_dir, "trained", arm([0, 1, None, 2, 0, 0]))
    folder = tmp_path / "results" / "r3-compare"
    folder.mkdir(parents=True)
    for name in ("run_config.json", "frozen_trace.json", "trained_trace.json"):
        (folder / name).write_bytes((run_dir / name).read_bytes())
    older = json.loads((folder / "run_config.json").read_text())
    del older["knobs"]["split"], older["knobs"]["heldout_rules"]
    (folder / "run_config.json").write_text(json.dumps(older))
    row = "| 01_frozen_trace | 12.5 | 900.1 | frozen: gold reached in 0/6 searches |"
    (folder / "summary.md").write_text(f"# old\n\n## wall times\n\n| step | wall s | peak RSS MB | summary |\n"
                                       f"|---|---|---|---|\n{row}\n")
    proc = subprocess.run([sys.executable, "scripts/05_compare.py", "--results", str(folder)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("trace_compare.json", "trace.png", "budget_curves.png", "budget_curves_tokens.png"):
        assert (folder / name).stat().st_size > 0
    summary = (folder / "summary.md").read_text()
    assert summary.startswith("# r3 run `r3-compare`") and row in summary.split("## wall times")[1]
    assert "(recorded by the run's own step 05: its step markers are not in this folder)" in summary
    assert "- split: page (held-out pages" in summary
    result = json.loads((folder / "trace_compare.json").read_text())
    assert result["token_curves"]["trained"]["solved"][-1] == pytest.approx(5 / 6, abs=1e-4)  # p1: 1 of 2 seeds
    assert not (folder / "steps").exists() and not (run_dir / "trace_compare.json").exists()
