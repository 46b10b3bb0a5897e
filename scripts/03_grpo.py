"""Step 03: GRPO post-training of the operator model, local TRL or SkyRL by W8_BACKEND.

    python scripts/03_grpo.py                                   # local: TRL GRPOTrainer on CPU
    W8_RUN_ID=demo W8_TRAIN_COUNT=4 W8_GRPO_EPOCHS=1 python scripts/03_grpo.py   # tiny CPU variant
    W8_BACKEND=skyrl python scripts/03_grpo.py                  # GPU node: harness.skyrl_main grpo (Ray, vLLM, FSDP)

Starts from step 02's newest export when SFT ran, else from W8_HARNESS_MODEL; with
W8_GRPO_ONLY_ARM=1 (and SFT) it also trains GRPO from W8_HARNESS_MODEL into <run>/grpo_only,
the grpo_only arm that separates what GRPO does without the warm-start. The reward is
HarnessLegalityEnv.step (harness/env.py) on train tasks only: the composite reward of the
answer's harness on the task's labeled actions, the same path on CPU and on the GPU node.
Writes <run>/grpo/global_step_N/policy (step 04 searches with the newest) and
<run>/grpo_metrics.json (per step: reward mean/std, valid-program rate, zero-variance
groups, loss, timings; on SkyRL also the sandbox that ran and <run>/skyrl_grpo_overrides.txt).
Ends with one line: the export and the wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.exports import newest_export  # noqa: E402
from harness.hparams import for_config  # noqa: E402
from harness.models import ModelError, resolve_model  # noqa: E402
from harness.pipeline import StepError, StepResult, finish_training, run_step  # noqa: E402
from harness.sandbox import SandboxError, sandbox_provenance  # noqa: E402
from harness.training_data import training_data_for  # noqa: E402

STEP = "03_grpo"


def start_model(cfg, run_dir: Path) -> str:
    sft = newest_export(run_dir / "sft")
    return str(sft) if sft is not None else cfg.harness_model


def train_local(cfg, model: str, run_dir: Path, name: str) -> dict:
    from harness.train_local import grpo_steps, train_grpo  # TRL: imported only on the local backend

    try:
        path = resolve_model(model)
    except ModelError as err:
        raise StepError(str(err)) from None
    # completions get the operator's token budget: what GRPO trains to write fits what the search lets it write
    try:
        train_grpo(path, run_dir / name, training_data_for(cfg, run_dir / "data"),
                   grpo_steps(cfg.train_count, cfg.grpo_epochs, cfg.grpo_max_steps), cfg.operator_max_new_tokens, for_config(cfg))
    except SandboxError as err:
        raise StepError(str(err)) from None
    return {"sandbox": sandbox_provenance()}


def train_skyrl(cfg, model: str, run_dir: Path, name: str) -> dict:
    from harness.skyrl_config import SkyRLConfigError
    from harness.skyrl_main import SkyRLRunError, train_skyrl

    try:
        return train_skyrl(cfg, run_dir, name, model)
    except (SkyRLConfigError, SkyRLRunError) as err:
        raise StepError(str(err)) from None


def trainings(cfg, run_dir: Path) -> list[tuple[str, str]]:
    """(output folder, start model): grpo from the SFT export (or the base model without SFT), and grpo_only
    from the base model when W8_GRPO_ONLY_ARM=1 and SFT ran (without SFT the two would be the same run)."""
    sft = newest_export(run_dir / "sft")
    runs = [("grpo", str(sft) if sft is not None else cfg.harness_model)]
    if cfg.grpo_only_arm and sft is not None:
        runs.append(("grpo_only", cfg.harness_model))
    return runs


def body(cfg, run_dir: Path, args) -> StepResult:
    outputs, summaries, extra = [], [], {}
    for name, model in trainings(cfg, run_dir):
        print(f"[{STEP}] {name}: start model {model}", flush=True)
        start = time.monotonic()
        info = (train_local if cfg.backend == "local" else train_skyrl)(cfg, model, run_dir, name)
        result = finish_training(run_dir, run_dir / name, name, time.monotonic() - start, info)
        outputs += result.outputs
        summaries.append(result.summary)
        extra = extra or result.extra  # the main (grpo) training's sandbox and plan go to the marker
    return StepResult(outputs, "; ".join(summaries), extra=extra)


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
