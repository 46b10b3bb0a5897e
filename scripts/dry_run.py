"""Render and validate everything a launch uses, offline and without cloud credentials: `make dry-run`.

    python scripts/dry_run.py                                   # the knobs in the environment
    W8_TRAIN_COUNT=1024 W8_ACCELERATORS=H100:8 python scripts/dry_run.py

1. knobs: every W8_* value range-checked (a bad one names its variable);
2. sky/r3.yaml through SkyPilot's own parser (sky.Task.from_yaml_config, in .venv-sky) with
   the env overrides and --gpus that `make launch` would pass; every knob must be in its envs;
3. the SkyRL overrides through SkyRL's config (scripts/validate_skyrl.py);
4. the datasets: held-out trace tasks and train tasks built and checked (balance, splits);
5. scripts/run_r3.sh parsed by bash -n; `python -m compileall harness scripts`.

Fails (exit 1) on any error; ends with one line: k/n checks ok in S seconds (budget 60 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cloud import SECRETS, TASK_YAML, CloudError, knob_envs, render_task  # noqa: E402
from harness.config import KNOBS, Config, ConfigError, load_config  # noqa: E402
from harness.pipeline import REPO_ROOT, trace_seeds  # noqa: E402

MIN_CLASS_SHARE = 0.4
TRAIN_SAMPLE = 64  # train tasks built here; the full set is built by step 03 (same code path)


class Checks:
    def __init__(self) -> None:
        self.results: list[bool] = []

    def run(self, name: str, fn, *args) -> None:
        self.report(name, *self.timed(fn, *args))

    def run_together(self, checks: list[tuple]) -> None:
        """Checks that mostly wait on their own subprocess run side by side; reported in order."""
        with ThreadPoolExecutor(max_workers=len(checks)) as pool:
            futures = [(name, pool.submit(self.timed, fn, *args)) for name, fn, *args in checks]
            for name, future in futures:
                self.report(name, *future.result())

    @staticmethod
    def timed(fn, *args) -> tuple[bool, str, float]:
        start = time.monotonic()
        try:
            return True, fn(*args), time.monotonic() - start
        except CheckError as err:
            return False, str(err), time.monotonic() - start
        except Exception as err:  # each check reports its own failure in one line
            return False, f"{type(err).__name__}: {err}", time.monotonic() - start

    def report(self, name: str, ok: bool, detail: str, wall_s: float) -> None:
        self.results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name:<14} {detail}  ({wall_s:.1f}s)", flush=True)


class CheckError(RuntimeError):
    """A check failed; the message says what."""


def check_yaml(cfg: Config) -> str:
    overrides = knob_envs(os.environ)
    gpus = os.environ.get("W8_ACCELERATORS") or None
    try:
        task = render_task(overrides, gpus=gpus, secret_names=SECRETS, yaml_path=TASK_YAML)
    except CloudError as err:
        raise CheckError(str(err)) from None
    missing = [k.env for k in KNOBS if k.env not in task["envs"]]
    if missing:
        raise CheckError(f"sky/r3.yaml envs lack {', '.join(missing)} (every knob must be there with its default)")
    for name, value in overrides:
        if task["envs"].get(name) != value:
            raise CheckError(f"override {name}={value} did not reach the task (got {task['envs'].get(name)!r})")
    if "scripts/run_r3.sh" not in task["run"]:
        raise CheckError("sky/r3.yaml run does not call scripts/run_r3.sh")
    if "skyrl[fsdp]==0.4.0" not in task["setup"]:
        raise CheckError("sky/r3.yaml setup does not install skyrl[fsdp]==0.4.0")
    missing_secrets = [name for name in SECRETS if name not in task["secret_names"]]
    if missing_secrets:
        raise CheckError(f"sky/r3.yaml does not declare the secret(s) {', '.join(missing_secrets)}")
    return (f"{task['name']}: {task['cloud'][0]} {task['accelerators'][0]}, disk {task['disk_size'][0]} GB, "
            f"{len(task['envs'])} envs ({len(overrides)} overridden), secrets {', '.join(task['secret_names'])}")


def check_skyrl(cfg: Config) -> str:
    script = REPO_ROOT / "scripts" / "validate_skyrl.py"
    if not script.is_file():
        raise CheckError("scripts/validate_skyrl.py is missing (SkyRL override validation)")
    # rows go under .w8-biayn (ignored), not the trainer's default ~/data
    proc = subprocess.run([sys.executable, str(script), "--data-dir", str(REPO_ROOT / ".w8-biayn" / "dry-run-data")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    out = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode != 0:
        raise CheckError((proc.stderr.strip().splitlines() or [out or "failed"])[-1])
    return out


def _balanced(task) -> bool:
    legal = sum(e.legal for e in task.examples)
    return min(legal, len(task.examples) - legal) >= MIN_CLASS_SHARE * len(task.examples) - 1e-9


def check_datasets(cfg: Config) -> str:
    from harness.dataset import DatasetError, make_task

    try:
        trace = [make_task("heldout", seed, cfg.trace_examples_per_obs) for seed in trace_seeds(cfg)]
        train = [make_task("train", seed, cfg.train_examples_per_obs) for seed in range(min(cfg.train_count,
                                                                                              TRAIN_SAMPLE))]
    except DatasetError as err:
        raise CheckError(str(err)) from None
    unbalanced = [t.task_id for t in trace + train if not _balanced(t)]
    if unbalanced:
        raise CheckError(f"unbalanced task(s): {', '.join(unbalanced[:3])}")
    shared = {t.page for t in trace} & {t.page for t in train}
    if shared:
        raise CheckError(f"held-out trace page(s) also in train: {', '.join(sorted(shared))}")
    return (f"{len(trace)} held-out trace task(s) ({', '.join(t.task_id for t in trace)}), {len(train)} train "
            f"tasks from {len({t.obs_id for t in train})} observations, balanced, splits disjoint")


def check_bash() -> str:
    proc = subprocess.run(["bash", "-n", "scripts/run_r3.sh"], cwd=REPO_ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CheckError(proc.stderr.strip().splitlines()[-1])
    return "scripts/run_r3.sh parses"


def check_compile() -> str:
    proc = subprocess.run([sys.executable, "-m", "compileall", "-q", "harness", "scripts"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise CheckError(" ".join((proc.stdout + proc.stderr).split())[:300])
    return "harness scripts"


def main() -> int:
    start = time.monotonic()
    checks = Checks()
    try:
        cfg = load_config()
    except ConfigError as err:
        print(f"FAIL {'knobs':<14} {err}")
        print("dry-run: 0/1 checks ok")
        return 1
    print(f"ok   {'knobs':<14} {len(KNOBS)} knobs in range (backend {cfg.backend}, model {cfg.harness_model})")
    checks.results.append(True)
    checks.run_together([("sky/r3.yaml", check_yaml, cfg), ("skyrl config", check_skyrl, cfg)])
    checks.run("datasets", check_datasets, cfg)
    checks.run("run_r3.sh", check_bash)
    checks.run("compileall", check_compile)
    wall = time.monotonic() - start
    ok = sum(checks.results)
    print(f"dry-run: {ok}/{len(checks.results)} checks ok in {wall:.1f}s")
    return 0 if all(checks.results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
