"""Results that survive --down: small artifacts to <W8_BUCKET>/runs/<run-id>/ and back (file:// buckets here;
gs:// needs GCP, unreachable from tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import bucket
from harness.bucket import BucketError

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable


def run_dir_with(tmp_path: Path, run_id: str = "r3-bucket-test") -> Path:
    run_dir = tmp_path / "runs" / run_id
    (run_dir / "steps").mkdir(parents=True)
    (run_dir / "run_config.json").write_text('{"knobs": {}}\n')
    (run_dir / "frozen_trace.json").write_text('{"nodes": []}\n')
    (run_dir / "sft").mkdir()
    (run_dir / "sft" / "global_step_1").mkdir()  # an export folder: never uploaded
    (run_dir / "steps" / "01_frozen_trace.json").write_text(json.dumps({"outputs": ["frozen_trace.json"]}))
    return run_dir


def clean_env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_")}
    return {**env, **extra}


def test_upload_then_download_round_trip_and_no_overwrite(tmp_path):
    run_dir = run_dir_with(tmp_path)
    url = f"file://{tmp_path}/bucket/r3"
    assert bucket.upload(run_dir, ["run_config.json", "frozen_trace.json", "absent.json"], url) == [
        "run_config.json", "frozen_trace.json"]
    assert (tmp_path / "bucket" / "r3" / "runs" / run_dir.name / "frozen_trace.json").read_text() == '{"nodes": []}\n'
    written = bucket.download(url, run_dir.name, tmp_path / "home" / run_dir.name)
    assert [p.name for p in written] == ["frozen_trace.json", "run_config.json"]
    (tmp_path / "home" / run_dir.name / "frozen_trace.json").write_text("{}")
    with pytest.raises(BucketError, match="already holds different frozen_trace.json: a finished run's results are "
                                          "never overwritten"):
        bucket.download(url, run_dir.name, tmp_path / "home" / run_dir.name)


@pytest.mark.parametrize("url, message", [
    ("s3://b/x", "s3://b/x/runs/r/: not a gs://bucket/prefix or file:// URL"),
    ("gs:///nobucket", "not a gs://bucket/prefix or file:// URL"),
])
def test_bad_bucket_urls_are_one_line(url, message, tmp_path):
    with pytest.raises(BucketError, match=message):
        bucket.download(url, "r", tmp_path)


def test_an_empty_bucket_prefix_is_named(tmp_path):
    with pytest.raises(BucketError, match=r"file://.*/runs/r3-none/ holds no files \(no step of r3-none finished"):
        bucket.download(f"file://{tmp_path}/empty", "r3-none", tmp_path / "home")


def test_upload_script_copies_a_steps_outputs_and_failure_tails(tmp_path):
    run_dir = run_dir_with(tmp_path)
    (run_dir / "failure").mkdir()
    (run_dir / "failure" / "failure-03_grpo.json").write_text('{"exit_code": 1}')
    (run_dir / "failure" / "failure-03_grpo-grpo-skyrl_grpo.log").write_text("Traceback ...\n")
    env = clean_env(W8_BUCKET=f"file://{tmp_path}/bucket")
    step = subprocess.run([PY, "scripts/upload_results.py", "--run-dir", str(run_dir), "01_frozen_trace"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert step.returncode == 0, step.stderr
    assert step.stdout.strip() == f"bucket: 2 files -> file://{tmp_path}/bucket/runs/{run_dir.name}/"
    failed = subprocess.run([PY, "scripts/upload_results.py", "--run-dir", str(run_dir), "--failure", "03_grpo"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 0 and failed.stdout.startswith("bucket: 2 files")
    remote = tmp_path / "bucket" / "runs" / run_dir.name
    assert sorted(str(p.relative_to(remote)) for p in remote.rglob("*") if p.is_file()) == [
        "failure/failure-03_grpo-grpo-skyrl_grpo.log", "failure/failure-03_grpo.json", "frozen_trace.json",
        "run_config.json"]  # never the export folder sft/
    nothing = subprocess.run([PY, "scripts/upload_results.py", "--run-dir", str(run_dir)], cwd=REPO, env=clean_env(),
                             capture_output=True, text=True, timeout=120)
    assert nothing.returncode == 0 and nothing.stdout == ""  # no W8_BUCKET: nothing to do


def test_upload_to_an_unwritable_bucket_is_one_line(tmp_path):
    run_dir = run_dir_with(tmp_path)
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    proc = subprocess.run([PY, "scripts/upload_results.py", "--run-dir", str(run_dir)], cwd=REPO,
                          env=clean_env(W8_BUCKET=f"file://{blocker}/r3"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith(f"error: cannot write file://{blocker}/r3/runs/")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_make_results_reads_the_bucket_when_the_run_folder_is_gone(tmp_path):
    """After --down: no run folder here, no log holds the run; the bucket does."""
    run_dir = run_dir_with(tmp_path)
    url = f"file://{tmp_path}/bucket"
    bucket.upload(run_dir, ["run_config.json", "frozen_trace.json"], url)
    env = clean_env(W8_BUCKET=url, W8_RUNS_ROOT=str(tmp_path / "no-runs"), W8_LOGS_DIR=str(tmp_path / "no-logs"))
    proc = subprocess.run([PY, "scripts/collect_results.py", "--run-id", run_dir.name, "--out-root",
                           str(tmp_path / "results")], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"2 files from {url}/runs/{run_dir.name}/ -> ")
    assert (tmp_path / "results" / run_dir.name / "frozen_trace.json").read_text() == '{"nodes": []}\n'


def test_collect_results_storage_error_is_one_line_naming_the_path(tmp_path):
    run_dir = run_dir_with(tmp_path)
    blocker = tmp_path / "results-is-a-file"
    blocker.write_text("x")
    proc = subprocess.run([PY, "scripts/collect_results.py", "--run-dir", str(run_dir), "--out-root", str(blocker)],
                          cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and str(blocker) in proc.stderr


def test_make_results_finds_the_bucket_the_launch_passed(tmp_path):
    """No W8_BUCKET in this shell: the saved launch log that names the run says which bucket it used."""
    run_dir = run_dir_with(tmp_path, "r3-from-log")
    url = f"file://{tmp_path}/bucket"
    bucket.upload(run_dir, ["run_config.json", "frozen_trace.json"], url)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "launch-gcp-20261204-040000.log").write_text(
        f"$ sky launch -c w8-biayn-r3 -y --down sky/r3.yaml --gpus A100:8 --env W8_BUCKET={url} --env W8_PRESET=gcp\n"
        "(task, pid=9) r3 run r3-from-log -> /home/gcpuser/sky_workdir/.w8-biayn/runs/r3-from-log\n"
        "Connection to 34.1.2.3 closed by remote host.\n")  # dropped before any W8_RESULT line
    env = clean_env(W8_RUNS_ROOT=str(tmp_path / "no-runs"), W8_LOGS_DIR=str(logs))
    proc = subprocess.run([PY, "scripts/collect_results.py", "--run-id", "r3-from-log", "--out-root",
                           str(tmp_path / "results")], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"2 files from {url}/runs/r3-from-log/ -> ")
