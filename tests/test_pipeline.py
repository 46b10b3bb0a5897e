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

import pyarrow.parquet as pq
import pytest

from harness import pipeline, run_folder
from harness.config import KNOBS, load_config
from harness.exports import newest_export
from harness.markers import MarkerError
from harness.pipeline import RunError
from harness.traces import search_specs
from harness.training_data import training_data_for

REPO = Path(__file__).resolve().parent.parent


def cfg_with(**env):
    return load_config(env={k: str(v) for k, v in env.items()})


# ---- run id and run_config.json ----------------------------------------------------------------
def test_run_id_is_derived_from_pipeline_model_seed_and_time():
    cfg = cfg_with(W8_HARNESS_MODEL="Qwen/Qwen2.5-Coder-1.5B-Instruct", W8_TRACE_TASK_SEED=11)
    assert run_folder.derive_run_id(cfg, now=0) == "r3-qwen2.5-coder-1.5b-instruct-s11-19700101-000000"
    assert pipeline.resolve_run_id(cfg_with(W8_RUN_ID="mine")) == "mine"
    assert run_folder.model_slug("/tmp/runs/x/grpo/global_step_4/policy/") == "policy"


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


def parquet_task_ids(path: Path) -> list[str]:
    return [info["task_id"] for info in pq.read_table(path).column("extra_info").to_pylist()]


def test_run_config_lists_the_task_ids_the_steps_use(tmp_path):
    cfg = cfg_with(W8_PRESET="smoke", W8_RUN_ID="tasks", W8_TRAIN_COUNT=3, W8_SFT_COUNT=2, W8_HARVEST_TASKS=2,
                   W8_TRACE_SEEDS=2)
    run_dir = pipeline.open_run(cfg, root=tmp_path)
    tasks = json.loads((run_dir / "run_config.json").read_text())["tasks"]
    # against what the steps read: the training files of steps 02/03, the searches of steps 01/04 (the harvest's
    # own task ids are checked against this list in tests/test_harvest.py)
    data = training_data_for(cfg, run_dir / "data")
    sft_rows = [json.loads(line) for line in (data.sft_dir / "train.jsonl").read_text().splitlines()]
    assert tasks["grpo"] == parquet_task_ids(data.train_parquet) and len(tasks["grpo"]) == 3
    assert tasks["sft"] == [row["task_id"] for row in sft_rows] == tasks["grpo"][:2]
    assert tasks["eval"] == parquet_task_ids(data.eval_parquet)
    specs = search_specs(cfg, run_dir, "frozen")
    assert tasks["trace"] == list(dict.fromkeys(s.task.task_id for s in specs)) and len(tasks["trace"]) == 2
    assert tasks["trace_seeds"] == sorted({s.knobs.seed for s in specs}) and len(tasks["trace_seeds"]) == 2
    assert len(tasks["harvest"]) == 2 and not set(tasks["harvest"]) & set(tasks["grpo"])
    assert cfg.split == "rule"  # the smoke preset's: every id names the rule split
    assert all(t.startswith("rule/heldout/") for t in tasks["trace"] + tasks["eval"])
    assert all(t.startswith("rule/train/") for t in tasks["grpo"] + tasks["sft"] + tasks["harvest"])
    bare = json.loads((pipeline.open_run(cfg_with(W8_RUN_ID="bare", W8_TRAIN_COUNT=2), root=tmp_path)
                       / "run_config.json").read_text())["tasks"]
    assert bare["sft"] == [] and bare["harvest"] == [] and len(bare["grpo"]) == 2  # no SFT, no harvesting arm


# ---- markers, atomic writes, exports -----------------------------------------------------------
def test_a_step_is_done_only_with_its_marker_and_every_output(tmp_path):
    assert not pipeline.step_is_done(tmp_path, "01_frozen_trace")
    pipeline.atomic_write_json(tmp_path / "frozen_trace.json", {"traces": []})
    with pytest.raises(MarkerError, match="claims outputs that do not exist: extra.json"):
        pipeline.mark_done(tmp_path, "01_frozen_trace", ["frozen_trace.json", "extra.json"], "s", 1.0)
    assert not pipeline.step_is_done(tmp_path, "01_frozen_trace")
    pipeline.mark_done(tmp_path, "01_frozen_trace", ["frozen_trace.json"], "s", 1.0)
    assert pipeline.step_is_done(tmp_path, "01_frozen_trace")
    (tmp_path / "frozen_trace.json").unlink()  # an output lost later: the step is redone
    assert not pipeline.step_is_done(tmp_path, "01_frozen_trace")
    assert pipeline.first_pending_step(tmp_path) == "01_frozen_trace"
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []
    with pytest.raises(MarkerError, match="unknown step"):
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
from harness.config import ConfigError
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
    if STEP == "01_frozen_trace" and os.environ.get("FAKE_EDIT_SCRIPT"):  # a `git pull` during the run
        Path(os.environ["FAKE_EDIT_SCRIPT"]).write_text("echo edited; exit 9\n((( not bash\n")
    if STEP == os.environ.get("FAKE_KNOB_ERROR_AT"):
        raise ConfigError("W8_TRAIN_COUNT=1: too few for this step (a knob the step finds wrong)")
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
    first = run_r3({**env, "FAKE_CRASH_AT": "03_grpo", "W8_EMIT_RESULTS": "1"})
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


# ---- damaged outputs, concurrent runs, storage, the resume hint (issue 20) -----------------------
@pytest.mark.slow  # over 5 s on 2 cores: runs in make test-slow
def test_a_truncated_trace_is_named_redone_and_never_published(fake_pipeline):
    env, tmp = fake_pipeline
    assert run_r3(env).returncode == 0
    run_dir = tmp / "runs" / "r3-fake"
    trace = run_dir / "frozen_trace.json"
    whole = trace.read_bytes()
    trace.write_bytes(whole[: len(whole) // 2])  # a disk that lost the end of the file
    again = run_r3(env)
    assert again.returncode == 0, again.stderr
    assert (f"[01_frozen_trace] frozen_trace.json: {len(whole) // 2} bytes, the marker says {len(whole)} "
            "(truncated or overwritten): redoing the step") in again.stdout
    assert step_calls(tmp).count("01_frozen_trace") == 2 and step_calls(tmp).count("02_sft") == 1
    assert trace.read_bytes() == whole  # redone the same way: the steps after it are not rerun
    assert (tmp / "results" / "r3-fake" / "frozen_trace.json").read_bytes() == whole
    assert "complete, skipped" in again.stdout and "W8_RESULT {" not in again.stdout  # not asked for off a node


def test_a_redone_step_with_new_outputs_drops_the_markers_of_the_steps_that_used_them(tmp_path):
    for step, name in (("02_sft", "sft_metrics.json"), ("03_grpo", "grpo_metrics.json"),
                       ("04_trained_trace", "trained_trace.json"), ("01_frozen_trace", "frozen_trace.json")):
        pipeline.atomic_write_json(tmp_path / name, {"v": 1})
        pipeline.mark_done(tmp_path, step, [name], "s", 1.0)
    pipeline.atomic_write_json(tmp_path / "sft_metrics.json", {"v": 2})  # step 02 redone, other output
    marker = pipeline.mark_done(tmp_path, "02_sft", ["sft_metrics.json"], "s", 1.0)
    assert marker["dropped"] == ["03_grpo", "04_trained_trace"]
    assert pipeline.step_is_done(tmp_path, "01_frozen_trace") and not pipeline.step_is_done(tmp_path, "03_grpo")


@pytest.mark.slow  # over 5 s on 2 cores: runs in make test-slow
def test_a_second_process_on_a_locked_run_exits_at_once_naming_it(fake_pipeline):
    env, tmp = fake_pipeline
    run_dir = tmp / "runs" / "r3-fake"
    run_dir.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]); "
                               "from harness.run_lock import lock_run; lock_run(sys.argv[2]); print('held', flush=True); "
                               "time.sleep(120)", str(REPO), str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        second = run_r3(env)
        assert second.returncode == pipeline.EXIT_LOCKED
        [error] = [line for line in second.stderr.splitlines() if line.startswith("error")]
        assert error.startswith(f"error: run r3-fake is in use by pid {holder.pid} ({sys.executable} -c import sys")
        assert "wait for it to finish" in second.stderr and "start another W8_RUN_ID" in second.stderr
        assert step_calls(tmp) == []
        alone = subprocess.run([sys.executable, "scripts/01_frozen_trace.py"], cwd=REPO, env=env, capture_output=True,
                               text=True, timeout=60)  # a step script run by hand takes the lock itself
        assert alone.returncode == pipeline.EXIT_LOCKED and f"pid {holder.pid}" in alone.stderr
    finally:
        holder.kill()
        holder.wait()
    assert run_r3(env).returncode == 0  # its process gone, the lock is free: taken over (the .lock file stays)
    assert (run_dir / ".lock").read_text().split()[0] != str(holder.pid)


def test_a_stale_lock_file_of_a_dead_process_is_taken_over(fake_pipeline):
    env, tmp = fake_pipeline
    run_dir = tmp / "runs" / "r3-fake"
    run_dir.mkdir(parents=True)
    (run_dir / ".lock").write_text("999999999 2026-01-01T00:00:00Z\n")
    proc = run_r3(env)
    assert proc.returncode == 0, proc.stderr
    assert len(step_calls(tmp)) == 5


def test_a_read_only_results_root_is_found_before_step_01(fake_pipeline, unwritable_dir):
    env, tmp = fake_pipeline
    root = unwritable_dir
    proc = run_r3({**env, "W8_RESULTS_ROOT": str(root)})
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {root}: ") and ("permission" in line or "not permitted" in line or "read-only" in line)
    assert "Traceback" not in proc.stderr and step_calls(tmp) == []


@pytest.mark.slow  # over 5 s on 2 cores: runs in make test-slow
def test_the_printed_resume_hint_resumes_as_printed(fake_pipeline):
    env, tmp = fake_pipeline
    env = {**env, "W8_PRESET": "smoke", "W8_RESULTS_ROOT": str(tmp / "smoke-results")}
    first = run_r3({**env, "FAKE_CRASH_AT": "03_grpo"})
    assert first.returncode == 137
    hint = first.stderr.split("Resume: ", 1)[1].strip()
    assert "W8_PRESET=smoke" in hint and f"W8_RESULTS_ROOT={tmp / 'smoke-results'}" in hint
    bare = {k: v for k, v in env.items() if not k.startswith("W8_")}  # a new shell: only what the hint says
    second = subprocess.run(["bash", "-c", hint], cwd=REPO, env=bare, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert step_calls(tmp) == ["01_frozen_trace", "02_sft", "03_grpo", "03_grpo", "04_trained_trace", "05_compare"]
    assert (tmp / "smoke-results" / "r3-fake" / "trace_compare.json").is_file()
    assert "over 2 invocation(s)" in second.stdout  # the wall time of both invocations


def test_a_knob_bound_failure_says_start_a_new_run_id_with_the_command(fake_pipeline):
    env, tmp = fake_pipeline
    proc = run_r3({**env, "FAKE_KNOB_ERROR_AT": "02_sft"})
    assert proc.returncode == 2
    assert "error: [02_sft] W8_TRAIN_COUNT=1: too few for this step" in proc.stderr
    assert "start a new run id: " in proc.stderr and "W8_RUN_ID=r3-fake-2 bash scripts/run_r3.sh" in proc.stderr
    assert "Resume:" not in proc.stderr


def test_each_step_ends_with_one_line_and_its_peak_rss(fake_pipeline):
    env, tmp = fake_pipeline
    proc = run_r3(env)
    assert proc.returncode == 0, proc.stderr
    marker = json.loads((tmp / "runs" / "r3-fake" / "steps" / "01_frozen_trace.json").read_text())
    assert marker["peak_rss_mb"] > 10 and marker["files"]["frozen_trace.json"]["bytes"] > 0
    line = next(l for l in proc.stdout.splitlines() if l.startswith("[01_frozen_trace] done"))
    assert "peak RSS" in line and line.endswith("r3-fake/{frozen_trace.json}")
    assert "W8_RESULT {" not in proc.stdout


def test_make_smoke_run_id_is_w8_run_id_and_a_clash_is_refused():
    # Under `make test` the parent make's MAKELEVEL/MAKEFLAGS would add "make[1]: Entering directory" lines.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("W8_", "MAKE", "MFLAGS"))}
    dry = subprocess.run(["make", "-n", "--no-print-directory", "smoke", "RUN_ID=abc"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    check = next(line for line in dry.stdout.splitlines() if "name different runs" in line)
    assert 'export W8_RUN_ID="${W8_RUN_ID:-abc}"' in check
    # Only the RUN_ID check, never the run itself: a wrong line here must fail fast, not start a smoke run.
    check = check.split('export W8_RUN_ID=')[0] + "true"
    clash = subprocess.run(["bash", "-c", check], cwd=REPO, env={**env, "W8_RUN_ID": "other"},
                           capture_output=True, text=True, timeout=60)
    assert clash.returncode == 2 and "RUN_ID=abc and W8_RUN_ID=other name different runs" in clash.stderr


def test_on_a_node_each_artifact_is_one_w8_result_line_per_invocation(fake_pipeline):
    env, tmp = fake_pipeline
    proc = run_r3({**env, "SKYPILOT_NODE_RANK": "0"})
    assert proc.returncode == 0, proc.stderr
    files = [json.loads(l.split("W8_RESULT ", 1)[1])["file"] for l in proc.stdout.splitlines() if "W8_RESULT {" in l]
    assert sorted(files) == sorted(["run_config.json", "frozen_trace.json", "sft_metrics.json", "grpo_metrics.json",
                                    "trained_trace.json", "trace_compare.json"])


def test_editing_run_r3_during_a_run_does_not_change_the_running_instance(fake_pipeline):
    env, tmp = fake_pipeline
    copy = tmp / "checkout"
    (copy / "scripts").mkdir(parents=True)
    script = copy / "scripts" / "run_r3.sh"
    script.write_text((REPO / "scripts" / "run_r3.sh").read_text())
    (copy / "harness").symlink_to(REPO / "harness")
    for name in ("collect_results.py", "upload_results.py"):
        (copy / "scripts" / name).symlink_to(REPO / "scripts" / name)
    proc = subprocess.run(["bash", str(script)], cwd=copy, env={**env, "FAKE_EDIT_SCRIPT": str(script)},
                          capture_output=True, text=True, timeout=120)
    assert script.read_text().startswith("echo edited")  # the file did change under the run
    assert proc.returncode == 0, proc.stderr
    assert "edited" not in proc.stdout and len(step_calls(tmp)) == 5


def test_a_killed_invocation_counts_up_to_its_last_saved_step(tmp_path):
    from harness.markers import end_invocation, start_invocation

    (tmp_path / "steps").mkdir()
    start_invocation(tmp_path, now=1000.0)  # killed: its end is never recorded
    marker = tmp_path / "steps" / "01_frozen_trace.json"
    marker.write_text("{}")
    os.utime(marker, (1100.0, 1100.0))  # its last step finished 100 s in
    start_invocation(tmp_path, now=2000.0)
    assert end_invocation(tmp_path, 0, now=2060.0) == \
        "2 min 40 s over 2 invocation(s), 1 killed and counted to its last saved step"
    assert json.loads((tmp_path / "invocations.json").read_text())[-1]["wall_s"] == 60.0
