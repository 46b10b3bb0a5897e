"""The r3 run folder, step markers, and run_r3.sh's chaining and resume.

The chaining tests swap the five steps for tiny fake ones (W8_STEPS_DIR) because the real
ones take minutes; the real chain is `make smoke`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import pipeline
from harness.config import KNOBS, load_config
from harness.exports import newest_export
from harness.pipeline import RunError

REPO = Path(__file__).resolve().parent.parent


def cfg_with(**env):
    return load_config(env={k: str(v) for k, v in env.items()})


# ---- run id and run_config.json ----------------------------------------------------------------
def test_run_id_is_derived_from_pipeline_model_seed_and_time():
    cfg = cfg_with(W8_HARNESS_MODEL="Qwen/Qwen2.5-Coder-1.5B-Instruct", W8_TRACE_TASK_SEED=11)
    assert pipeline.derive_run_id(cfg, now=0) == "r3-qwen2.5-coder-1.5b-instruct-s11-19700101-000000"
    assert pipeline.resolve_run_id(cfg_with(W8_RUN_ID="mine")) == "mine"
    assert pipeline.model_slug("/tmp/runs/x/grpo/global_step_4/policy/") == "policy"


@pytest.mark.parametrize("bad", ["../up", "a/b", "-dash", "sp ace"])
def test_unsafe_run_id_is_refused_with_the_variable_name(bad):
    with pytest.raises(RunError, match="W8_RUN_ID="):
        pipeline.resolve_run_id(cfg_with(W8_RUN_ID=bad))


def test_open_run_writes_every_knob_before_work_and_refuses_other_knobs(tmp_path):
    cfg = cfg_with(W8_RUN_ID="r1", W8_TRACE_MAX_ITERATIONS=4)
    run_dir = pipeline.open_run(cfg, root=tmp_path)
    config = json.loads((run_dir / "run_config.json").read_text())
    assert set(config["knobs"]) == {k.name for k in KNOBS}
    assert config["env"]["W8_TRACE_MAX_ITERATIONS"] == 4 and config["run_id"] == "r1"
    for field in ("git_sha", "versions", "model", "backend", "accelerators", "started_at"):
        assert config[field], field
    assert config["versions"]["python"] and "torch" in config["versions"]
    assert pipeline.open_run(cfg, root=tmp_path) == run_dir  # same knobs: reopened as is
    with pytest.raises(RunError, match=r"W8_TRACE_MAX_ITERATIONS=4 \(now 5\)"):
        pipeline.open_run(cfg_with(W8_RUN_ID="r1", W8_TRACE_MAX_ITERATIONS=5), root=tmp_path)


# ---- markers, atomic writes, exports -----------------------------------------------------------
def test_a_step_is_done_only_with_its_marker_and_every_output(tmp_path):
    assert not pipeline.step_is_done(tmp_path, "01_frozen_trace")
    pipeline.atomic_write_json(tmp_path / "frozen_trace.json", {"traces": []})
    with pytest.raises(RunError, match="claims outputs that do not exist: extra.json"):
        pipeline.mark_done(tmp_path, "01_frozen_trace", ["frozen_trace.json", "extra.json"], "s", 1.0)
    assert not pipeline.step_is_done(tmp_path, "01_frozen_trace")
    pipeline.mark_done(tmp_path, "01_frozen_trace", ["frozen_trace.json"], "s", 1.0)
    assert pipeline.step_is_done(tmp_path, "01_frozen_trace")
    (tmp_path / "frozen_trace.json").unlink()  # an output lost later: the step is redone
    assert not pipeline.step_is_done(tmp_path, "01_frozen_trace")
    assert pipeline.first_pending_step(tmp_path) == "01_frozen_trace"
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []
    with pytest.raises(RunError, match="unknown step"):
        pipeline.step_is_done(tmp_path, "06_extra")


def test_newest_export_is_the_highest_complete_global_step(tmp_path):
    for step, complete in ((2, True), (10, True), (11, False)):
        policy = tmp_path / f"global_step_{step}" / "policy"
        policy.mkdir(parents=True)
        if complete:
            (policy / "config.json").write_text("{}")
    assert newest_export(tmp_path) == tmp_path / "global_step_10" / "policy"
    assert newest_export(tmp_path / "absent") is None


# ---- run_r3.sh with fake steps -----------------------------------------------------------------
FAKE_STEP = r'''
import os, sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from harness.pipeline import StepResult, atomic_write_json, run_step

STEP = Path(__file__).stem
OUTPUT = {{"01_frozen_trace": "frozen_trace.json", "02_sft": "sft_metrics.json", "03_grpo": "grpo_metrics.json",
          "04_trained_trace": "trained_trace.json", "05_compare": "trace_compare.json"}}[STEP]

def body(cfg, run_dir, args):
    with open(os.environ["FAKE_STEPS_LOG"], "a") as f:
        f.write(STEP + "\n")
    if STEP == os.environ.get("FAKE_CRASH_AT"):
        atomic_write_json(run_dir / OUTPUT, {{"half": True}})  # an output without a marker: not done
        (run_dir / "grpo").mkdir(exist_ok=True)
        (run_dir / "grpo" / "skyrl_grpo.log").write_text("".join(f"line {{i}}\n" for i in range(500)))
        os._exit(137)  # like a SIGKILL / preemption: no marker is written
    atomic_write_json(run_dir / OUTPUT, {{"step": STEP, "knob": cfg.trace_max_iterations}})
    return StepResult([OUTPUT], STEP + " ok")

raise SystemExit(run_step(STEP, "fake " + STEP, body))
'''


@pytest.fixture
def fake_pipeline(tmp_path):
    steps = tmp_path / "steps"
    steps.mkdir()
    for step in pipeline.STEPS:
        (steps / f"{step}.py").write_text(FAKE_STEP.format(repo=str(REPO)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_") and k != "DAYTONA_API_KEY"}
    env.update({"W8_STEPS_DIR": str(steps), "W8_RUNS_ROOT": str(tmp_path / "runs"), "W8_PYTHON": sys.executable,
                "W8_RESULTS_ROOT": str(tmp_path / "results"), "FAKE_STEPS_LOG": str(tmp_path / "calls.log"),
                "W8_RUN_ID": "r3-fake", "W8_TRACE_MAX_ITERATIONS": "3", "RAY_TMPDIR": str(tmp_path / "ray")})
    return env, tmp_path


def run_r3(env):
    return subprocess.run(["bash", "scripts/run_r3.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def step_calls(tmp_path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().split() if log.exists() else []


@pytest.mark.slow
def test_run_killed_after_step_02_resumes_at_03(fake_pipeline):
    env, tmp = fake_pipeline
    first = run_r3({**env, "FAKE_CRASH_AT": "03_grpo"})
    assert first.returncode == 137
    assert "error: 03_grpo failed (exit 137)" in first.stderr and "W8_RUN_ID=r3-fake" in first.stderr
    assert step_calls(tmp) == ["01_frozen_trace", "02_sft", "03_grpo"]
    run_dir = tmp / "runs" / "r3-fake"
    assert (run_dir / "run_config.json").exists() and (run_dir / "grpo_metrics.json").exists()
    assert not pipeline.step_is_done(run_dir, "03_grpo")
    records = [json.loads(l.split("W8_RESULT ", 1)[1]) for l in first.stdout.splitlines() if "W8_RESULT {" in l]
    assert [r["file"] for r in records] == ["run_config.json", "frozen_trace.json", "sft_metrics.json",
                                            "failure-03_grpo.json", "failure-03_grpo-grpo-skyrl_grpo.log"]
    assert json.loads(records[3]["text"])["exit_code"] == 137  # the evidence of the failed step comes home
    tail = records[4]["text"].splitlines()
    assert len(tail) == 200 and tail[-1] == "line 499"

    second = run_r3(env)
    assert second.returncode == 0, second.stderr
    assert "[01_frozen_trace] complete, skipped" in second.stdout
    assert "[02_sft] complete, skipped" in second.stdout
    assert step_calls(tmp) == ["01_frozen_trace", "02_sft", "03_grpo", "03_grpo", "04_trained_trace", "05_compare"]
    assert json.loads((run_dir / "grpo_metrics.json").read_text()) == {"step": "03_grpo", "knob": 3}
    results = tmp / "results" / "r3-fake"
    assert sorted(p.name for p in results.iterdir()) == sorted(
        ["run_config.json", "frozen_trace.json", "sft_metrics.json", "grpo_metrics.json", "trained_trace.json",
         "trace_compare.json"])

    third = run_r3(env)  # a finished run: nothing reruns, results stay byte-identical
    assert third.returncode == 0 and len(step_calls(tmp)) == 6
    (results / "trace_compare.json").write_text("{}")
    fourth = run_r3(env)
    assert fourth.returncode != 0 and "never overwritten" in fourth.stderr
    assert (results / "trace_compare.json").read_text() == "{}"


def test_run_r3_refuses_a_bad_knob_or_other_knobs_on_resume(fake_pipeline):
    env, tmp = fake_pipeline
    bad = run_r3({**env, "W8_BACKEND": "tpu"})
    assert bad.returncode == 2 and "W8_BACKEND='tpu': expected one of local | skyrl" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp / "runs" / "r3-fake").exists()
    assert run_r3({**env, "FAKE_CRASH_AT": "02_sft"}).returncode == 137
    other = run_r3({**env, "W8_TRACE_MAX_ITERATIONS": "9"})
    assert other.returncode == 2 and "W8_TRACE_MAX_ITERATIONS=3 (now 9)" in other.stderr
    assert step_calls(tmp) == ["01_frozen_trace", "02_sft"]


def test_run_r3_never_prints_the_daytona_key(fake_pipeline):
    env, _ = fake_pipeline
    proc = run_r3({**env, "DAYTONA_API_KEY": "dtn_s3cr3t_value"})
    assert proc.returncode == 0, proc.stderr
    assert "dtn_s3cr3t_value" not in proc.stdout + proc.stderr
    assert "dtn_s3cr3t_value" not in (REPO / "scripts" / "run_r3.sh").read_text()
