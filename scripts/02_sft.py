"""Step 02 (optional): oracle SFT warm-start of the operator model; skipped when W8_HARNESS_SFT_STEPS=0.

    W8_HARNESS_SFT_STEPS=8 python scripts/02_sft.py                    # local backend: TRL SFT on CPU
    W8_RUN_ID=demo W8_HARNESS_SFT_STEPS=1 python scripts/02_sft.py     # tiny CPU variant (one real step)
    W8_BACKEND=skyrl W8_HARNESS_SFT_STEPS=50 python scripts/02_sft.py  # GPU node: SkyRL's SFT trainer

The targets are a reference harness answering the same zero-shot prompt the search's node
0 and GRPO use, on train tasks only: the full oracle (harness/oracle.py) on the GPU node,
its compact form (harness.dataset.COMPACT_HARNESS, same verdicts) on CPU. Writes
<run>/sft/global_step_N/policy (an HF export) and <run>/sft_metrics.json; on SkyRL also
<run>/skyrl_sft_overrides.txt (one override a line). With 0 steps it writes only its marker
(skipped) and step 03 starts from the base model. It also writes <run>/sft_target.py, the program the
warm-start taught (under the rule split: the compact program without the held-out rules). Ends with one
line: the export and the wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.hparams import for_config  # noqa: E402
from harness.models import ModelError, resolve_model  # noqa: E402
from harness.pipeline import StepError, StepResult, finish_training, run_step  # noqa: E402
from harness.split_check import write_sft_target  # noqa: E402
from harness.training_data import training_data_for  # noqa: E402

STEP = "02_sft"


def train_local(cfg, run_dir: Path) -> dict:
    from harness.train_local import train_sft  # TRL: imported only on the local backend

    try:
        model = resolve_model(cfg.harness_model)
    except ModelError as err:
        raise StepError(str(err)) from None
    train_sft(model, run_dir / "sft", training_data_for(cfg, run_dir / "data"), cfg.harness_sft_steps, for_config(cfg),
              seed=cfg.train_seed, report_to=cfg.report_to, precision=cfg.train_precision)
    return {}


def train_skyrl(cfg, run_dir: Path) -> dict:
    from harness.skyrl_config import SkyRLConfigError
    from harness.skyrl_main import SkyRLRunError, train_skyrl

    try:
        return train_skyrl(cfg, run_dir, "sft", cfg.harness_model)
    except (SkyRLConfigError, SkyRLRunError) as err:
        raise StepError(str(err)) from None


def body(cfg, run_dir: Path, args) -> StepResult:
    if cfg.harness_sft_steps == 0:
        return StepResult([], "W8_HARNESS_SFT_STEPS=0: step 03 starts from the base model", skipped=True)
    start = time.monotonic()
    extra = (train_local if cfg.backend == "local" else train_skyrl)(cfg, run_dir)
    result = finish_training(run_dir, run_dir / "sft", "sft", time.monotonic() - start, extra)
    result.outputs.append(write_sft_target(cfg, run_dir))  # the program the warm-start taught, for the results
    return result


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
