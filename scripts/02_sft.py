"""Step 02 (optional): oracle SFT warm-start of the operator model; skipped when W8_HARNESS_SFT_STEPS=0.

    W8_HARNESS_SFT_STEPS=8 python scripts/02_sft.py                    # local backend: TRL SFT on CPU
    W8_RUN_ID=demo W8_HARNESS_SFT_STEPS=1 python scripts/02_sft.py     # tiny CPU variant (one real step)
    W8_BACKEND=skyrl W8_HARNESS_SFT_STEPS=50 python scripts/02_sft.py  # GPU node: skyrl.train.main_sft

The targets are the hand-written reference harness (harness/oracle.py) answering the same
zero-shot prompt the search's node 0 and GRPO use, on train tasks only. Writes
<run>/sft/global_step_N/policy (an HF export) and <run>/sft_metrics.json. With 0 steps it
writes only its marker (skipped) and step 03 starts from the base model. Ends with one
line: the export and the wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.pipeline import StepResult, finish_training, run_skyrl, run_step, trainer  # noqa: E402

STEP = "02_sft"


def train_local(cfg, out_dir: Path) -> None:
    from harness.train_local import resolve_model

    trainer("train_sft")(resolve_model(cfg.harness_model), out_dir, steps=cfg.harness_sft_steps,
                         train_count=cfg.train_count, examples_per_obs=cfg.train_examples_per_obs,
                         data_dir=out_dir.parent / "data")


def train_skyrl(cfg, out_dir: Path) -> None:
    from harness.skyrl_config import sft_overrides

    overrides = sft_overrides(cfg, export_path=out_dir, data_dir=out_dir.parent / "data")
    run_skyrl("skyrl.train.main_sft", overrides, out_dir / "skyrl_sft.log")


def body(cfg, run_dir: Path, args) -> StepResult:
    if cfg.harness_sft_steps == 0:
        return StepResult([], "W8_HARNESS_SFT_STEPS=0: step 03 starts from the base model", skipped=True)
    out_dir = run_dir / "sft"
    start = time.monotonic()
    (train_local if cfg.backend == "local" else train_skyrl)(cfg, out_dir)
    return finish_training(run_dir, out_dir, "sft", time.monotonic() - start)


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
