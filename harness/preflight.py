"""Preflight of the GPU node: fail in minutes, not an hour into a run, with one line naming the fix.

    ~/skyrl/.venv/bin/python -m harness.preflight              # scripts/node_setup.sh's last stage
    .venv/bin/python -m harness.preflight --skip-gpu           # sandbox and reward only (CPU machines, tests)

Checks, in order; the first failure prints `error: preflight <check>: <problem>; fix: <fix>`
and exits 1, success ends with `preflight: k/k checks ok`:
  driver   the NVIDIA driver is new enough for the CUDA torch was built for
  gpus     torch sees CUDA and at least the GPUs SkyPilot allotted: $SKYPILOT_SETUP_NUM_GPUS_PER_NODE
           (what `setup:` sees), else $SKYPILOT_NUM_GPUS_PER_NODE (what `run:` sees); neither set on
           a skyrl node is an error, not a skip
  gpu libs vllm, flash_attn and flashinfer import (their versions are printed)
  sandbox  the local sandbox backend has its namespaces (or Daytona is the backend)
  reward   the reference oracle, scored through the env registered in skyrl_gym inside a Ray
           task (the path SkyRL's generator takes), is gold on a train task

Each check is a small function of its probe values (tests feed them tables); the probes
that touch the machine are separate. The reward check connects to a running Ray cluster if
`ray start` made one (ray.init's own lookup) and starts a local one otherwise, which it
shuts down again; one this process did not start is left alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from harness.config import load_config
from harness.dataset import make_task
from harness.env import register_env
from harness.oracle import oracle_source
from harness.rewards import RewardKnobs
from harness.sandbox import sandbox_info
from harness.training_data import skyrl_row
from harness.files import REPO_ROOT


# Minimum NVIDIA driver (major) per CUDA version torch was built for, newest first. Source: NVIDIA's CUDA
# Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions" (13.0 GA >= 580.65.06, 12.9 GA
# >= 575.51.03, 12.8 GA >= 570.26) and minor-version compatibility for the rest of 12.x (>= 525.60.13).
# SkyRL 0.4.0's torch 2.13.0 comes from the cu130 index, so the node needs r580+.
DRIVER_FLOOR = (((13, 0), 580), ((12, 9), 575), ((12, 8), 570), ((12, 0), 525))
GPU_LIBRARIES = ("vllm", "flash_attn", "flashinfer")
IMAGE_FIX = ("relaunch with W8_IMAGE_ID=<a GCP image whose NVIDIA driver is >= {floor}, e.g. a Deep Learning VM "
             "image with CUDA 13> (make launch passes it to `sky launch --image-id`)")
REINSTALL_FIX = "rerun `bash scripts/node_setup.sh` (uv sync --extra fsdp in ~/skyrl installs SkyRL's CUDA builds)"
REWARD_TASK = ("train", 0, 24)  # split, seed, examples_per_obs of the task the oracle is scored on


# ---- checks: probe values in, ("" or "problem; fix: ...", detail) out ---------------------------------
def driver_floor(torch_cuda: str) -> int:
    """The minimum driver major for a CUDA version string such as '13.0' (0 if it is older than the table)."""
    major, minor = (int(part) for part in (torch_cuda.split(".") + ["0"])[:2])
    return next((floor for version, floor in DRIVER_FLOOR if (major, minor) >= version), 0)


def check_driver(driver_version: str | None, torch_version: str, torch_cuda: str | None) -> tuple[str, str]:
    if torch_cuda is None:
        return f"torch {torch_version} is a CPU build; fix: {REINSTALL_FIX}", ""
    floor = driver_floor(torch_cuda)
    if not driver_version or not driver_version.split(".")[0].isdigit():
        seen = f" (it printed {driver_version!r})" if driver_version else ""
        return f"nvidia-smi found no NVIDIA driver{seen}; fix: {IMAGE_FIX.format(floor=floor)}", ""
    if int(driver_version.split(".")[0]) < floor:
        return (f"NVIDIA driver {driver_version} is older than {floor}, which torch {torch_version} "
                f"(CUDA {torch_cuda}) needs; fix: {IMAGE_FIX.format(floor=floor)}"), ""
    return "", f"driver {driver_version} >= {floor} for CUDA {torch_cuda} (torch {torch_version})"


# SkyPilot names the allotted GPU count differently per phase: SKYPILOT_SETUP_NUM_GPUS_PER_NODE in `setup:`
# (where node_setup.sh runs this preflight), SKYPILOT_NUM_GPUS_PER_NODE in `run:` (SkyPilot's
# docs/source/running-jobs/environment-variables.rst). Read in this order.
GPU_COUNT_VARS = ("SKYPILOT_SETUP_NUM_GPUS_PER_NODE", "SKYPILOT_NUM_GPUS_PER_NODE")


def wanted_gpus(env: dict[str, str] | os._Environ) -> tuple[str, int | None, str]:
    """(problem or "", the GPU count SkyPilot allotted, the variable it came from) from the first set of GPU_COUNT_VARS."""
    for name in GPU_COUNT_VARS:
        value = (env.get(name) or "").strip()
        if value:
            if not value.isdigit():
                return f"{name}={value!r} is not a GPU count", None, name
            return "", int(value), name
    return (f"neither {' nor '.join(GPU_COUNT_VARS)} is set, so the GPU count cannot be compared; fix: run the "
            "preflight from sky/r3.yaml's setup or run (SkyPilot sets them), or export one by hand"), None, ""


def check_gpus(cuda_available: bool, device_count: int, wanted: int, source: str) -> tuple[str, str]:
    if not cuda_available:
        return ("torch sees no CUDA device; fix: launch on a GPU instance (W8_ACCELERATORS) with a driver "
                "nvidia-smi can see"), ""
    if device_count < wanted:
        return (f"torch sees {device_count} GPU(s), SkyPilot allotted {wanted} ({source}); "
                "fix: check nvidia-smi and CUDA_VISIBLE_DEVICES on the node"), ""
    return "", f"{device_count} GPU(s) visible, {wanted} allotted ({source})"


def check_gpu_libraries(found: dict[str, str]) -> tuple[str, str]:
    """found: module -> version, or 'error: <why>' where the import failed."""
    broken = [f"{name} ({version.removeprefix('error: ')})" for name, version in found.items()
              if version.startswith("error:")]
    if broken:
        return f"cannot import {'; '.join(broken)}; fix: {REINSTALL_FIX}", ""
    return "", ", ".join(f"{name} {version}" for name, version in found.items())


def check_sandbox(info: dict[str, Any]) -> tuple[str, str]:
    if info.get("backend") == "daytona":
        if info.get("network_block_all") is not True:  # sandbox_info() only reports a sandbox that passed its checks
            return "the Daytona sandbox is not running with a confirmed network block (closed or never started)", ""
        return "", (f"daytona sandbox {info.get('sandbox')}: network block confirmed by the service and the probe, "
                    f"Python {info.get('python')}, {info.get('slots')} slot(s) ({info.get('cpu')} CPU, "
                    f"{info.get('memory_gib')} GiB)")
    if not info.get("namespaces"):
        return (f"the local sandbox has no namespaces ({info.get('reason') or 'not isolated'}): model code could "
                "read the repo and reach the network; fix: run as root, or allow unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1 / kernel.apparmor_restrict_unprivileged_userns=0), "
                "or set W8_SANDBOX=daytona with DAYTONA_API_KEY"), ""
    return "", (f"local backend, namespaces, filesystem {info.get('filesystem')}, seccomp {info.get('seccomp')}, "
                f"{info.get('workers')} worker(s)")


def check_reward(metrics: dict[str, Any], floor: float) -> tuple[str, str]:
    accuracy = float(metrics.get("balanced_accuracy", 0.0))
    if accuracy < floor:
        return (f"the reference oracle scored balanced accuracy {accuracy:.3f} < {floor} through the env in a Ray "
                f"task ({metrics.get('reason') or 'no reason given'}; sandbox failed: "
                f"{bool(metrics.get('sandbox_failed'))}); fix: run `make test` on this code, and check the "
                "sandbox check above"), ""
    return "", f"reference oracle balanced accuracy {accuracy:.3f} >= {floor} in a Ray task"


# ---- probes: what the machine says ----------------------------------------------------------------------
def probe_driver() -> str | None:
    """The first GPU's driver version from nvidia-smi, or None without a working driver."""
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.split()
    return lines[0] if proc.returncode == 0 and lines else None


def probe_gpu_libraries(names: tuple[str, ...]) -> dict[str, str]:
    import importlib

    found = {}
    for name in names:
        try:
            found[name] = str(getattr(importlib.import_module(name), "__version__", "?"))
        except Exception as err:  # any import failure (missing .so, CUDA mismatch) is this check's finding
            found[name] = f"error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
    return found


def score_oracle(knobs: RewardKnobs) -> dict[str, Any]:
    """The reference oracle's metrics on REWARD_TASK through skyrl_gym.make, as SkyRL's generator builds the env."""
    import skyrl_gym

    register_env()
    row = skyrl_row(make_task(*REWARD_TASK), knobs)
    env = skyrl_gym.make(row["env_class"], env_config={},
                         extras={k: v for k, v in row.items() if k not in ("prompt", "env_class")})
    env.step("```python\n" + oracle_source() + "```")
    return env.get_metrics()


def probe_reward_in_ray(repo: Path, knobs: RewardKnobs) -> dict[str, Any]:
    """score_oracle in a Ray task (the worker imports `harness` through PYTHONPATH=repo); a failed task
    comes back as balanced accuracy 0 with its error as the reason."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    try:
        task = ray.remote(num_cpus=1)(score_oracle).options(runtime_env={"env_vars": {"PYTHONPATH": str(repo)}})
        return ray.get(task.remote(knobs), timeout=300)
    except Exception as err:  # RayTaskError, GetTimeoutError, a worker that could not import harness
        return {"balanced_accuracy": 0.0, "reason": f"Ray task failed: {type(err).__name__}: "
                                                    f"{(str(err).strip().splitlines() or [''])[-1][:200]}"}
    finally:
        if started:
            ray.shutdown()


def probe_torch() -> dict[str, Any]:
    """torch's version, CUDA build, and what it sees; {"error": ...} if it does not import."""
    try:
        import torch
    except Exception as err:  # a broken install is this check's finding, not a crash
        return {"error": f"{type(err).__name__}: {err}"[:300]}
    return {"version": torch.__version__, "cuda": torch.version.cuda, "available": torch.cuda.is_available(),
            "count": torch.cuda.device_count()}


# ---- running them ---------------------------------------------------------------------------------------
def gpu_checks() -> list[tuple[str, Callable[[], tuple[str, str]]]]:
    torch: dict[str, Any] = {}  # probed once by the driver check (importing torch takes seconds); gpus reads it

    def driver():
        torch.update(probe_torch())
        if "error" in torch:
            return f"cannot import torch ({torch['error']}); fix: {REINSTALL_FIX}", ""
        return check_driver(probe_driver(), torch["version"], torch["cuda"])

    def gpus():
        problem, wanted, source = wanted_gpus(os.environ)
        if problem:
            return problem, ""
        return check_gpus(torch["available"], torch["count"], wanted, source)

    return [("driver", driver), ("gpus", gpus),
            ("gpu libs", lambda: check_gpu_libraries(probe_gpu_libraries(GPU_LIBRARIES)))]


def cpu_checks() -> list[tuple[str, Callable[[], tuple[str, str]]]]:
    """The sandbox and the reward with the run's knobs (W8_PRESET on the node): what GRPO will use."""
    knobs = RewardKnobs.from_config(load_config())
    return [("sandbox", lambda: check_sandbox(sandbox_info(knobs.sandbox))),
            ("reward", lambda: check_reward(probe_reward_in_ray(REPO_ROOT, knobs), knobs.gold_threshold))]


def run_checks(checks: list[tuple[str, Callable[[], tuple[str, str]]]]) -> int:
    """Run in order, one line each; exit status 1 at the first failure."""
    for name, check in checks:
        started = time.monotonic()
        try:
            problem, detail = check()
        except Exception as err:  # a probe that broke in a way no check foresaw still fails in one line
            problem, detail = f"{type(err).__name__}: {err}".splitlines()[0][:300], ""
        if problem:
            print(f"error: preflight {name}: {problem}", flush=True)
            return 1
        print(f"preflight: {name} ok: {detail} ({time.monotonic() - started:.1f}s)", flush=True)
    print(f"preflight: {len(checks)}/{len(checks)} checks ok")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.preflight", description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-gpu", action="store_true", help="only the sandbox and reward checks")
    args = parser.parse_args(argv)
    return run_checks(cpu_checks() if args.skip_gpu else gpu_checks() + cpu_checks())


if __name__ == "__main__":
    sys.exit(main())
