"""A paid GPU launch: no port opened to the internet, teardown on failure or Ctrl-C (fake `sky`: GCP is
unreachable here), the cost said on the last line, autodown armed while the user's machine may go away."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness import cloud
from harness.config import KNOBS, load_config

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SKY_PY = REPO / ".venv-sky" / "bin" / "python"
needs_sky_env = pytest.mark.skipif(not SKY_PY.exists(), reason="make sky-env builds .venv-sky")
sys.path.insert(0, str(REPO / "scripts"))

import dry_run  # noqa: E402


# ---- no public ports ---------------------------------------------------------------------------------
def test_r3_yaml_declares_no_ports_anywhere():
    config = yaml.safe_load((REPO / "sky" / "r3.yaml").read_text())

    def ports(node):
        if isinstance(node, dict):
            return [v for k, v in node.items() if k == "ports"] + [p for v in node.values() for p in ports(v)]
        if isinstance(node, list):
            return [p for v in node for p in ports(v)]
        return []
    assert ports(config) == []


@pytest.mark.slow
@needs_sky_env
def test_a_port_in_the_yaml_is_refused_by_the_dry_run_and_the_real_yaml_renders_none(tmp_path, monkeypatch):
    """SkyPilot's own parser renders the launch; any port it would open fails the dry-run in one line."""
    config = yaml.safe_load((REPO / "sky" / "r3.yaml").read_text())
    config["resources"]["ports"] = 6479  # what sky/r3.yaml had: Ray's head port, open to 0.0.0.0/0 on GCP
    with_port = tmp_path / "r3-with-port.yaml"
    with_port.write_text(yaml.safe_dump(config))
    for knob in KNOBS:
        monkeypatch.delenv(knob.env, raising=False)
    cfg = load_config(env={"W8_PRESET": "gcp"})

    [real] = cloud.render_tasks([cloud.scenario_of(cloud.launch_command({"W8_PRESET": "gcp"}, cfg.as_dict()))])
    assert cloud.open_ports(real) == []
    [opened] = cloud.render_tasks([{}], with_port)
    assert cloud.open_ports(opened) == ["6479"]
    with pytest.raises(dry_run.CheckError, match=r"^r3-with-port.yaml opens port\(s\) 6479 to the internet: remove"):
        dry_run.check_yaml(cfg, tmp_path, with_port)


# ---- teardown you can trust (a fake `sky` on PATH: GCP is unreachable here) -------------------------
# SkyPilot's optimizer table as `sky launch` prints it (prettytable, no vertical rules), chosen row marked.
OPTIMIZER_TABLE = """Considered resources (1 node):
------------------------------------------------------------------------------------------
 INFRA                 INSTANCE        vCPUs   Mem(GB)   GPUS   COST ($)   CHOSEN
------------------------------------------------------------------------------------------
 GCP (us-central1-a)   g2-standard-16  16      64        L4:1   \x1b[1m1.15\x1b[0m       \x1b[1m✔\x1b[0m
------------------------------------------------------------------------------------------"""

FAKE_SKY = r'''#!/usr/bin/env python3
# Fake `sky` (GCP is unreachable from tests): a cluster that comes UP, then a set-up that fails (or hangs).
import json, os, sys, time
state, record = os.environ["FAKE_SKY_STATE"], os.environ["FAKE_SKY_RECORD"]
with open(record, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
cmd = sys.argv[1]
if cmd == "launch":
    print("fake sky: SKYPILOT_PROJECT_CONFIG=" + os.environ.get("SKYPILOT_PROJECT_CONFIG", ""), flush=True)
    print(open(os.environ["FAKE_SKY_TABLE"]).read(), flush=True)
    open(state, "w").write("UP")
    print("✓ Cluster launched: w8-biayn-r3.  View logs: sky logs --provision w8-biayn-r3", flush=True)
    for _ in range(100):  # the launcher arms autodown while set-up runs
        if '"autostop"' in open(record).read():
            break
        time.sleep(0.05)
    print("⚙︎ Running setup on 1 node.", flush=True)
    if os.environ.get("FAKE_SKY_HANG"):
        print("(setup pid=1) node setup: sync ...", flush=True)
        time.sleep(600)
    print("(setup pid=1) error: node setup: uv sync --extra fsdp failed", flush=True)
    print("sky.exceptions.CommandError: Failed to run setup command on head node.", flush=True)
    sys.exit(int(os.environ.get("FAKE_SKY_EXIT", "1")))
if cmd == "status":
    up = os.path.exists(state) and open(state).read()
    print(("NAME         INFRA              RESOURCES                       STATUS  AUTOSTOP  LAUNCHED\n"
           "w8-biayn-r3  GCP (us-central1)  1x(gpus=L4:1, g2-standard-16)  " + up + "      -         1 min ago")
          if up else "No existing clusters.")
elif cmd == "down":
    if not os.environ.get("FAKE_SKY_DOWN_FAILS"):
        os.remove(state)
        print("Terminating cluster " + sys.argv[-1] + "...done.")
    else:
        print("sky.exceptions.ClusterOwnerIdentityMismatchError: cannot tear down", file=sys.stderr)
        sys.exit(1)
'''


@pytest.fixture
def fake_sky_cluster(tmp_path):
    """A fake `sky` first on PATH that brings a cluster UP and fails its set-up; returns (env, calls())."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sky = bin_dir / "sky"
    sky.write_text(FAKE_SKY)
    sky.chmod(sky.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "table.txt").write_text(OPTIMIZER_TABLE)
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "project_id": "demo-project", "private_key": "x",
                               "client_email": "runner@demo-project.iam.gserviceaccount.com",
                               "token_uri": "https://oauth2.googleapis.com/token"}))
    record = tmp_path / "sky_calls.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_") and k not in ("DAYTONA_API_KEY",)}
    env.update({"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SKY_RECORD": str(record),
                "FAKE_SKY_STATE": str(tmp_path / "state"), "FAKE_SKY_TABLE": str(tmp_path / "table.txt"),
                "W8_GCP_KEY_FILE": str(key), "W8_PRESET": "gpu-smoke", "W8_LOGS_DIR": str(tmp_path / "logs")})

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return env, calls


def test_failed_setup_fake_sky_tears_the_cluster_down_and_says_so(fake_sky_cluster):
    """The defect: SkyPilot's --down is armed only after set-up succeeds, so a failed set-up left the VM up."""
    env, calls = fake_sky_cluster
    proc = subprocess.run([PY, "scripts/launch.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    argvs = calls()
    assert argvs[0][:6] == ["launch", "-c", "w8-biayn-r3", "-y", "--down", "sky/r3.yaml"]
    assert ["autostop", "w8-biayn-r3", "-i", str(cloud.AUTODOWN_IDLE_MINUTES), "--down", "-y"] in argvs
    assert argvs.index(["down", "-y", "w8-biayn-r3"]) > argvs.index(["status", "w8-biayn-r3"])
    assert argvs[-1] == ["status", "w8-biayn-r3"]  # teardown confirmed
    out = proc.stdout + proc.stderr
    assert "launch: autodown armed on w8-biayn-r3" in out
    assert "launch: w8-biayn-r3 is UP; tearing it down: sky down -y w8-biayn-r3" in out
    last = proc.stdout.strip().splitlines()[-1]
    assert last == "cluster w8-biayn-r3: not running (sky down -y w8-biayn-r3 exited 0; sky status no longer lists it)"
    [log] = (Path(env["W8_LOGS_DIR"])).glob("launch-gpu-smoke-*.log")
    assert "uv sync --extra fsdp failed" in log.read_text() and last in log.read_text()
    assert "warning: W8_BUCKET is not set" in proc.stderr  # said before the launch


def test_keep_cluster_fake_sky_leaves_it_up_and_names_the_cost(fake_sky_cluster):
    env, calls = fake_sky_cluster
    env["W8_KEEP_CLUSTER"] = "1"
    proc = subprocess.run([PY, "scripts/launch.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert not any(argv[0] == "down" for argv in calls())
    assert not any("W8_KEEP_CLUSTER" in arg for arg in calls()[0])  # a launcher knob: not sent to the node
    assert proc.stderr.strip().splitlines()[-1] == (
        "cluster w8-biayn-r3: STILL UP, billing about $1.15/hour (SkyPilot's estimate for the chosen nodes) until "
        "`make down` (w8-biayn-r3 is UP and kept (W8_KEEP_CLUSTER=1))")


def test_a_teardown_that_fails_fake_sky_says_the_cluster_is_still_up(fake_sky_cluster):
    env, calls = fake_sky_cluster
    env["FAKE_SKY_DOWN_FAILS"] = "1"
    proc = subprocess.run([PY, "scripts/launch.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "cluster w8-biayn-r3: STILL UP, billing about $1.15/hour (SkyPilot's estimate for the chosen nodes) until "
        "`make down` (sky down -y w8-biayn-r3 exited 1; sky status lists it as UP)")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_during_setup_fake_sky_tears_the_cluster_down(fake_sky_cluster, signum):
    env, calls = fake_sky_cluster
    env["FAKE_SKY_HANG"] = "1"
    # A shell without job control starts background jobs with SIGINT ignored, and an ignored signal is
    # inherited: give the launcher a terminal's default, as a user's Ctrl-C finds it.
    proc = subprocess.Popen([PY, "scripts/launch.py"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not any(argv[0] == "autostop" for argv in calls()) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # set-up is now "running"
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, out + err
    assert "launch: interrupted; stopping sky launch, then checking the cluster" in err
    assert ["down", "-y", "w8-biayn-r3"] in calls()
    assert out.strip().splitlines()[-1].startswith("cluster w8-biayn-r3: not running (sky down -y w8-biayn-r3 exited 0")


def test_sky_output_readers():
    assert cloud.chosen_cost_per_hour(OPTIMIZER_TABLE.splitlines()) == 1.15
    assert cloud.chosen_cost_per_hour(["sky.exceptions.ResourcesUnavailableError: no L4 in us-central1"]) is None
    listing = ("NAME         INFRA  RESOURCES  STATUS  AUTOSTOP  LAUNCHED\n"
               "w8-biayn-r3  GCP    1x(L4:1)   \x1b[1mINIT\x1b[0m    -         now\nother  GCP  x  UP  -  now")
    assert cloud.cluster_state(listing) == "INIT"
    assert cloud.cluster_state(listing, "other") == "UP"
    assert cloud.cluster_state("No existing clusters.") is None


# ---- host memory of a skyrl node ----------------------------------------------------------------------
@pytest.mark.parametrize("backend, memory, problem", [
    ("skyrl", "64+", ""), ("skyrl", "128", ""), ("local", "", ""),
    ("skyrl", "", "W8_MEMORY is not set: SkyPilot may pick a node with too little host RAM"),
    ("skyrl", "16+", "W8_MEMORY=16+: under the 64 GB a skyrl node needs"),
])
def test_host_memory_rule(backend, memory, problem):
    found = cloud.check_host_memory(backend, memory)
    assert found.startswith(problem) if problem else found == ""


def test_the_gpu_smoke_preset_asks_for_enough_host_memory_and_reports_a_model_without_valid_programs():
    cfg = load_config(env={"W8_PRESET": "gpu-smoke"})
    assert cloud.check_host_memory(cfg.backend, cfg.memory) == "" and cfg.memory == "64+"
    assert cfg.guard_no_valid == "report"
    cmd = cloud.launch_command({"W8_PRESET": "gpu-smoke"}, cfg.as_dict())
    assert cmd[cmd.index("--memory") + 1] == "64+"


def test_launch_fake_sky_refuses_too_little_host_memory_before_sky(fake_sky_cluster):
    env, calls = fake_sky_cluster
    env["W8_MEMORY"] = "16+"
    proc = subprocess.run([PY, "scripts/launch.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: W8_MEMORY=16+: under the 64 GB")
    assert len(proc.stderr.strip().splitlines()) == 1 and calls() == []


@needs_sky_env
def test_the_memory_floor_reaches_skypilots_resources():
    cfg = load_config(env={"W8_PRESET": "gpu-smoke"})
    [task] = cloud.render_tasks([cloud.scenario_of(cloud.launch_command({"W8_PRESET": "gpu-smoke"}, cfg.as_dict()))])
    assert task["memory"] == ["64+"] and task["accelerators"] == [{"L4": 1}]


# ---- IAP mode ------------------------------------------------------------------------------------------
def test_iap_launch_fake_sky_hands_sky_skypilots_gcp_keys_in_a_private_config(fake_sky_cluster):
    env, calls = fake_sky_cluster
    env.update({"W8_GCP_IAP": "1", "W8_GCP_VPC": "w8-iap"})
    proc = subprocess.run([PY, "scripts/launch.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    path = next(line.split("=", 1)[1] for line in proc.stdout.splitlines()
                if line.startswith("fake sky: SKYPILOT_PROJECT_CONFIG="))
    config = json.loads(Path(path).read_text())["gcp"]
    assert config["vpc_name"] == "w8-iap" and config["use_internal_ips"] is True
    assert "start-iap-tunnel" in (REPO / "scripts" / "iap_proxy.sh").read_text()
    assert config["ssh_proxy_command"].endswith("scripts/iap_proxy.sh %h %p")
    assert f"CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE={Path(env['W8_GCP_KEY_FILE']).resolve()}" in config["ssh_proxy_command"]
    assert "private_key" not in Path(path).read_text()  # the key's path, never its content
    assert not any(arg.startswith("W8_GCP_") for arg in calls()[0])  # launcher knobs stay here
    assert "note: IAP mode: VPC w8-iap, internal IPs, SSH through IAP" in proc.stdout


def test_iap_needs_a_vpc_in_one_line(fake_sky_cluster):
    env, calls = fake_sky_cluster
    env["W8_GCP_IAP"] = "1"
    proc = subprocess.run([PY, "scripts/launch.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: W8_GCP_IAP=1 needs W8_GCP_VPC=<network>: the VPC whose firewall admits tcp:22 from IAP's "
        "35.235.240.0/20 only (docs/gpu-launch.md)") and calls() == []
