"""Step 03: GRPO post-training of the operator model, local TRL or SkyRL by W8_BACKEND.

    python scripts/03_grpo.py                                   # local: TRL GRPOTrainer on CPU
    W8_RUN_ID=demo W8_TRAIN_COUNT=4 W8_GRPO_EPOCHS=1 python scripts/03_grpo.py   # tiny CPU variant
    W8_BACKEND=skyrl python scripts/03_grpo.py                  # GPU node: harness.skyrl_main (Ray, vLLM, FSDP)

Starts from step 02's newest export when SFT ran, else from W8_HARNESS_MODEL. The reward is
HarnessLegalityEnv.step (harness/env.py) on train tasks only: the composite reward of the
answer's harness on the task's labeled actions, the same path on CPU and on the GPU node.
Writes <run>/grpo/global_step_N/policy (step 04 searches with the newest) and
<run>/grpo_metrics.json. Ends with one line: the export and the wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.pipeline import StepResult, finish_training, newest_export, run_skyrl, run_step, trainer  # noqa: E402

STEP = "03_grpo"


def start_model(cfg, run_dir: Path) -> str:
    sft = newest_export(run_dir / "sft")
    return str(sft) if sft is not None else cfg.harness_model


def train_local(cfg, model: str, out_dir: Path) -> None:
    from harness.train_local import resolve_model

    # completions get the operator's token budget: what GRPO trains to write fits what the search lets it write
    trainer("train_grpo")(resolve_model(model), out_dir, train_count=cfg.train_count,
                          examples_per_obs=cfg.train_examples_per_obs, epochs=cfg.grpo_epochs,
                          max_steps=cfg.grpo_max_steps or None, max_completion_length=cfg.operator_max_new_tokens,
                          data_dir=out_dir.parent / "data")


def train_skyrl(cfg, model: str, out_dir: Path) -> None:
    from harness.skyrl_config import grpo_overrides

    overrides = grpo_overrides(cfg, model=model, export_path=out_dir, data_dir=out_dir.parent / "data")
    run_skyrl("harness.skyrl_main", overrides, out_dir / "skyrl_grpo.log")


def body(cfg, run_dir: Path, args) -> StepResult:
    model = start_model(cfg, run_dir)
    print(f"[{STEP}] start model: {model}", flush=True)
    out_dir = run_dir / "grpo"
    start = time.monotonic()
    (train_local if cfg.backend == "local" else train_skyrl)(cfg, model, out_dir)
    return finish_training(run_dir, out_dir, "grpo", time.monotonic() - start)


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
