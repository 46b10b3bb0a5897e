"""Render and validate everything a launch uses, offline and without cloud credentials: `make dry-run`.

    make dry-run                                   # W8_PRESET=gcp under the W8_* you set
    W8_PRESET=gpu-smoke python scripts/dry_run.py  # what make gpu-smoke launches
    W8_NUM_NODES=2 W8_BUCKET=gs://my-bucket/r3 make dry-run

1. knobs: every W8_* value range-checked with its preset (a bad one names its variable), and
   what a launch needs before money is spent (skyrl backend, DAYTONA_API_KEY when
   W8_SANDBOX=daytona);
2. the node install spec (harness.node_env): SkyRL 0.4.0's fsdp pins from its PyPI sdist,
   resolved with sky/requirements-node.txt for linux x86_64 / Python 3.12 (uv pip compile);
   and (harness.node_lock) sky/requirements-node.txt compiled against SkyRL's real uv.lock (the
   committed export sky/skyrl-fsdp-lock.txt; the line says which lock), as the node does before uv sync;
3. sky/r3.yaml through SkyPilot's own parser (sky.Task.from_yaml_config, in .venv-sky) with
   exactly the --env/--gpus/--num-nodes/--image-id/--secret that `make launch` passes;
4. the SkyRL plans (scripts/validate_skyrl.py): the knobs' shape and 1, 2, 4 nodes of <GPU>:8
   through SkyRL's config classes, the one token budget, prompt lengths;
5. the datasets: held-out trace tasks and train tasks built and checked (balance, splits);
6. scripts/run_r3.sh and scripts/node_setup.sh parsed by bash -n; `python -m compileall`;
7. SSH exposure: with W8_GCP_IAP=1 the rendered SkyPilot config (harness.gcp_iap) through SkyPilot's
   own config schema; without it, a line saying tcp:22 is open to the internet.

Everything rendered (node env lock files, override lists, the sky command) goes to
.w8-biayn/dry-run/<preset>/. Fails (exit 1) on any error; ends with one line: k/n checks ok
in S seconds (budget 60 s).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cloud import (TASK_YAML, CloudError, check_host_memory, launch_command, open_ports,  # noqa: E402
                           render_tasks, scenario_of)
from harness.cloud import GCLOUD_CONFIG_DIR, key_path  # noqa: E402
from harness.config import BY_ENV, KNOBS, Config, ConfigError, load_config  # noqa: E402
from harness.gcp_iap import sky_config, validate  # noqa: E402
from harness.dataset import DatasetError, is_balanced  # noqa: E402
from harness.files import REPO_ROOT, WORK_DIR  # noqa: E402
from harness.rule_split import Design  # noqa: E402
from harness.traces import search_plan, trace_tasks  # noqa: E402
from harness.training_data import train_tasks  # noqa: E402

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


def check_launch_needs(cfg: Config) -> str:
    if cfg.backend != "skyrl":
        raise CheckError(f"W8_BACKEND={cfg.backend}: a GCP launch trains with skyrl (W8_PRESET=gcp or gpu-smoke)")
    if cfg.sandbox == "daytona" and not os.environ.get("DAYTONA_API_KEY"):
        raise CheckError("W8_SANDBOX=daytona but DAYTONA_API_KEY is not set: export it (it travels as a SkyPilot "
                         "secret) or use W8_SANDBOX=auto")
    memory = check_host_memory(cfg.backend, cfg.memory)
    if memory:
        raise CheckError(memory)
    keys = [name for name in ("DAYTONA_API_KEY", "WANDB_API_KEY") if os.environ.get(name)]
    return (f"backend skyrl, {cfg.num_nodes} x {cfg.accelerators}, host RAM {cfg.memory} GB, sandbox {cfg.sandbox}, "
            f"guard {cfg.guard_no_valid}, bucket {cfg.bucket or 'none (results only in the launch log)'}; secrets by name: "
            f"{', '.join(keys) or 'none'}")


def check_yaml(cfg: Config, out: Path, yaml_path: Path = TASK_YAML) -> str:
    cmd = launch_command(os.environ, cfg.as_dict())
    (out / "sky_launch.txt").write_text(shlex.join(cmd) + "\n")
    try:
        [task] = render_tasks([scenario_of(cmd)], yaml_path)
    except CloudError as err:
        raise CheckError(str(err)) from None
    if "error" in task:
        raise CheckError(f"SkyPilot rejects {yaml_path.name} with this launch: {task['error']}")
    ports = open_ports(task)
    if ports:  # on GCP SkyPilot opens them to 0.0.0.0/0; the nodes of a cluster reach each other without
        raise CheckError(f"{yaml_path.name} opens port(s) {', '.join(ports)} to the internet: remove `ports:` "
                         "(the cluster's nodes already reach each other)")
    unknown = [name for name in task["envs"] if name not in BY_ENV and name != "W8_GIT_SHA"]
    if unknown:
        raise CheckError(f"sky/r3.yaml envs {', '.join(unknown)} are not knobs of harness/config.py")
    if task["envs"].get("W8_PRESET") != cfg.preset:
        raise CheckError(f"W8_PRESET={cfg.preset!r} did not reach the task (got {task['envs'].get('W8_PRESET')!r})")
    for name, value in [kv.split("=", 1) for kv in cmd if "=" in kv and kv.startswith("W8_")]:
        if task["envs"].get(name) != value:
            raise CheckError(f"--env {name}={value} did not reach the task (got {task['envs'].get(name)!r})")
    if task["num_nodes"] != cfg.num_nodes:
        raise CheckError(f"the task has {task['num_nodes']} node(s), W8_NUM_NODES={cfg.num_nodes}")
    if "scripts/run_r3.sh" not in task["run"] or "scripts/node_setup.sh" not in task["setup"]:
        raise CheckError("sky/r3.yaml must run scripts/node_setup.sh (setup) and scripts/run_r3.sh (run)")
    missing = [name for name in ("DAYTONA_API_KEY", "WANDB_API_KEY") if name not in task["secret_names"]]
    if missing:
        raise CheckError(f"sky/r3.yaml does not declare the secret(s) {', '.join(missing)}")
    if cfg.memory and task["memory"][0] != cfg.memory:
        raise CheckError(f"W8_MEMORY={cfg.memory} did not reach the task's resources (got {task['memory'][0]!r})")
    return (f"{task['name']}: {task['cloud'][0]} {task['num_nodes']} x {task['accelerators'][0]}, memory "
            f"{task['memory'][0]} GB, no ports, disk "
            f"{task['disk_size'][0]} GB, image {task['image_id'][0] or 'default'}, preset {cfg.preset}, "
            f"{len(cmd)} launch args")


def _subprocess_check(args: list[str], timeout: int = 300, all_lines: bool = False) -> str:
    """Run a check script; its last stdout line (all of them, indented, with all_lines), or CheckError."""
    proc = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines() or [""]
    if proc.returncode != 0:
        raise CheckError((proc.stderr.strip().splitlines() or [lines[-1] or "failed"])[-1].removeprefix("error: "))
    if not all_lines:
        return lines[-1]
    return lines[-1] + "".join(f"\n{'':<20}{line}" for line in lines[:-1])


def check_node_env(out: Path) -> str:
    return _subprocess_check(["-m", "harness.node_env", "check", "--out", str(out / "node-env")])


def check_ssh(cfg: Config, out: Path) -> str:
    """IAP mode: the rendered SkyPilot config through SkyPilot's own schema; otherwise what SSH exposure is."""
    if not cfg.gcp_iap:
        return ("SkyPilot's default network: tcp:22 open to 0.0.0.0/0 (key-only SSH); W8_GCP_IAP=1 W8_GCP_VPC=<network> "
                "keeps it behind IAP")
    path = out / "sky-iap.yaml"
    path.write_text(json.dumps(sky_config(cfg.gcp_vpc, "<project of the key>", key_path(), GCLOUD_CONFIG_DIR),
                               indent=1) + "\n")
    problem = validate(path)
    if problem:
        raise CheckError(problem)
    return (f"IAP mode: gcp.vpc_name={cfg.gcp_vpc}, use_internal_ips, ssh_proxy_command via scripts/iap_proxy.sh; "
            f"SkyPilot's config schema accepts {path.name}; the firewall is checked by make doctor")


def check_lock(out: Path) -> str:
    return _subprocess_check(["-m", "harness.node_lock", "check", "--out", str(out / "node-lock")])


def check_skyrl(out: Path) -> str:
    # rows go under .w8-biayn (ignored), not the trainer's default ~/data
    return _subprocess_check(["scripts/validate_skyrl.py", "--data-dir", str(WORK_DIR / "dry-run-data"),
                              "--out", str(out / "plans")], all_lines=True)


def check_datasets(cfg: Config) -> str:
    try:
        trace = trace_tasks(cfg)  # what steps 01 and 04 search: one task per held-out page from W8_TRACE_TASK_SEED
        train = train_tasks(min(cfg.train_count, TRAIN_SAMPLE), cfg.train_examples_per_obs, Design.of(cfg))
    except DatasetError as err:
        raise CheckError(str(err)) from None
    unbalanced = [t.task_id for t in trace + train
                  if not is_balanced(sum(e.legal for e in t.examples), sum(not e.legal for e in t.examples))]
    if unbalanced:
        raise CheckError(f"unbalanced task(s): {', '.join(unbalanced[:3])}")
    shared = {t.page for t in trace} & {t.page for t in train}
    if shared:
        raise CheckError(f"held-out trace page(s) also in train: {', '.join(sorted(shared))}")
    return (f"{len(trace)} held-out trace task(s) ({', '.join(t.task_id for t in trace)}), {len(train)} train "
            f"tasks from {len({t.obs_id for t in train})} observations, balanced, splits disjoint")


def check_search_plan(cfg: Config) -> str:
    """The searches the launch pays for (harness.traces.search_plan): arms x tasks x seeds, operator calls, GPU time."""
    plan = search_plan(cfg)
    minutes = plan["gpu_minutes_estimate"]
    arms = "; ".join(f"{arm} budget {p['budget']} (<= {p['max_search_nodes']} nodes"
                     + (f", {p['training_generations']} training generations" if p["training_generations"] else "")
                     + ")" for arm, p in plan["per_arm"].items())
    return (f"{plan['searches']} searches over {plan['tasks']} held-out tasks x {plan['seeds']} seed(s), at most "
            f"{plan['max_operator_calls']} operator calls in {plan['max_rounds']} batched rounds; arms: {arms}"
            + (f"; about {minutes:.0f} GPU minutes of searching (an estimate from assumed vLLM speed, "
               "harness/traces.py)" if minutes else ""))


def check_bash() -> str:
    for script in ("scripts/run_r3.sh", "scripts/node_setup.sh"):
        proc = subprocess.run(["bash", "-n", script], cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CheckError(f"{script}: {(proc.stderr.strip().splitlines() or ['bash -n failed'])[-1]}")
    return "scripts/run_r3.sh scripts/node_setup.sh parse"


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
    out = WORK_DIR / "dry-run" / (cfg.preset or "none")
    out.mkdir(parents=True, exist_ok=True)
    print(f"ok   {'knobs':<14} {len(KNOBS)} knobs in range (preset {cfg.preset or 'none'}, backend {cfg.backend}, "
          f"model {cfg.harness_model}); rendered files in {out.relative_to(REPO_ROOT)}/")
    checks.results.append(True)
    checks.run("launch needs", check_launch_needs, cfg)
    checks.run_together([("node env", check_node_env, out), ("skyrl lock", check_lock, out),
                         ("sky/r3.yaml", check_yaml, cfg, out), ("skyrl plans", check_skyrl, out),
                         ("gcp ssh", check_ssh, cfg, out)])
    checks.run("datasets", check_datasets, cfg)
    checks.run("search plan", check_search_plan, cfg)
    checks.run("bash -n", check_bash)
    checks.run("compileall", check_compile)
    wall = time.monotonic() - start
    ok = sum(checks.results)
    print(f"dry-run: {ok}/{len(checks.results)} checks ok in {wall:.1f}s")
    return 0 if all(checks.results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
