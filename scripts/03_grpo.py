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
Every arm harness/arms.py's table plans and gives a training function is trained here, in the table's
order (harness.arm_training.TRAININGS). With W8_REFINE_ARM=1 / W8_SELF_ARM=1 that is those arms too: their
harvests' wall_s is real time (worker_s adds up the searches that ran side by side), the programs each trains
on go to <run>/refine_programs.jsonl and <run>/self_programs.jsonl (text, source, reward; copied to
results/<run-id>/), and their harvest records and data folders are hashed in the step's marker.
Ends with one line: the export and the wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.arm_training import TRAININGS, Trainers  # noqa: E402
from harness.arms import planned  # noqa: E402
from harness.exports import newest_export  # noqa: E402
from harness.hparams import for_config  # noqa: E402
from harness.models import ModelError, resolve_model  # noqa: E402
from harness.pipeline import StepError, StepResult, finish_training, run_step  # noqa: E402
from harness.sandbox import SandboxError, sandbox_provenance  # noqa: E402
from harness.training_data import TrainingData, training_data_for  # noqa: E402

STEP = "03_grpo"


def local_model(model: str) -> str:
    try:
        return str(resolve_model(model))
    except ModelError as err:
        raise StepError(str(err)) from None


def train_local(cfg, model: str, run_dir: Path, name: str, data: TrainingData | None = None) -> dict:
    from harness.train_local import grpo_steps, train_grpo  # TRL: imported only on the local backend
    # completions get the operator's token budget: what GRPO trains to write fits what the search lets it write
    try:
        train_grpo(local_model(model), run_dir / name, data or training_data_for(cfg, run_dir / "data"),
                   grpo_steps(cfg.train_count, cfg.grpo_epochs, cfg.grpo_max_steps), cfg.operator_max_new_tokens,
                   for_config(cfg), seed=cfg.train_seed, report_to=cfg.report_to, precision=cfg.train_precision,
                   dynamic_tries=cfg.grpo_dynamic_tries, sampler=cfg.grpo_sampler)
    except SandboxError as err:
        raise StepError(str(err)) from None
    return {"sandbox": sandbox_provenance()}


def train_skyrl(cfg, model: str, run_dir: Path, name: str, data: TrainingData | None = None,
                entry: str | None = None) -> dict:
    from harness.skyrl_config import SkyRLConfigError
    from harness.skyrl_main import SkyRLRunError, train_skyrl
    try:
        return train_skyrl(cfg, run_dir, name, model, data=data, entry=entry)
    except (SkyRLConfigError, SkyRLRunError) as err:
        raise StepError(str(err)) from None


def train(cfg, model: str, run_dir: Path, name: str, data: TrainingData | None = None) -> dict:
    return (train_local if cfg.backend == "local" else train_skyrl)(cfg, model, run_dir, name, data)


def rft(cfg, base: str, run_dir: Path, name: str, data: TrainingData, steps: int | None = None) -> str:
    """A fine-tune of the BASE model: the self arm's rejection-sampling rounds (W8_SELF_SFT_STEPS steps on its
    kept programs) and the repair warm-start (`steps`: one a row)."""
    steps = steps or cfg.self_sft_steps
    if cfg.backend == "local":
        from harness.train_local import train_sft
        return str(train_sft(local_model(base), run_dir / name, data, steps, for_config(cfg),
                             seed=cfg.train_seed, report_to=cfg.report_to,
                             precision=cfg.train_precision).policy_dir)
    # SkyRL's SFT entrypoint: that many steps on the rows (its prompt lengths are measured on the run's own
    # parquets, which the TrainingData points at)
    train_skyrl(cfg.replace(harness_sft_steps=steps), base, run_dir, name, data, entry="sft")
    return str(newest_export(run_dir / name))


def body(cfg, run_dir: Path, args) -> StepResult:
    """Every planned arm of harness/arms.py's table with a training function (harness.arm_training.TRAININGS), in
    the table's order: trained (<run>/grpo), then the opt-in grpo_only, refine and self."""
    outputs, summaries, extra, inputs = [], [], {}, []
    trainers = Trainers(grpo=train, sft=rft)
    for arm in planned(cfg):
        if arm.training is None:
            continue
        print(f"[{STEP}] {arm.name} arm: {arm.trained_by}", flush=True)
        start = time.monotonic()
        done = TRAININGS[arm.training](cfg, run_dir, trainers)
        outputs += done.outputs  # the programs it trains on (results/<run-id>/ gets them)
        inputs += done.inputs  # harvests and data folders: hashed in the marker
        if done.model is None:
            summaries.append(f"{arm.name}: {done.status}")
            continue
        result = finish_training(run_dir, run_dir / arm.folder, arm.folder, time.monotonic() - start, done.info)
        outputs += result.outputs
        summaries.append(result.summary)
        extra = extra or result.extra  # the first (trained) training's sandbox and plan go to the marker
    return StepResult(outputs, "; ".join(summaries), extra=extra, training_inputs=inputs)


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
