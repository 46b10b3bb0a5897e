"""A run folder: its id, the knobs and records it holds, how it is resumed, what of it is small enough to publish.

    from harness.run_folder import config_of_run, load_run_config, rerun_command, small_artifacts
    cfg = config_of_run(run_dir)           # the knobs the run was started with (a step in a subprocess uses them)
    rerun_command("smoke-x")               # 'W8_PRESET=smoke W8_RUN_ID=smoke-x bash scripts/run_r3.sh'
    small_artifacts(run_dir, ["03_grpo"])  # the files of a finished step that go to results/<run-id>/

Everything a run writes goes under `.w8-biayn/runs/<run-id>/` (W8_RUNS_ROOT overrides). This module reads
and names what is there; opening a run (the checks before work, run_config.json with the run's task lists)
and running a step live in harness.pipeline, which also re-exports these names. The modules that search or
train for a step (harness.traces, harness.harvest, harness.arm_training) import from here, below the
pipeline, so that the pipeline may import them.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.config import KNOBS, Config, recorded_value
from harness.files import WORK_DIR, atomic_write_json, read_json
from harness.markers import STEPS, read_marker

PIPELINE = "r3"
RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"


class RunError(RuntimeError):
    """A run folder cannot be used as asked; the message says why in one line."""


class StepError(RuntimeError):
    """A step cannot run as asked (missing input, bad export); printed as one line, exit 1."""


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


def new_run_id(run_id: str) -> str:
    """A fresh id next to `run_id`: smoke-x -> smoke-x-2, smoke-x-2 -> smoke-x-3."""
    stem, _, number = run_id.rpartition("-")
    return f"{stem}-{int(number) + 1}" if stem and number.isdigit() and len(number) < 4 else f"{run_id}-2"


def rerun_command(run_id: str, env: Mapping[str, str] | None = None) -> str:
    """The command that runs `run_id` with every W8_ variable of this environment (preset, results root,
    knobs set by hand): printed as a resume hint, it works as printed from the repo root."""
    env = os.environ if env is None else env
    names = sorted(name for name in env if name.startswith("W8_") and name != "W8_RUN_ID" and env[name] != "")
    assigns = [f"{name}={shlex.quote(env[name])}" for name in names] + [f"W8_RUN_ID={shlex.quote(run_id)}"]
    return " ".join(assigns) + " bash scripts/run_r3.sh"


# ---- what the folder holds -------------------------------------------------------------------
def load_run_config(run_dir: Path) -> dict[str, Any]:
    return read_json(Path(run_dir) / "run_config.json", fix="the run cannot be resumed; start a new run id")


def config_of_run(run_dir: Path) -> Config:
    """The knobs a run folder was started with (what a step run in a subprocess must use). A knob added after
    the run was recorded takes the value runs had before it (harness.config.recorded_value: W8_SPLIT=page)."""
    knobs = load_run_config(run_dir)["knobs"]
    return Config({**{k.name: recorded_value(knobs, k.name) for k in KNOBS}, **knobs})


def record_sandbox(run_dir: Path, step: str, provenance: dict[str, Any]) -> None:
    """run_config.json["sandbox"][step]: the backend that actually ran the step's programs, and any fallback."""
    config = load_run_config(run_dir)
    config.setdefault("sandbox", {})[step] = provenance
    atomic_write_json(Path(run_dir) / "run_config.json", config)


def use_run_caches(run_dir: Path, env: dict[str, str] | None = None) -> Path:
    """Point the caches a step's libraries create (torch's inductor cache, Triton's kernels, the ct2 and
    llamacpp operators' converted models) into <run>/cache/ unless set already: nothing of the run is left in
    TMPDIR after a kill, and a resume reuses them. Children (step 04's arm processes, trainers) inherit it."""
    env = os.environ if env is None else env
    cache = Path(run_dir) / "cache"
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "torchinductor"))
    env.setdefault("TRITON_CACHE_DIR", str(cache / "triton"))
    env.setdefault("W8_CT2_CACHE", str(cache / "ct2"))  # the ct2 operator's converted models (harness.ct2)
    env.setdefault("W8_GGUF_CACHE", str(cache / "gguf"))  # the llamacpp operator's GGUF copies (harness.gguf_export)
    return cache


def small_artifacts(run_dir: Path, steps: Iterable[str] = STEPS) -> list[str]:
    """run_config.json plus the file outputs of the finished `steps` (folders such as exports excluded)."""
    names = ["run_config.json"] if (Path(run_dir) / "run_config.json").is_file() else []
    for step in steps:
        marker = read_marker(run_dir, step) or {}
        names += [rel for rel in marker.get("outputs", []) if (Path(run_dir) / rel).is_file()]
    return names


def shown_run_dir(run_dir: Path) -> str:
    """The run folder relative to the working directory when inside it (shorter lines), else as is."""
    try:
        return str(Path(run_dir).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(run_dir)


def knobs_line(knobs: dict[str, Any]) -> str:
    """The resolved knobs on one line, preset first: what this run is."""
    preset = knobs.get("preset") or "none"
    rest = " ".join(f"{knob.env}={knobs.get(knob.name)}" for knob in KNOBS if knob.name != "preset")
    return f"knobs (preset {preset}): {rest}"
