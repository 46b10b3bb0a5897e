"""GCP/SkyPilot plumbing: key checks, scoped env, sky commands (fake `sky`: GCP is unreachable here),
W8_RESULT round trip, and sky/r3.yaml through SkyPilot's real parser (in .venv-sky)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cloud, records
from harness.cloud import CloudError
from harness.config import KNOBS, load_config

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SKY_PY = REPO / ".venv-sky" / "bin" / "python"
needs_sky_env = pytest.mark.skipif(not SKY_PY.exists(), reason="make sky-env builds .venv-sky")


def write_key(path: Path, **changes) -> Path:
    key = {"type": "service_account", "project_id": "demo-project", "private_key_id": "k1",
           "private_key": "-----BEGIN PRIVATE KEY-----\nnot-a-real-key\n-----END PRIVATE KEY-----\n",
           "client_email": "runner@demo-project.iam.gserviceaccount.com", "client_id": "1",
           "token_uri": "https://oauth2.googleapis.com/token"}
    key.update(changes)
    path.write_text(json.dumps({k: v for k, v in key.items() if v is not None}))
    return path


FAKE_SKY = r"""#!/usr/bin/env python3
# Fake `sky` (GCP is unreachable from tests): records argv and the GCP env it was given.
import json, os, sys
with open(os.environ["FAKE_SKY_RECORD"], "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": {k: os.environ.get(k) for k in (
        "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE", "CLOUDSDK_CORE_PROJECT",
        "CLOUDSDK_CONFIG", "DAYTONA_API_KEY")}}) + "\n")
cmd = sys.argv[1] if len(sys.argv) > 1 else ""
if cmd == "--version":
    print("skypilot, version fake")
elif cmd == "status":
    print(open(os.environ["FAKE_SKY_STATUS"]).read() if os.environ.get("FAKE_SKY_STATUS") else "No existing clusters.")
elif cmd == "logs" or (cmd == "launch" and os.environ.get("FAKE_SKY_LOG")):
    sys.stdout.write(open(os.environ["FAKE_SKY_LOG"]).read())
elif cmd == "down":
    print("Terminating cluster " + sys.argv[-1] + "...done.")
sys.exit(int(os.environ.get("FAKE_SKY_EXIT", "0")))
"""


@pytest.fixture
def fake_sky(tmp_path):
    """A fake `sky` first on PATH, a throwaway key, and a private HOME; returns (env, record path)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sky = bin_dir / "sky"
    sky.write_text(FAKE_SKY)
    sky.chmod(sky.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "sky_calls.jsonl"
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SKY_RECORD": str(record),
           "W8_GCP_KEY_FILE": str(write_key(tmp_path / "key.json")), "HOME": str(home)}
    for name in [k.env for k in KNOBS] + ["DAYTONA_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS",
                                          "CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE", "CLOUDSDK_CORE_PROJECT"]:
        env.pop(name, None)
    return env, record


def calls(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def run(args, env, **kw):
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, **kw)


# ---- service-account key -----------------------------------------------------------------------
@pytest.mark.parametrize("content, expected", [
    (None, "missing"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ({"project_id": None}, "lacks project_id"),
    ({"private_key": None, "client_email": None}, "lacks private_key, client_email"),
    ({"type": "authorized_user"}, "expected 'service_account'"),
])
def test_bad_service_account_key_is_one_clear_error(tmp_path, content, expected):
    path = tmp_path / "key.json"
    if isinstance(content, dict):
        write_key(path, **content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(CloudError, match=expected) as err:
        cloud.load_service_account(path)
    assert "not-a-real-key" not in str(err.value)


def test_scoped_env_adds_gcp_vars_to_a_copy_only(tmp_path, monkeypatch):
    key = write_key(tmp_path / "key.json")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv("CLOUDSDK_CORE_PROJECT", raising=False)
    before = dict(os.environ)
    base = {"PATH": "/usr/bin", "HOME": str(tmp_path)}
    env = cloud.scoped_env(base, key, gcloud_config_dir=tmp_path / "gcloud")
    assert env["GOOGLE_APPLICATION_CREDENTIALS"] == str(key.resolve())
    assert env["CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE"] == str(key.resolve())
    assert env["CLOUDSDK_CORE_PROJECT"] == "demo-project"
    assert env["CLOUDSDK_CONFIG"] == str((tmp_path / "gcloud").resolve())
    assert base == {"PATH": "/usr/bin", "HOME": str(tmp_path)}
    assert dict(os.environ) == before


def test_sky_missing_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cloud, "SKY_VENV", tmp_path / "no-venv")
    with pytest.raises(CloudError, match="sky is not installed: run `make sky-env`"):
        cloud.sky_executable({"PATH": str(tmp_path)})


# ---- sky commands, with a fake sky -------------------------------------------------------------
def test_launch_command_passes_knobs_as_env_resources_from_the_resolved_knobs_and_secrets_by_name():
    env = {"W8_PRESET": "gcp", "W8_TRAIN_COUNT": "1024", "W8_RUN_ID": "", "DAYTONA_API_KEY": "s3cr3t-value",
           "WANDB_API_KEY": "w4ndb-value", "UNRELATED": "x"}
    resolved = load_config(env=env).as_dict()
    cmd = cloud.launch_command(env, resolved)
    assert cmd[:7] == ["sky", "launch", "-c", "w8-biayn-r3", "-y", "--down", "sky/r3.yaml"]
    assert cmd[cmd.index("--gpus") + 1] == "A100:8"  # from presets/gcp.env
    assert cmd[cmd.index("--num-nodes") + 1] == "1" and "--image-id" not in cmd
    envs = [cmd[i + 1] for i, part in enumerate(cmd) if part == "--env"]
    assert envs == ["W8_TRAIN_COUNT=1024", "W8_PRESET=gcp"]  # what the user set; the node applies the preset
    assert cmd[-4:] == ["--secret", "DAYTONA_API_KEY", "--secret", "WANDB_API_KEY"]
    assert not any("s3cr3t" in part or "w4ndb" in part for part in cmd)
    assert "--secret" not in cloud.launch_command({"DAYTONA_API_KEY": ""})
    several = cloud.launch_command({}, {**resolved, "num_nodes": 4, "image_id": "projects/p/global/images/x"})
    assert several[several.index("--num-nodes") + 1] == "4"
    assert several[several.index("--image-id") + 1] == "projects/p/global/images/x"


def test_launch_log_is_kept_and_results_collected_fake_sky(fake_sky, tmp_path):
    """A fake sky whose launch prints a W8_RESULT line: the whole output lands in the launch log and
    --collect writes the record; a failing launch keeps its log too."""
    env, record = fake_sky
    run_dir = make_run_dir(tmp_path / "runs")
    line = records.result_line(run_dir.name, run_dir / "summary.md")
    (tmp_path / "launch.log").write_text("(setup pid=1) node setup: uv ok\n(task, pid=2) " + line + "\n")
    env.update({"FAKE_SKY_LOG": str(tmp_path / "launch.log"), "W8_PRESET": "gpu-smoke",
                "W8_RESULTS_ROOT": str(tmp_path / "results"), "W8_LOGS_DIR": str(tmp_path / "logs")})
    proc = run([PY, "scripts/launch.py", "--collect"], env)
    assert proc.returncode == 0, proc.stderr
    logs = sorted((tmp_path / "logs").glob("launch-gpu-smoke-*.log"))
    assert logs and "node setup: uv ok" in logs[-1].read_text() and "W8_RESULT" in logs[-1].read_text()
    assert (tmp_path / "results" / run_dir.name / "summary.md").read_text().startswith("# r3")
    call, *after = calls(record)
    assert [c["argv"] for c in after] == [["status", "w8-biayn-r3"]]  # the last line says whether it is still up
    assert call["argv"][call["argv"].index("--gpus") + 1] == "L4:1"
    env["FAKE_SKY_EXIT"] = "3"
    failed = run([PY, "scripts/launch.py"], env)
    assert failed.returncode == 3 and "the whole output is in" in failed.stderr
    kept = "".join(p.read_text() for p in (tmp_path / "logs").glob("launch-gpu-smoke-*.log"))
    assert "error: sky launch exited 3" in kept  # the failed launch kept its output


def test_launch_fake_sky_gets_scoped_env_and_no_global_gcloud_config(fake_sky):
    env, record = fake_sky
    env.update({"W8_PRESET": "gcp", "W8_TRACE_MAX_ITERATIONS": "8", "DAYTONA_API_KEY": "s3cr3t-value"})
    proc = run([PY, "scripts/launch.py"], env)
    assert proc.returncode == 0, proc.stderr
    assert "s3cr3t" not in proc.stdout + proc.stderr
    call = calls(record)[0]
    assert call["argv"][:6] == ["launch", "-c", "w8-biayn-r3", "-y", "--down", "sky/r3.yaml"]
    assert "W8_TRACE_MAX_ITERATIONS=8" in call["argv"] and call["argv"][-2:] == ["--secret", "DAYTONA_API_KEY"]
    assert call["cwd"] == str(REPO)
    key = str(Path(env["W8_GCP_KEY_FILE"]).resolve())
    assert call["env"]["GOOGLE_APPLICATION_CREDENTIALS"] == key == call["env"]["CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE"]
    assert call["env"]["CLOUDSDK_CORE_PROJECT"] == "demo-project"
    assert call["env"]["CLOUDSDK_CONFIG"] == str(cloud.GCLOUD_CONFIG_DIR)
    assert call["env"]["DAYTONA_API_KEY"] == "s3cr3t-value"  # sky reads it by name from its env
    assert not (Path(env["HOME"]) / ".config" / "gcloud").exists()


def test_launch_fake_sky_bad_knob_stops_before_sky(fake_sky):
    env, record = fake_sky
    env["W8_HARNESS_GOLD_THRESHOLD"] = "1.5"
    proc = run([PY, "scripts/launch.py"], env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: W8_HARNESS_GOLD_THRESHOLD='1.5': expected a number in (0, 1]"
    assert calls(record) == []


def test_launch_fake_sky_missing_key_is_one_line(fake_sky, tmp_path):
    env, record = fake_sky
    env["W8_GCP_KEY_FILE"] = str(tmp_path / "absent.json")
    env["W8_PRESET"] = "gcp"
    proc = run([PY, "scripts/launch.py"], env)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: missing absent.json") and "Traceback" not in proc.stderr
    assert calls(record) == []


@pytest.mark.parametrize("extra, message", [
    ({"W8_PRESET": "gcp", "W8_SANDBOX": "daytona"}, "error: W8_SANDBOX=daytona but DAYTONA_API_KEY is not set"),
    ({}, "error: W8_BACKEND=local: a GCP launch trains with skyrl"),
    ({"W8_PRESET": "gcp", "W8_NUM_NODES": "2"}, "error: W8_NUM_NODES=2 needs W8_BUCKET="),
])
def test_launch_fake_sky_refuses_before_money_is_spent(fake_sky, extra, message):
    env, record = fake_sky
    env.update(extra)
    proc = run([PY, "scripts/launch.py"], env)
    assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and calls(record) == []


@pytest.mark.parametrize("listing, code", [("No existing clusters.", 0),
                                            ("NAME         LAUNCHED  STATUS\nw8-biayn-r3  1 hr ago  UP", 1)])
def test_down_fake_sky_confirms_with_status(fake_sky, tmp_path, listing, code):
    env, record = fake_sky
    (tmp_path / "status.txt").write_text(listing)
    env["FAKE_SKY_STATUS"] = str(tmp_path / "status.txt")
    proc = run([PY, "scripts/down.py"], env)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert [c["argv"][:2] for c in calls(record)] == [["down", "-y"], ["status", "w8-biayn-r3"]]


def test_doctor_fake_sky_missing_key_says_so(fake_sky, tmp_path):
    env, record = fake_sky
    env["W8_GCP_KEY_FILE"] = str(tmp_path / "absent.json")
    proc = run([PY, "scripts/doctor.py"], env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "FAIL service account  missing absent.json" in proc.stdout
    assert "sky check gcp    skipped: no usable key" in proc.stdout
    assert "DAYTONA_API_KEY not set: the sandbox falls back to local processes" in proc.stdout
    assert not any(c["argv"][:1] == ["check"] for c in calls(record))


@needs_sky_env
@pytest.mark.slow
def test_doctor_fake_sky_no_network_is_reported(fake_sky, tmp_path):
    """A real key signed by google-auth, sent to a closed local port: what doctor says offline."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    env, record = fake_sky
    write_key(Path(env["W8_GCP_KEY_FILE"]), private_key=pem, token_uri="http://127.0.0.1:9/token")
    env["DAYTONA_API_KEY"] = "s3cr3t-value"
    proc = run([PY, "scripts/doctor.py"], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ok   service account  runner@demo-project.iam.gserviceaccount.com" in proc.stdout
    assert "FAIL token            no network" in proc.stdout
    assert "skipped: no network to Google" in proc.stdout
    assert "daytona          DAYTONA_API_KEY is set" in proc.stdout
    assert "s3cr3t" not in proc.stdout and "PRIVATE KEY" not in proc.stdout
    assert not (Path(env["HOME"]) / ".config" / "gcloud").exists()


# ---- W8_RESULT round trip ----------------------------------------------------------------------
def make_run_dir(root: Path, run_id: str = "r3-test-s7-20260101-000000") -> Path:
    from harness.pipeline import mark_done

    run_dir = root / run_id
    (run_dir / "steps").mkdir(parents=True)
    (run_dir / "run_config.json").write_text(json.dumps({"run_id": run_id, "knobs": {}}))
    (run_dir / "frozen_trace.json").write_text(json.dumps({"traces": [{"steps_to_first_gold": 5}]}, indent=1))
    (run_dir / "trace_compare.json").write_text(json.dumps({"shrunk": True, "comparisons": [
        {"a": "trained", "b": "frozen", "mean_a": 2.0, "mean_b": 5.0, "n_pairs": 6, "ci95": [-4.0, -2.0]}]}))
    (run_dir / "trace.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (run_dir / "summary.md").write_text("# r3\n\nshrunk: yes — 5 -> 2\n")
    mark_done(run_dir, "01_frozen_trace", ["frozen_trace.json"], "k", 1.0)
    mark_done(run_dir, "05_compare", ["trace_compare.json", "trace.png", "summary.md"], "k", 1.0)
    return run_dir


def test_w8_result_round_trip_from_a_sky_log_to_results(tmp_path):
    run_dir = make_run_dir(tmp_path / "runs")
    emitted = run([PY, "-m", "harness.pipeline", "emit", str(run_dir)], dict(os.environ)).stdout.splitlines()
    assert len(emitted) == 5 and all(line.startswith("W8_RESULT {") for line in emitted)
    log = tmp_path / "sky.log"
    noise = ["(setup pid=88) installing...", "(task, pid=1234) steps_to_gold frozen node 0 ..."]
    log.write_text("\n".join(noise + [f"(task, pid=1234) {line}" for line in emitted]) + "\n")
    out_root = tmp_path / "results"
    proc = run([PY, "scripts/collect_results.py", "--log", str(log), "--out-root", str(out_root)], dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    for name in ("run_config.json", "frozen_trace.json", "trace_compare.json", "trace.png", "summary.md"):
        assert (out_root / run_dir.name / name).read_bytes() == (run_dir / name).read_bytes(), name
    # a second collection of the same records is fine; different content is never written over
    assert run([PY, "scripts/collect_results.py", "--log", str(log), "--out-root", str(out_root)],
               dict(os.environ)).returncode == 0
    (out_root / run_dir.name / "summary.md").write_text("edited by hand\n")
    proc = run([PY, "scripts/collect_results.py", "--log", str(log), "--out-root", str(out_root)], dict(os.environ))
    assert proc.returncode == 1 and "never overwritten" in proc.stderr
    assert (out_root / run_dir.name / "summary.md").read_text() == "edited by hand\n"


def test_damaged_w8_result_is_refused(tmp_path):
    run_dir = make_run_dir(tmp_path / "runs")
    line = records.result_line(run_dir.name, run_dir / "summary.md")
    record = json.loads(line[len("W8_RESULT "):])
    record["text"] = record["text"].replace("yes", "no")
    with pytest.raises(records.RecordError, match="damaged"):
        records.write_results({"summary.md": record}, tmp_path / "out")
    assert not (tmp_path / "out" / "summary.md").exists()


def test_result_records_pick_the_asked_run_and_strip_paths():
    lines = [
        'W8_RESULT {"run_id": "a", "file": "../../etc/x.json", "text": "1", "sha256": "s"}',
        'junk W8_RESULT {"run_id": "b", "file": "summary.md", "text": "2", "sha256": "s"}',
        'W8_RESULT {"run_id": "a", "file": "summary.md", "te',  # cut by the transport
    ]
    assert records.runs_in(lines) == ["a", "b"]
    assert sorted(records.parse_result_lines(lines, run_id="a")) == ["x.json"]
    assert records.parse_result_lines(lines, run_id="b")["summary.md"]["text"] == "2"


def test_watch_fake_sky_streams_steps_and_parses_the_result(fake_sky, tmp_path):
    env, record = fake_sky
    run_dir = make_run_dir(tmp_path / "runs", "r3-watch-test")
    emitted = run([PY, "-m", "harness.pipeline", "emit", str(run_dir)], dict(os.environ)).stdout
    log = tmp_path / "remote.log"
    log.write_text("(task, pid=7) == 01_frozen_trace\n(task, pid=7) vllm warming up\n"
                   "(task, pid=7) steps_to_gold frozen node   0 parent   - reward 0.600 ba 0.500 gold no\n" + emitted)
    env["FAKE_SKY_LOG"] = str(log)
    cluster = f"w8-test-{os.getpid()}"
    try:
        proc = run([PY, "scripts/watch.py", "--cluster", cluster, "--no-follow"], env)
        saved = (REPO / ".w8-biayn" / "logs" / f"{cluster}.log").read_text()
    finally:
        (REPO / ".w8-biayn" / "logs" / f"{cluster}.log").unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stderr
    assert "steps_to_gold frozen node   0" in proc.stdout and "vllm warming up" not in proc.stdout
    assert "result: trace_compare.json" in proc.stdout
    assert ("run r3-watch-test: steps_to_gold frozen 5.00 -> trained 2.00 over 6 paired searches (95% CI of the "
            "difference [-4.00, -2.00]), shrunk yes") in proc.stdout
    assert "vllm warming up" in saved
    assert [c["argv"] for c in calls(record)] == [["status", cluster], ["logs", cluster, "--no-follow"]]


# ---- sky/r3.yaml through SkyPilot's own parser -------------------------------------------------
def test_yaml_through_skypilots_parser_with_the_launch_command_defaults_and_a_bad_gpu_string():
    # one process for the scenarios: importing sky costs seconds
    env = {"W8_PRESET": "gcp", "W8_TRAIN_COUNT": "64", "W8_RUN_ID": "r3-x", "DAYTONA_API_KEY": "v"}
    cmd = cloud.launch_command(env, {**load_config(env=env).as_dict(), "accelerators": "H100:4", "num_nodes": 2,
                                     "image_id": "projects/deeplearning-platform-release/global/images/x"})
    overridden, default, bad_gpu = cloud.render_tasks([cloud.scenario_of(cmd), {}, {"gpus": "A100:abc"}])
    assert overridden["name"] == "w8-biayn-r3" and overridden["cloud"] == ["GCP"]
    assert overridden["accelerators"] == [{"H100": 4}] and overridden["disk_size"][0] >= 256
    assert overridden["num_nodes"] == 2 and overridden["image_id"][0] is not None
    assert overridden["envs"]["W8_TRAIN_COUNT"] == "64" and overridden["envs"]["W8_RUN_ID"] == "r3-x"
    assert overridden["secret_names"] == ["DAYTONA_API_KEY", "WANDB_API_KEY"]
    # the YAML is thin: it names the preset; the knobs live in presets/gcp.env and harness/config.py
    assert default["accelerators"] == [{"A100": 8}] and default["num_nodes"] == 1
    assert default["envs"] == {"W8_PRESET": "gcp"}
    assert load_config(env=default["envs"]).backend == "skyrl"
    assert "bash scripts/run_r3.sh" in default["run"] and "bash scripts/node_setup.sh" in default["setup"]
    assert "set -x" not in default["run"] + default["setup"]
    assert bad_gpu["error"].startswith("ValueError:") and "A100:abc" in bad_gpu["error"]
