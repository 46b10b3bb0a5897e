"""SkyRL GRPO entrypoint on the GPU node: `python -m harness.skyrl_main <overrides...>`.

    python -m harness.skyrl_main $(python -c "...grpo_overrides(...)")   # what scripts/03_grpo.py runs

Same shape as SkyRL's examples/train/multiply/main_multiply.py: parse and validate the
overrides on the head process, start Ray, and run training inside one Ray task that first
registers `harness_legality` (registration is per process, so it must happen where the
generator builds envs). The repo root is put on PYTHONPATH before Ray starts, so the
string entry point `harness.env:HarnessLegalityEnv` imports in every Ray worker.

Before any GPU work it re-checks the rows with the policy's real tokenizer (prompt length
vs max_prompt_length, dataset size vs train_batch_size): the dry-run could only estimate.
Every metrics dict SkyRL logs is also appended to <export_path>/metrics.jsonl; at the end
it is summarised into <export_path>/metrics.json and metrics.png (harness.train_local).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# pitfall (placement-group stalls): SkyRL reads this at import; the first start of a node
# (vLLM compile, worker package set-up) can take longer than its 180 s default.
os.environ.setdefault("SKYRL_RAY_PG_TIMEOUT_IN_S", "600")


def _jsonl_tracking(base, path: Path):
    """A SkyRL Tracking that also appends each numeric metrics dict to `path`."""

    class JsonlTracking(base):
        def log(self, data, step, commit=False):
            row = {k: float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.write(json.dumps({"step": int(step), **row}) + "\n")
            return super().log(data, step, commit=commit) if "commit" in base.log.__code__.co_varnames \
                else super().log(data, step)

    return JsonlTracking


def _entrypoint(cfg) -> None:
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.utils.tracking import Tracking

    from harness.env import register_env

    register_env()  # inside the Ray task: this process's generator calls skyrl_gym.make
    metrics_path = Path(cfg.trainer.export_path) / "metrics.jsonl"

    class Exp(BasePPOExp):
        def get_tracker(self):
            return _jsonl_tracking(Tracking, metrics_path)(
                project_name=self.cfg.trainer.project_name, experiment_name=self.cfg.trainer.run_name,
                backend=self.cfg.trainer.logger, config=self.cfg, tags=self.cfg.trainer.tags)

    Exp(cfg).run()


def check_rows_on_node(cfg) -> None:
    """Prompt lengths with the policy's own tokenizer; SystemExit with one line if a row would be dropped."""
    from harness.dataset import TrainingData, check_skyrl_parquet
    from harness.skyrl_config import SkyRLConfigError, measure_lengths

    train, val = Path(cfg.data.train_data[0]), Path(cfg.data.val_data[0])
    data = TrainingData(train, val, train.parent / "sft", check_skyrl_parquet(train), check_skyrl_parquet(val))
    if data.n_train < cfg.trainer.train_batch_size:
        raise SystemExit(f"error: {train} has {data.n_train} rows < trainer.train_batch_size="
                         f"{cfg.trainer.train_batch_size}")
    if not (data.sft_dir / "train.jsonl").is_file():
        return
    lengths = measure_lengths(cfg.trainer.policy.model.path, data)
    if lengths.prompt_max > cfg.trainer.max_prompt_length:
        raise SystemExit(f"error: {SkyRLConfigError.__name__}: longest prompt {lengths.prompt_max} tokens "
                         f"({lengths.tokenizer}) > trainer.max_prompt_length={cfg.trainer.max_prompt_length}")


def main(argv: list[str] | None = None) -> int:
    import ray
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.utils import initialize_ray
    from skyrl.train.utils.utils import validate_cfg

    from harness.skyrl_config import SkyRLConfigError, validate_grpo

    overrides = list(sys.argv[1:] if argv is None else argv)
    try:
        validate_grpo(overrides)
    except SkyRLConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    check_rows_on_node(cfg)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    initialize_ray(cfg)
    ray.get(ray.remote(num_cpus=1)(_entrypoint).remote(cfg))
    export = Path(cfg.trainer.export_path)
    from harness.train_local import summarize_skyrl_metrics

    summarize_skyrl_metrics(export / "metrics.jsonl", export)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
