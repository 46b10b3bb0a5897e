"""What a step reads is checked before it works or skips, a missing model is found with the knobs, caches stay
in the run folder (issue 27).

Real run folders throughout: step 01 searches for real with the deterministic operator in the local sandbox,
the training data is the run's own (harness.training_data), steps 02/03 are marked done by hand over stub
exports (no model is loaded), and each step script runs by hand in its own process as a user would run it.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import pipeline
from harness.config import ConfigError, load_config
from harness.markers import data_problems, input_problems, mark_done
from harness.models import ModelError, check_model_name
from harness.sandbox import merge_provenance, provenance_is_empty
from harness.traces import sandbox_problem
from harness.training_data import training_data_for

REPO = Path(__file__).resolve().parents[1]
KNOBS = {"W8_RUN_ID": "r27", "W8_OPERATOR": "deterministic", "W8_SANDBOX": "local", "W8_TRACE_MAX_ITERATIONS": "2",
         "W8_TRACE_TASKS": "2", "W8_TRACE_EXAMPLES_PER_OBS": "8", "W8_TRAIN_COUNT": "1",
         "W8_TRAIN_EXAMPLES_PER_OBS": "8", "W8_REPAIR_FAMILIES": "2", "W8_REPAIR_TASKS_PER_FAMILY": "2",
         "W8_REPAIR_HELDIN_FAMILIES": "2", "W8_REPAIR_HELDIN_TASKS_PER_FAMILY": "2"}  # step 01's repair files, small


@pytest.fixture
def run_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_") and k != "DAYTONA_API_KEY"}
    env.update(KNOBS, W8_RUNS_ROOT=str(tmp_path / "runs"), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        env.pop(name, None)
    return env, tmp_path / "runs" / "r27"


def step(name: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"scripts/{name}.py", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def cut_to_half(path: Path) -> tuple[int, int]:
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    return len(whole) // 2, len(whole)


def stub_training(run_dir: Path) -> None:
    """Steps 02 and 03 as done: the run's real training data, a stub export and metrics each, their markers."""
    training_data_for(pipeline.config_of_run(run_dir), run_dir / "data")
    for step_name, kind in (("02_sft", "sft"), ("03_grpo", "grpo")):
        policy = run_dir / kind / "global_step_1" / "policy"
        policy.mkdir(parents=True)
        (policy / "config.json").write_text("{}")
        pipeline.atomic_write_json(run_dir / f"{kind}_metrics.json", {"policy": str(policy.relative_to(run_dir))})
        mark_done(run_dir, step_name, [f"{kind}_metrics.json", str(policy.relative_to(run_dir))], f"{kind} stub", 1.0)


# ---- 1. a step checks the earlier steps' files it reads, also when it would skip -------------------------
def test_a_step_run_by_hand_refuses_a_truncated_input_naming_the_file_and_the_step_to_redo(run_env):
    env, run_dir = run_env
    assert step("01_frozen_trace", env).returncode == 0
    pipeline.atomic_write_json(run_dir / "trace_compare.json", {"shrunk": False})
    mark_done(run_dir, "05_compare", ["trace_compare.json"], "a finished compare", 1.0)  # 05 would skip
    half, whole = cut_to_half(run_dir / "frozen_trace.json")

    proc = step("05_compare", env)
    assert proc.returncode == 1 and "complete, skipped" not in proc.stdout
    assert proc.stderr.splitlines() == [
        f"error: [05_compare] frozen_trace.json: {half} bytes, the marker says {whole} (truncated or overwritten), "
        "an output of step 01_frozen_trace: refusing to use it; redo step 01_frozen_trace first "
        "(scripts/01_frozen_trace.py with the same W8_RUN_ID, or resume the run)"]
    assert input_problems(run_dir, "02_sft") == []  # step 02 reads nothing of step 01

    assert "redoing the step" in step("01_frozen_trace", env).stdout  # what a resume does first
    again = step("05_compare", env)
    assert again.returncode == 0 and "[05_compare] complete, skipped (a finished compare)" in again.stdout


# ---- 2. a trace rebuilt from saved search nodes keeps its sandbox, operator and knob records --------------
def test_a_trace_rebuilt_from_saved_nodes_is_the_original_sandbox_record_included(run_env):
    env, run_dir = run_env
    assert step("01_frozen_trace", env).returncode == 0
    trace = run_dir / "frozen_trace.json"
    original = trace.read_bytes()
    sandbox = json.loads(original)["sandbox"]
    assert sandbox["backend"] == "local" and sandbox["requested"] == "local" and sandbox["runs"]["local"] > 0
    cut_to_half(trace)

    redo = step("01_frozen_trace", env)
    assert redo.returncode == 0 and "redoing the step" in redo.stdout
    assert "resumed" in redo.stdout  # from the saved search states, not searched again
    assert trace.read_bytes() == original  # sandbox, operator and knob records all as the clean run wrote them
    marker = json.loads((run_dir / "steps" / "01_frozen_trace.json").read_text())
    assert marker["sandbox"] == sandbox and "dropped" not in marker
    assert json.loads((run_dir / "run_config.json").read_text())["sandbox"]["01_frozen_trace"] == sandbox


def test_step_05_refuses_a_trace_whose_sandbox_record_is_empty(run_env):
    env, run_dir = run_env
    assert step("01_frozen_trace", env).returncode == 0
    frozen = json.loads((run_dir / "frozen_trace.json").read_text())
    empty = {"backend": None, "requested": "none", "runs": {}, "infra_failures": 0, "fallbacks": []}
    pipeline.atomic_write_json(run_dir / "trained_trace.json", {**frozen, "role": "trained", "sandbox": empty})

    proc = step("05_compare", env)
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("error: [05_compare] compare refused: trained_trace.json: its sandbox record is "
                                  "empty (")
    assert "delete it and search/trained-*.state.json, then rerun step 04_trained_trace" in proc.stderr
    assert sandbox_problem(run_dir / "frozen_trace.json") is None


def test_an_empty_sandbox_record_is_accepted_only_when_no_program_ran(tmp_path):
    path = tmp_path / "trained_trace.json"
    nodes = [{"code": "", "reason": "no code in the model output"}, {"code": "def f(:", "reason": "syntax"}]
    path.write_text(json.dumps({"role": "trained", "sandbox": None, "traces": [{"nodes": nodes}]}))
    assert sandbox_problem(path) is None  # nothing reached a sandbox: there is nothing to say where
    assert provenance_is_empty({"requested": "none", "backend": None, "runs": {}})
    assert not provenance_is_empty({"requested": "local", "backend": "local", "runs": {"local": 1}})


def test_sandbox_records_of_two_processes_merge_without_losing_either():
    first = {"requested": "auto", "backend": "local", "runs": {"local": 3}, "infra_failures": 1,
             "fallbacks": [{"to": "local", "reason": "no key"}]}
    resumed = {"requested": "none", "backend": None, "runs": {}, "infra_failures": 0, "fallbacks": []}
    assert merge_provenance(first, resumed) == first  # a process that only rebuilt the trace adds nothing
    later = {"requested": "daytona", "backend": "daytona", "runs": {"daytona": 2, "local": 1}, "infra_failures": 0,
             "fallbacks": [], "daytona": {"sandbox": "sb-1"}}
    assert merge_provenance(first, later) == {
        "requested": "auto + daytona", "backend": "daytona + local", "runs": {"local": 4, "daytona": 2},
        "infra_failures": 1, "fallbacks": first["fallbacks"], "daytona": {"sandbox": "sb-1"}}


# ---- 3. the cached training files (data/) are checked by the steps that train on them ---------------------
def test_a_truncated_training_file_is_named_and_rebuilt_by_a_step_that_skips(run_env):
    env, run_dir = run_env
    assert step("01_frozen_trace", env).returncode == 0
    stub_training(run_dir)
    jsonl = run_dir / "data" / "sft" / "train.jsonl"
    whole = jsonl.read_bytes()
    half, _ = cut_to_half(jsonl)
    assert data_problems(run_dir, "05_compare") == []  # only the training steps read data/

    proc = step("02_sft", env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("[02_sft] no preset (W8_PRESET unset): rule split")
    assert proc.stdout.splitlines()[1] == (  # the first line of work
        f"[02_sft] data/sft/train.jsonl: {half} bytes, content changed since it was written (sha256 differs from "
        "data/fingerprint.json): rebuilding the cached training data from the run's knobs")
    assert "[02_sft] complete, skipped (sft stub)" in proc.stdout and "training data:" not in proc.stdout
    assert jsonl.read_bytes() == whole and data_problems(run_dir, "03_grpo") == []
    quiet = step("03_grpo", env)
    assert quiet.returncode == 0 and quiet.stdout.splitlines()[1:] == ["[03_grpo] complete, skipped (grpo stub)"]

    (run_dir / "data" / "train.parquet").unlink()
    assert data_problems(run_dir, "03_grpo") == ["data/train.parquet: missing"]


# ---- 4. the model is resolved with the knobs, before any step ---------------------------------------------
def tiny_hf_dir(path: Path) -> Path:
    """A local HF directory: config.json and a whole safetensors file (written by hand: no torch needed)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    return path


def test_the_early_model_check_agrees_with_resolve_model_for_each_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty HF cache: no id is cached
    local_dir = tiny_hf_dir(tmp_path / "policy")
    for backend in ("local", "skyrl"):
        check_model_name("smollm2-135m", backend)
        check_model_name(str(local_dir), backend)
        with pytest.raises(ModelError, match="neither 'smollm2-135m', a directory, nor an HF id"):
            check_model_name("does-not-exist", backend)
        with pytest.raises(ModelError, match="does not exist"):
            check_model_name(str(tmp_path / "absent"), backend)
    check_model_name("Qwen/Qwen2.5-Coder-0.5B", "skyrl")  # the node fetches it before step 01
    with pytest.raises(ModelError, match="not in the local HF cache"):
        check_model_name("Qwen/Qwen2.5-Coder-0.5B", "local")
    with pytest.raises(ConfigError, match=r"^W8_HARNESS_MODEL=does-not-exist: .*accepted on the local backend: "
                                          r"smollm2-135m \(embedded\)"):
        pipeline.check_model(load_config(env={"W8_HARNESS_MODEL": "does-not-exist"}))


def test_an_unknown_model_stops_the_run_in_seconds_with_one_line_exit_2_and_no_resume_hint(run_env):
    env, run_dir = run_env
    env = {**env, "W8_HARNESS_MODEL": "does-not-exist", "W8_RESULTS_ROOT": str(run_dir.parent.parent / "results"),
           "W8_PYTHON": sys.executable}
    started = time.monotonic()
    proc = subprocess.run(["bash", "scripts/run_r3.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert time.monotonic() - started < 5
    line = ("error: W8_HARNESS_MODEL=does-not-exist: model 'does-not-exist' is neither 'smollm2-135m', a directory, "
            "nor an HF id (org/name); accepted on the local backend: smollm2-135m (embedded), a local HF model "
            "directory with config.json, or an HF id (org/name) already in the local HF cache")
    assert proc.returncode == 2 and proc.stderr.splitlines() == [line] and proc.stdout == ""
    assert "resume" not in (proc.stdout + proc.stderr).lower() and not run_dir.exists()
    by_hand = step("01_frozen_trace", env)  # a step run by hand refuses it the same way
    assert by_hand.returncode == 2 and by_hand.stderr.splitlines() == [line] and not run_dir.exists()


# ---- 5. caches a step creates stay in the run folder ------------------------------------------------------
CACHE_STEP = r'''
import os, sys
sys.path.insert(0, {repo!r})
from harness.pipeline import StepResult, atomic_write_json, run_step

def body(cfg, run_dir, args):
    if os.environ.get("WITH_TORCH"):
        from torch._inductor.runtime.cache_dir_utils import cache_dir  # where torch.compile / inductor writes
        cache_dir()
    atomic_write_json(run_dir / "frozen_trace.json", {{k: os.environ.get(k) for k in
                                                      ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}})
    return StepResult(["frozen_trace.json"], "caches")

raise SystemExit(run_step("01_frozen_trace", "a step whose libraries write caches", body))
'''


def run_cache_step(env: dict, tmp_path: Path, **extra: str) -> dict:
    script = tmp_path / "cache_step.py"
    script.write_text(CACHE_STEP.format(repo=str(REPO)))
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, env={**env, **extra}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp_path / "runs" / "r27" / "frozen_trace.json").read_text())


def test_a_step_points_the_compile_caches_into_the_run_folder(run_env, tmp_path):
    env, run_dir = run_env
    seen = run_cache_step(env, tmp_path)
    assert seen == {"TORCHINDUCTOR_CACHE_DIR": str(run_dir / "cache" / "torchinductor"),
                    "TRITON_CACHE_DIR": str(run_dir / "cache" / "triton")}
    assert pipeline.use_run_caches(run_dir, env={"TORCHINDUCTOR_CACHE_DIR": "/mine"}) == run_dir / "cache"


@pytest.mark.slow
def test_torchs_inductor_cache_is_written_under_the_run_folder_not_tmpdir(run_env, tmp_path):
    env, run_dir = run_env
    run_cache_step(env, tmp_path, WITH_TORCH="1")
    assert list((tmp_path / "tmp").iterdir()) == []  # nothing named torchinductor_<user> left in TMPDIR
    assert (run_dir / "cache" / "torchinductor").is_dir()
