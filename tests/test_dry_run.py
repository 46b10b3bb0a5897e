"""make dry-run: the whole offline validation of a launch, and its one-line refusals before money is spent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import load_config
from harness.dataset import make_task
from harness.traces import trace_tasks

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import dry_run  # noqa: E402


def clean_env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("W8_") and k not in ("DAYTONA_API_KEY", "WANDB_API_KEY")}
    return {**env, **extra}


@pytest.mark.slow
def test_gpu_smoke_plan_validates_offline():
    proc = subprocess.run([sys.executable, "scripts/dry_run.py"], cwd=REPO, env=clean_env(W8_PRESET="gpu-smoke"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("dry-run: 11/11 checks ok")
    assert "ok   node env       node env ok: skyrl 0.4.0 [fsdp]" in proc.stdout
    assert "ok   skyrl lock     lock ok: requirements-node.txt (matplotlib 3.11.2, daytona 0.210.0) fits" in proc.stdout
    assert "memory 64+ GB, no ports" in proc.stdout and "guard report" in proc.stdout
    assert "L4:1 x 1 node(s): 1 GPUs" in proc.stdout and "L4:8 x 4 node(s): 32 GPUs" in proc.stdout
    plans = REPO / ".w8-biayn" / "dry-run" / "gpu-smoke" / "plans"
    grpo = (plans / "skyrl_grpo_overrides-L4-1x1.txt").read_text().splitlines()
    assert "trainer.max_training_steps=1" in grpo and "generator.sampling_params.max_generate_length=2560" in grpo
    launch = (REPO / ".w8-biayn" / "dry-run" / "gpu-smoke" / "sky_launch.txt").read_text()
    assert "--gpus L4:1" in launch and "--env W8_PRESET=gpu-smoke" in launch


@pytest.mark.parametrize("env, message", [
    ({"W8_PRESET": "gcp", "W8_SANDBOX": "daytona"}, "W8_SANDBOX=daytona but DAYTONA_API_KEY is not set"),
    ({}, "W8_BACKEND=local: a GCP launch trains with skyrl"),
])
def test_launch_needs_are_named(env, message, monkeypatch):
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    with pytest.raises(dry_run.CheckError, match=message):
        dry_run.check_launch_needs(load_config(env=env))


@pytest.mark.slow
@pytest.mark.parametrize("extra, message", [
    ({"W8_OPERATOR_MAX_NEW_TOKENS": "512"}, "error: W8_OPERATOR_MAX_NEW_TOKENS=512 < the SFT answer's"),
    ({"W8_NUM_NODES": "3", "W8_BUCKET": "gs://b/r3"}, "error: W8_NUM_NODES=3 x L4:1 = 3 GPUs: use a node count"),
])
def test_skyrl_plans_refuse_a_budget_or_a_node_count_in_one_line(extra, message, tmp_path):
    proc = subprocess.run([sys.executable, "scripts/validate_skyrl.py", "--data-dir", str(tmp_path / "rows"),
                           "--out", str(tmp_path / "plans")], cwd=REPO,
                          env=clean_env(W8_PRESET="gpu-smoke", **extra), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr


def test_the_datasets_check_builds_the_trace_tasks_the_steps_search():
    """Not the search seeds 0..S-1 (the defect): one task per held-out page from W8_TRACE_TASK_SEED."""
    cfg = load_config(env={"W8_PRESET": "gcp", "W8_TRACE_TASKS": "3", "W8_TRACE_SEEDS": "2", "W8_TRACE_TASK_SEED": "7"})
    line = dry_run.check_datasets(cfg)
    ids = [t.task_id for t in trace_tasks(cfg)]
    assert line.startswith(f"3 held-out trace task(s) ({', '.join(ids)}), ")
    assert make_task("heldout", 0, cfg.trace_examples_per_obs).task_id not in line
