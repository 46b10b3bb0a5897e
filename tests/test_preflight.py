"""harness.preflight: the checks as tables of probe values, then the real probes on this machine.

Real parts: sandbox_info() here (namespaces hold, and a child whose seccomp filter takes them
away fails the check), the reference oracle scored through skyrl_gym in a real Ray task, and
the CLI on a machine without an NVIDIA driver.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness import preflight
from helpers import REWARD
from harness.sandbox import sandbox_info

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def ray_tmp(monkeypatch):
    """A short RAY_TMPDIR (Ray's socket paths must stay under 108 bytes), removed afterwards."""
    path = tempfile.mkdtemp(prefix="w8ray", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# ---- checks from probe values ----------------------------------------------------------------------------
@pytest.mark.parametrize("cuda, floor", [("13.0", 580), ("13.2", 580), ("12.9", 575), ("12.8", 570),
                                         ("12.4", 525), ("12.0", 525), ("11.8", 0), ("13", 580)])
def test_driver_floor(cuda, floor):
    assert preflight.driver_floor(cuda) == floor


@pytest.mark.parametrize("driver, torch_version, cuda, problem", [
    ("580.65.06", "2.13.0+cu130", "13.0", None),
    ("590.48.01", "2.13.0+cu130", "13.0", None),
    ("575.57.08", "2.13.0+cu130", "13.0", "NVIDIA driver 575.57.08 is older than 580"),
    ("550.90.07", "2.13.0+cu130", "13.0", "older than 580, which torch 2.13.0+cu130 (CUDA 13.0) needs"),
    ("570.26", "2.8.0+cu128", "12.8", None),
    ("565.57.01", "2.8.0+cu128", "12.8", "older than 570"),
    ("535.104.05", "2.5.1+cu124", "12.4", None),
    ("520.61.05", "2.5.1+cu121", "12.1", "older than 525"),
    (None, "2.13.0+cu130", "13.0", "nvidia-smi found no NVIDIA driver; fix"),
    ("No devices were found", "2.13.0+cu130", "13.0", "found no NVIDIA driver (it printed 'No devices were found')"),
    ("580.65.06", "2.13.0+cpu", None, "torch 2.13.0+cpu is a CPU build; fix: rerun `bash scripts/node_setup.sh`"),
])
def test_check_driver(driver, torch_version, cuda, problem):
    found, detail = preflight.check_driver(driver, torch_version, cuda)
    if problem is None:
        assert found == "" and f"driver {driver}" in detail
        return
    assert problem in found and "\n" not in found and detail == ""
    if cuda is not None:  # an old or missing driver: the fix is another image
        assert f"W8_IMAGE_ID=<a GCP image whose NVIDIA driver is >= {preflight.driver_floor(cuda)}" in found
        assert "sky launch --image-id" in found


@pytest.mark.parametrize("available, count, wanted, problem", [
    (False, 0, 8, "torch sees no CUDA device"),
    (True, 4, 8, "torch sees 4 GPU(s), SkyPilot allotted 8 (SKYPILOT_SETUP_NUM_GPUS_PER_NODE)"),
    (True, 8, 8, None),
    (True, 1, 1, None),
])
def test_check_gpus(available, count, wanted, problem):
    found, detail = preflight.check_gpus(available, count, wanted, "SKYPILOT_SETUP_NUM_GPUS_PER_NODE")
    assert (found == "" and f"{count} GPU(s) visible" in detail) if problem is None else problem in found


@pytest.mark.parametrize("env, wanted, source, problem", [
    ({"SKYPILOT_SETUP_NUM_GPUS_PER_NODE": "8"}, 8, "SKYPILOT_SETUP_NUM_GPUS_PER_NODE", ""),  # setup: (the preflight's phase)
    ({"SKYPILOT_NUM_GPUS_PER_NODE": "4"}, 4, "SKYPILOT_NUM_GPUS_PER_NODE", ""),  # run:
    ({"SKYPILOT_SETUP_NUM_GPUS_PER_NODE": "8", "SKYPILOT_NUM_GPUS_PER_NODE": "1"}, 8,
     "SKYPILOT_SETUP_NUM_GPUS_PER_NODE", ""),
    ({"SKYPILOT_SETUP_NUM_GPUS_PER_NODE": "", "SKYPILOT_NUM_GPUS_PER_NODE": "2"}, 2, "SKYPILOT_NUM_GPUS_PER_NODE", ""),
    ({}, None, "", "neither SKYPILOT_SETUP_NUM_GPUS_PER_NODE nor SKYPILOT_NUM_GPUS_PER_NODE is set"),
    ({"SKYPILOT_SETUP_NUM_GPUS_PER_NODE": "eight"}, None, "SKYPILOT_SETUP_NUM_GPUS_PER_NODE",
     "SKYPILOT_SETUP_NUM_GPUS_PER_NODE='eight' is not a GPU count"),
])
def test_wanted_gpus_reads_the_setup_variable_first(env, wanted, source, problem):
    found_problem, found_wanted, found_source = preflight.wanted_gpus(env)
    assert (found_wanted, found_source) == (wanted, source)
    assert found_problem.startswith(problem) if problem else found_problem == ""


@pytest.mark.parametrize("env, problem", [
    # the defect: in setup: only the SETUP variable is set, and the old check skipped the comparison
    ({"SKYPILOT_SETUP_NUM_GPUS_PER_NODE": "8"}, "torch sees 4 GPU(s), SkyPilot allotted 8"),
    ({}, "neither SKYPILOT_SETUP_NUM_GPUS_PER_NODE nor SKYPILOT_NUM_GPUS_PER_NODE is set"),
    ({"SKYPILOT_SETUP_NUM_GPUS_PER_NODE": "4"}, ""),
])
def test_the_gpu_check_compares_the_count_in_setup(monkeypatch, env, problem):
    """The probes of a 4-GPU node with a good driver (there is no GPU here); the check under setup's variables."""
    monkeypatch.setattr(preflight, "probe_torch", lambda: {"version": "2.13.0", "cuda": "13.0", "available": True,
                                                           "count": 4})
    monkeypatch.setattr(preflight, "probe_driver", lambda: "580.65.06")
    for name in preflight.GPU_COUNT_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    checks = dict(preflight.gpu_checks())
    assert checks["driver"]()[0] == ""
    found, _ = checks["gpus"]()
    assert found.startswith(problem) if problem else found == ""


@pytest.mark.parametrize("found, problem", [
    ({"vllm": "0.30.0", "flash_attn": "2.8.3", "flashinfer": "0.6.18.post1"}, None),
    ({"vllm": "0.30.0", "flash_attn": "error: ImportError: libcudart.so.13: cannot open", "flashinfer": "0.6.18"},
     "cannot import flash_attn (ImportError: libcudart.so.13: cannot open); fix: rerun `bash scripts/node_setup.sh`"),
])
def test_check_gpu_libraries(found, problem):
    got, detail = preflight.check_gpu_libraries(found)
    if problem is None:
        assert got == "" and detail == "vllm 0.30.0, flash_attn 2.8.3, flashinfer 0.6.18.post1"
    else:
        assert got.startswith(problem)


def test_probe_gpu_libraries_reports_versions_and_import_errors():
    found = preflight.probe_gpu_libraries(("json", "w8_no_such_module"))
    assert found["json"] == __import__("json").__version__
    assert found["w8_no_such_module"].startswith("error: ModuleNotFoundError: No module named 'w8_no_such_module'")


@pytest.mark.parametrize("info, problem", [
    ({"backend": "daytona", "sandbox": "sb-1", "network_block_all": True, "python": "3.12.3", "slots": 1}, None),
    ({"backend": "daytona", "closed": True}, "the Daytona sandbox is not running with a confirmed network block"),
    ({"backend": "local", "namespaces": True, "filesystem": "pivot_root", "seccomp": True, "workers": 2}, None),
    ({"backend": "local", "namespaces": False, "filesystem": "shared", "reason": "namespaces unavailable: EPERM"},
     "the local sandbox has no namespaces (namespaces unavailable: EPERM)"),
])
def test_check_sandbox(info, problem):
    found, _ = preflight.check_sandbox(info)
    if problem is None:
        assert found == ""
    elif info["backend"] == "daytona":
        assert found.startswith(problem)
    else:
        assert problem in found and "W8_SANDBOX=daytona with DAYTONA_API_KEY" in found and "run as root" in found


@pytest.mark.parametrize("metrics, problem", [
    ({"balanced_accuracy": 1.0}, None),
    ({"balanced_accuracy": 0.9}, None),
    ({"balanced_accuracy": 0.875, "reason": ""}, "balanced accuracy 0.875 < 0.9"),
    ({"balanced_accuracy": 0.0, "reason": "sandbox error: worker died", "sandbox_failed": 1.0},
     "(sandbox error: worker died; sandbox failed: True)"),
    ({"balanced_accuracy": 0.0, "reason": "Ray task failed: RayTaskError: ModuleNotFoundError"}, "Ray task failed"),
])
def test_check_reward(metrics, problem):
    found, _ = preflight.check_reward(metrics, REWARD.gold_threshold)
    assert found == "" if problem is None else problem in found


def test_run_checks_stops_at_the_first_failure(capsys):
    ran = []

    def check(name, problem):
        return name, lambda: (ran.append(name), (problem, "fine"))[1]

    def broken():
        raise RuntimeError("probe exploded\nsecond line")

    assert preflight.run_checks([check("a", ""), check("b", "b is wrong; fix: x"), check("c", "")]) == 1
    assert ran == ["a", "b"]
    assert capsys.readouterr().out.splitlines()[-1] == "error: preflight b: b is wrong; fix: x"
    assert preflight.run_checks([check("a", ""), ("boom", broken)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "error: preflight boom: RuntimeError: probe exploded"
    assert preflight.run_checks([check("a", ""), check("c", "")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "preflight: 2/2 checks ok"


# ---- real probes on this machine --------------------------------------------------------------------------
def test_the_sandbox_check_passes_here():
    """This machine (root, Linux) has the namespaces; tests/test_sandbox.py expects them too."""
    info = sandbox_info()
    problem, detail = preflight.check_sandbox(info)
    assert problem == "" and detail.startswith("local backend, namespaces, filesystem pivot_root"), info


NO_NAMESPACES = r'''
import sys
sys.path.insert(0, sys.argv[1])
from harness import sandbox_runner
libc = __import__("ctypes").CDLL(None)
libc.prctl(38, 1, 0, 0, 0)  # no_new_privs, so an unprivileged filter may be installed
sandbox_runner._install_seccomp()  # this process and its zygotes: no unshare, so no namespaces
from harness.preflight import main
sys.exit(main(["--skip-gpu"]))
'''


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="uses the x86_64 seccomp filter to take namespaces away")
def test_preflight_fails_on_the_sandbox_when_namespaces_are_taken_away(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(NO_NAMESPACES)
    env = {**os.environ, "W8_SANDBOX": "local"}
    env.pop("DAYTONA_API_KEY", None)
    proc = subprocess.run([sys.executable, str(probe), str(REPO)], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("error: preflight sandbox: the local sandbox has no namespaces")
    assert "W8_SANDBOX=daytona" in last and "reward" not in proc.stdout  # stopped before the Ray check


@pytest.mark.slow
def test_the_oracle_scores_gold_in_a_ray_task_that_finds_harness_by_pythonpath(ray_tmp, tmp_path, monkeypatch):
    """Ray started by the caller: the probe uses it and leaves it running. The driver's cwd is elsewhere,
    so the worker imports harness only through the runtime_env's PYTHONPATH."""
    import ray

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        metrics = preflight.probe_reward_in_ray(REPO, REWARD)
        assert ray.is_initialized()  # not ours to shut down
    finally:
        ray.shutdown()
    assert preflight.check_reward(metrics, REWARD.gold_threshold)[0] == ""
    assert metrics["balanced_accuracy"] == 1.0 and metrics["valid"] == 1.0 and metrics["sandbox_failed"] == 0.0


def run_preflight(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "W8_SANDBOX": "local"}
    env.pop("DAYTONA_API_KEY", None)
    env.pop("SKYPILOT_NUM_GPUS_PER_NODE", None)
    env.pop("SKYPILOT_SETUP_NUM_GPUS_PER_NODE", None)
    return subprocess.run([sys.executable, "-m", "harness.preflight", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.mark.slow
def test_preflight_skip_gpu_passes_here_and_stops_the_ray_it_started(ray_tmp, tmp_path):
    proc = run_preflight(["--skip-gpu"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("preflight: sandbox ok: local backend, namespaces")
    assert lines[1].startswith("preflight: reward ok: reference oracle balanced accuracy 1.000 >= 0.9 in a Ray task")
    assert lines[-1] == "preflight: 2/2 checks ok"
    leftover = subprocess.run(["pgrep", "-f", f"{ray_tmp}"], capture_output=True, text=True).stdout.split()
    assert leftover == []  # the local Ray the preflight started is gone


def test_preflight_without_a_gpu_fails_first_in_one_line_naming_the_fix(tmp_path):
    """This machine has no NVIDIA driver: the GPU checks stop the preflight before the sandbox and Ray."""
    proc = run_preflight([], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    out = proc.stdout.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(("error: preflight driver: ", "error: preflight gpus: "))
    assert "; fix: " in out[0]
