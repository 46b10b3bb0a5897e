"""A rehearsal, on this CPU machine, of the GPU node's two scripts under the variables SkyPilot sets on a node.

scripts/node_setup.sh --check-only (uv, checkout, venv, the lock check, check-checkout; no sync, no CUDA) and
scripts/run_r3.sh with W8_BACKEND=local as head and worker of 2 nodes: real Ray (head on 127.0.0.1:6479, the
worker joining as 127.0.0.2), the five steps swapped for tiny fake ones (W8_STEPS_DIR; the real steps on the
local backend are `make smoke`), results copied to a file:// W8_BUCKET after each step, and `make results`
bringing them home from the bucket. GCP is not reached: only its variables are set.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness import node_env, pipeline

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
PY312_DIR = str(Path(os.path.realpath(sys.executable)).parent)  # the interpreter behind .venv (uv venv finds it)

FAKE_STEP = r'''
import sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from harness.pipeline import StepResult, atomic_write_json, run_step

STEP = Path(__file__).stem
OUTPUT = STEP + ".json"

def body(cfg, run_dir, args):
    atomic_write_json(run_dir / OUTPUT, {{"step": STEP, "backend": cfg.backend}})
    return StepResult([OUTPUT], STEP + " ok (fake step)")

raise SystemExit(run_step(STEP, "fake " + STEP, body))
'''


def skypilot_env(rank: int, nodes: int, ips: list[str], gpus: int = 1) -> dict[str, str]:
    """What SkyPilot exports on node `rank` of a cluster (sky/skylet/constants.py names)."""
    return {"SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NUM_NODES": str(nodes), "SKYPILOT_NODE_IPS": "\n".join(ips),
            "SKYPILOT_NUM_GPUS_PER_NODE": str(gpus), "SKYPILOT_SETUP_NUM_GPUS_PER_NODE": str(gpus),
            "SKYPILOT_TASK_ID": "sky-rehearsal", "SKYPILOT_CLUSTER_INFO": "{}"}


# ---- node_setup.sh --check-only -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def skyrl_like_repo(tmp_path_factory):
    """A git repo shaped like SkyRL's (pyproject with an fsdp extra, uv.lock made by real `uv lock`, skyrl/__init__.py)
    at version 0.0.1, so check-checkout must refuse it: the real release cannot be cloned here (no GitHub)."""
    root = tmp_path_factory.mktemp("skyrl-src")
    (root / "skyrl").mkdir()
    (root / "skyrl" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (root / "pyproject.toml").write_text('[project]\nname = "skyrl"\nversion = "0.0.1"\nrequires-python = ">=3.12"\n'
                                         'dependencies = []\n[project.optional-dependencies]\n'
                                         'fsdp = ["pydantic==2.13.4", "urllib3==2.7.0"]\n')
    uv = node_env.find_uv()
    lock = subprocess.run([uv, "lock", "--no-config", "--python", sys.executable], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert lock.returncode == 0, lock.stderr
    git = ["git", "-c", "user.email=rehearsal@example.invalid", "-c", "user.name=rehearsal"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "skyrl-like"], ["tag", "skyrl-v0.0.1"]):
        subprocess.run(git + cmd, cwd=root, check=True, capture_output=True)
    return root


@pytest.mark.slow
def test_node_setup_check_only_runs_the_pins_the_lock_check_and_the_checkout_check(skyrl_like_repo, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_")}
    env.update(skypilot_env(0, 1, ["127.0.0.1"]))
    env.update({"HOME": str(tmp_path / "home"), "SKYRL_GIT_URL": str(skyrl_like_repo), "W8_SKYRL_REF": "skyrl-v0.0.1",
                "PATH": f"{Path(sys.executable).parent}:{PY312_DIR}:{os.environ['PATH']}",
                # here only: no CPython downloads, and no SkyRL index for the venv's seed packages (no network to them)
                "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1"})
    proc = subprocess.run(["bash", "scripts/node_setup.sh", "--check-only"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert [line.split(" ok (")[0] for line in lines if line.endswith("s)")] == [
        "node setup: uv 0.13.8", f"node setup: checkout skyrl-v0.0.1 ({lines[1].split('(')[1].split(')')[0]})",
        "node setup: venv", "node setup: lock"], proc.stdout + proc.stderr
    assert any(line.startswith("node setup: lock ok: requirements-node.txt (matplotlib 3.11.2, daytona 0.210.0) "
                               "fits the uv.lock of the checkout") for line in lines)
    # the checkout is not the validated release: named in one line, exit 1, before any sync
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"error: {tmp_path}/home/skyrl is skyrl 0.0.1, the validated release is {node_env.SKYRL_VERSION}")
    assert not (tmp_path / "home" / "skyrl" / ".venv" / "lib" / "python3.12" / "site-packages" / "pydantic").exists()


def test_node_setup_refuses_an_unknown_argument():
    proc = subprocess.run(["bash", "scripts/node_setup.sh", "--check"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip() == \
        "error: node setup: unknown argument '--check' (only --check-only)"


# ---- run_r3.sh, head and worker of 2 nodes ----------------------------------------------------------------
def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def machine_ip() -> str:
    """This machine's outward IP (as Ray resolves it: a UDP socket's source address, no packet sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        return s.getsockname()[0]


def stop_our_ray(ray_tmp: Path) -> None:
    """End the Ray processes this test started: those whose command line names its private temp dir, by PID."""
    found = subprocess.run(["pgrep", "-f", str(ray_tmp)], capture_output=True, text=True).stdout.split()
    for pid in found:
        try:
            os.kill(int(pid), signal.SIGTERM)
        except ProcessLookupError:
            pass
    time.sleep(2)
    for pid in subprocess.run(["pgrep", "-f", str(ray_tmp)], capture_output=True, text=True).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow
@pytest.mark.skipif(not port_free(6479), reason="port 6479 is taken on this machine")
def test_run_r3_as_head_and_worker_of_two_nodes_with_a_bucket(tmp_path):
    steps = tmp_path / "steps"
    steps.mkdir()
    for step in pipeline.STEPS:
        (steps / f"{step}.py").write_text(FAKE_STEP.format(repo=str(REPO)))
    ray_tmp = Path(tempfile.mkdtemp(prefix="w8ray", dir="/tmp"))  # short: Ray's socket paths must stay < 107 bytes
    bucket = f"file://{tmp_path}/bucket/r3"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("W8_", "SKYPILOT_", "RAY_")) and k != "VIRTUAL_ENV"}
    base.update({"W8_BACKEND": "local", "W8_STEPS_DIR": str(steps), "W8_PYTHON": PY, "W8_RUN_ID": "r3-rehearsal",
                 "W8_RUNS_ROOT": str(tmp_path / "runs"), "W8_RESULTS_ROOT": str(tmp_path / "results"),
                 "W8_BUCKET": bucket, "RAY_TMPDIR": str(ray_tmp), "W8_SANDBOX": "local"})
    # Ray maps 127.0.0.1 to the machine's IP: the head takes that, the worker another loopback address
    ips = [machine_ip(), "127.0.0.2"]
    head = subprocess.Popen(["bash", "scripts/run_r3.sh"], cwd=REPO, env={**base, **skypilot_env(0, 2, ips)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        worker = subprocess.run(["bash", "scripts/run_r3.sh"], cwd=REPO, env={**base, **skypilot_env(1, 2, ips)},
                                capture_output=True, text=True, timeout=420)
        head_out, head_err = head.communicate(timeout=420)
        again = subprocess.run(["bash", "scripts/run_r3.sh"], cwd=REPO, env={**base, **skypilot_env(1, 2, ips)},
                               capture_output=True, text=True, timeout=120)  # SkyPilot reruns `run` on a reused cluster
    finally:
        if head.poll() is None:
            head.kill()
        stop_our_ray(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert worker.returncode == 0, worker.stdout + worker.stderr
    assert worker.stdout.strip().splitlines()[-1] == f"node 1: joined the Ray cluster at {ips[0]}:6479 as 127.0.0.2"
    assert "Ray runtime started" in worker.stdout + worker.stderr  # it really started a raylet and joined
    assert again.returncode == 0 and "Ray runtime started" not in again.stdout + again.stderr  # already in: no restart
    assert head.returncode == 0, head_out + head_err
    assert f"node 0: the Ray cluster at {ips[0]}:6479 has all 2 nodes" in head_out
    for step in pipeline.STEPS:
        assert f"{step} ok (fake step)" in head_out + head_err
    assert head_out.count(f"bucket: 2 files -> {bucket}/runs/r3-rehearsal/") == len(pipeline.STEPS)
    remote = tmp_path / "bucket" / "r3" / "runs" / "r3-rehearsal"
    assert sorted(p.name for p in remote.iterdir()) == sorted(["run_config.json", *(f"{s}.json" for s in pipeline.STEPS)])
    # after --down: no run folder, no saved log; make results reads the bucket
    env = {**base, "W8_RUNS_ROOT": str(tmp_path / "gone"), "W8_LOGS_DIR": str(tmp_path / "no-logs")}
    home = subprocess.run([PY, "scripts/collect_results.py", "--run-id", "r3-rehearsal", "--out-root",
                           str(tmp_path / "home")], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert home.returncode == 0, home.stderr
    assert (tmp_path / "home" / "r3-rehearsal" / "05_compare.json").is_file()
