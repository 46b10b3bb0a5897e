"""Steps 01, 04 and 05 run for real (no fakes): the deterministic operator searches a held-out task in the
real sandbox, step 04 finds a stub GRPO export (the deterministic operator loads no model), step 05
compares, plots and writes summary.md. Missing inputs are one line and exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def step_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_") and k != "DAYTONA_API_KEY"}
    env.update({"W8_RUNS_ROOT": str(tmp_path / "runs"), "W8_RUN_ID": "r3-steps", "W8_OPERATOR": "deterministic",
                "W8_TRACE_MAX_ITERATIONS": "3", "W8_TRACE_EXAMPLES_PER_OBS": "8", "W8_TRACE_TASKS": "2",
                "W8_TRACE_SEEDS": "2"})
    return env, tmp_path / "runs" / "r3-steps"


def step(name: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"scripts/{name}.py", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow  # over 5 s on 2 cores: runs in make test-slow
def test_steps_01_04_05_for_real(step_env):
    env, run_dir = step_env
    early = step("05_compare", {**env, "W8_SANDBOX": "local"})
    assert early.returncode == 1
    assert early.stderr.strip().splitlines() == [
        f"error: [05_compare] {run_dir} has 0 arm trace(s) (none); a compare needs two: run step 01 (frozen) or 04 "
        "(sft, repair_sft, trained, grpo_only, refine, self) first"]

    # the flag, not the environment, decides the sandbox (a DAYTONA_API_KEY in the shell must not win)
    frozen = step("01_frozen_trace", {**env, "DAYTONA_API_KEY": "dtn-not-a-real-key"}, "--sandbox", "local")
    assert frozen.returncode == 0, frozen.stderr
    marker = json.loads((run_dir / "steps" / "01_frozen_trace.json").read_text())
    assert marker["sandbox"]["requested"] == "local" and marker["sandbox"]["fallbacks"] == []
    assert marker["sandbox"]["runs"]["local"] > 0 and "daytona" not in marker["sandbox"]["runs"]
    assert json.loads((run_dir / "run_config.json").read_text())["sandbox"]["01_frozen_trace"] == marker["sandbox"]

    env["W8_SANDBOX"] = "local"  # the run folder is bound to its knobs: later steps ask the same
    no_export = step("04_trained_trace", env)
    assert no_export.returncode == 1 and no_export.stderr.startswith("error: [04_trained_trace] no GRPO export")
    policy = run_dir / "grpo" / "global_step_1" / "policy"
    policy.mkdir(parents=True)
    (policy / "config.json").write_text("{}")
    trained = step("04_trained_trace", env)
    assert trained.returncode == 0, trained.stderr
    traces = json.loads((run_dir / "trained_trace.json").read_text())
    assert traces["model"] == "grpo/global_step_1/policy"  # relative to the run folder: no machine paths
    assert len(traces["traces"]) == 4 and {t["task"]["split"] for t in traces["traces"]} == {"heldout"}
    assert len({t["task"]["page"] for t in traces["traces"]}) == 2  # two tasks from two pages, two seeds each

    compared = step("05_compare", env)
    assert compared.returncode == 0, compared.stderr
    result = json.loads((run_dir / "trace_compare.json").read_text())
    summary = (run_dir / "summary.md").read_text()
    shrunk_line = next(line for line in summary.splitlines() if line.startswith("**shrunk:"))
    assert shrunk_line.startswith(f"**shrunk: {'yes' if result['shrunk'] else 'no'}**")
    assert (result["n_tasks"], result["n_searches"]) == (2, 4) and not result["shrunk"]  # equal is not shrunk
    assert "n = 2 held-out tasks" in summary and "## power: could this design see an effect?" in summary
    assert (run_dir / "trace.png").read_bytes()[:4] == b"\x89PNG"
    assert "## sandbox" in summary and "01_frozen_trace: asked local" in summary


def test_examples_per_obs_the_snapshot_cannot_serve_stops_at_start(step_env):
    env, run_dir = step_env
    proc = step("01_frozen_trace", {**env, "W8_TRACE_EXAMPLES_PER_OBS": "35"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: W8_TRACE_EXAMPLES_PER_OBS=35: no heldout observation can give 35 balanced examples (the snapshot's "
        "largest observation has 34 actions)"]
    assert not run_dir.exists()  # refused before anything was written or loaded


def test_summary_says_which_sandbox_ran_and_what_daytona_confirmed():
    """The provenance record of run_config.json as summary.md prints it: fallbacks with their reason,
    and a Daytona sandbox's confirmed block, probe, Python and retries."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("compare_step", REPO / "scripts" / "05_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = {"sandbox": {
        "01_frozen_trace": {"requested": "auto", "runs": {"daytona": 4, "local": 2}, "infra_failures": 3,
                            "fallbacks": [{"at": "2026-12-03T10:00:00Z", "to": "local",
                                           "reason": "Daytona failed 3 programs in a row (last: x)"}],
                            "daytona": {"sandbox": "sb-1", "network_block_all": True, "python": "3.11.9", "slots": 1,
                                        "probe": {"tcp 1.1.1.1:53": False, "dns example.com": False},
                                        "stats": {"retries": 5, "recreated": 1}}},
        "03_grpo": {"requested": "local", "runs": {"local": 8}, "infra_failures": 0, "fallbacks": []}}}
    first, second = module.sandbox_lines(config)
    assert first == ("- 01_frozen_trace: asked auto, programs run: daytona 4, local 2, sandbox failures 3; fallbacks: "
                     "2026-12-03T10:00:00Z Daytona failed 3 programs in a row (last: x); Daytona sandbox sb-1: network "
                     "block confirmed (probe reached nothing), Python 3.11.9, 1 slot(s), retries 5, recreated 1")
    assert second == "- 03_grpo: asked local, programs run: local 8, sandbox failures 0"
