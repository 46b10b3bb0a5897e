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
With W8_REFINE_ARM=1 / W8_SELF_ARM=1 it also trains those arms (harness.arm_training): their harvests'
wall_s is real time (worker_s adds up the searches that ran side by side), the programs each trains
on go to <run>/refine_programs.jsonl and <run>/self_programs.jsonl (text, source, reward; copied to
results/<run-id>/), and their harvest records and data folders are hashed in the step's marker.
Ends with one line: the export and the wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.arm_training import (arm_training_inputs, harvest, harvest_summary, median_reward,  # noqa: E402
                                   mixed_training_data, programs_file, self_round_rows, write_self_data,
                                   write_training_programs)
from harness.exports import newest_export  # noqa: E402
from harness.harvest import CONSTANT_BALANCED_ACCURACY  # noqa: E402
from harness.hparams import for_config  # noqa: E402
from harness.models import ModelError, resolve_model  # noqa: E402
from harness.pipeline import StepError, StepResult, finish_training, run_step  # noqa: E402
from harness.sandbox import SandboxError, sandbox_provenance  # noqa: E402
from harness.training_data import TrainingData, training_data_for  # noqa: E402

STEP = "03_grpo"


def start_model(cfg, run_dir: Path) -> str:
    sft = newest_export(run_dir / "sft")
    return str(sft) if sft is not None else cfg.harness_model


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
                   for_config(cfg))
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


def rft(cfg, base: str, run_dir: Path, name: str, data: TrainingData) -> str:
    """One rejection-sampling fine-tune of the self arm: SFT of the BASE model on its kept programs."""
    if cfg.backend == "local":
        from harness.train_local import train_sft
        return str(train_sft(local_model(base), run_dir / name, data, cfg.self_sft_steps, for_config(cfg)).policy_dir)
    # SkyRL's SFT entrypoint: W8_SELF_SFT_STEPS steps on the round's rows (its prompt lengths are measured on
    # the run's own parquets, which the round's TrainingData points at)
    train_skyrl(cfg.replace(harness_sft_steps=cfg.self_sft_steps), base, run_dir, name, data, entry="sft")
    return str(newest_export(run_dir / name))


def trainings(cfg, run_dir: Path) -> list[tuple[str, str]]:
    """(output folder, start model): grpo from the SFT export (or the base model without SFT), and grpo_only
    from the base model when W8_GRPO_ONLY_ARM=1 and SFT ran (without SFT the two would be the same run)."""
    sft = newest_export(run_dir / "sft")
    runs = [("grpo", str(sft) if sft is not None else cfg.harness_model)]
    if cfg.grpo_only_arm and sft is not None:
        runs.append(("grpo_only", cfg.harness_model))
    return runs


def train_refine(cfg, run_dir: Path) -> tuple[str, dict]:
    """The refine arm: the SFT export harvests train pages, then GRPO from it on the mixed prompts."""
    sft = newest_export(run_dir / "sft")
    if sft is None:
        raise StepError("the refine arm starts from the SFT warm-start: no export under <run>/sft (run step 02)")
    found = harvest(cfg, run_dir, "refine", str(sft))
    data, mix, programs = mixed_training_data(cfg, run_dir, "refine", training_data_for(cfg, run_dir / "data"),
                                              [found])
    write_training_programs(run_dir, "refine", programs)
    print(f"[{STEP}] refine: {mix_line(mix)}; its programs -> {programs_file('refine')}", flush=True)
    start = time.monotonic()
    info = train(cfg, str(sft), run_dir, "refine", data)
    return str(sft), {**info, "mix": mix, "harvests": [harvest_summary(found)],
                      "trainer_wall_s": round(time.monotonic() - start, 1)}


def mix_line(mix: dict) -> str:
    return (f"{mix.get('n_refine', '?')} refinement + {mix.get('n_zero_shot', '?')} zero-shot GRPO rows "
            f"(share {mix['refine_share']}, pool of {mix['refinement_pool']} refinement requests)")


def train_self(cfg, run_dir: Path) -> tuple[str | None, dict]:
    """The self arm (no answer key): rounds of harvest -> keep the best -> SFT from the base, then a harvest by
    the last model and GRPO from it on the mixed prompts. (None, info) when no round kept a program."""
    base = cfg.harness_model
    current = harvest(cfg, run_dir, "self-r1", base)
    floor = median_reward(current)
    model, rounds, programs, harvests = base, [], [], [harvest_summary(current)]
    trainer_s = 0.0  # the fine-tunes' and GRPO's wall time, without the harvests (their own wall_s)
    for k in range(1, cfg.self_rounds + 1):
        data, kept = self_round_rows(cfg, run_dir, k, current, floor)
        rounds.append({"round": k, "harvest": current["name"], "kept": len(kept),
                       "model": str(Path(model).name if model != base else base)})
        if data is None:
            print(f"[{STEP}] self round {k}: the harvest kept no program (valid {current['valid_nodes']} of "
                  f"{current['nodes']} nodes, best reward {current['best_reward']}, floor {floor:.3f})", flush=True)
            break
        programs += kept
        start = time.monotonic()
        model = rft(cfg, base, run_dir, f"self_rft{k}", data)
        trainer_s += time.monotonic() - start
        current = harvest(cfg, run_dir, f"self-r{k + 1}", model)
        harvests.append(harvest_summary(current))
    if model == base:
        write_self_data(run_dir, "no training data", rounds, programs, floor, harvests)
        print(f"[{STEP}] self: no training data: no harvest program above the base model's median reward "
              f"{floor:.3f} that beats a constant answer (balanced accuracy above {CONSTANT_BALANCED_ACCURACY}); "
              "the self arm is not trained", flush=True)
        return None, {"status": "no training data", "rounds": rounds, "harvests": harvests}
    data, mix, refinements = mixed_training_data(cfg, run_dir, "self", training_data_for(cfg, run_dir / "data"),
                                                 [current], forbid_oracle=True)
    programs += [{"round": "grpo", **program} for program in refinements]
    write_self_data(run_dir, "trained", rounds, programs, floor, harvests)
    print(f"[{STEP}] self: {mix_line(mix)}", flush=True)
    start = time.monotonic()
    info = train(cfg, model, run_dir, "self", data)
    return model, {**info, "mix": mix, "rounds": rounds, "harvests": harvests,
                   "trainer_wall_s": round(trainer_s + time.monotonic() - start, 1)}


def body(cfg, run_dir: Path, args) -> StepResult:
    outputs, summaries, extra, inputs = [], [], {}, []
    for name, model in trainings(cfg, run_dir):
        print(f"[{STEP}] {name}: start model {model}", flush=True)
        start = time.monotonic()
        info = train(cfg, model, run_dir, name)
        result = finish_training(run_dir, run_dir / name, name, time.monotonic() - start, info)
        outputs += result.outputs
        summaries.append(result.summary)
        extra = extra or result.extra  # the main (grpo) training's sandbox and plan go to the marker
    for name, enabled, run in (("refine", cfg.refine_arm, train_refine), ("self", cfg.self_arm, train_self)):
        if not enabled:
            continue
        print(f"[{STEP}] {name} arm", flush=True)
        start = time.monotonic()
        model, info = run(cfg, run_dir)
        outputs.append(programs_file(name))  # the programs it trains on (results/<run-id>/ gets them)
        inputs += arm_training_inputs(run_dir, name)  # harvests and data folders: hashed in the marker
        if name == "self":
            outputs.append("self_data.json")
        if model is None:
            summaries.append(f"{name}: {info['status']}")
            continue
        info["start_model"] = model
        result = finish_training(run_dir, run_dir / name, name, time.monotonic() - start, info)
        outputs += result.outputs
        summaries.append(result.summary)
    return StepResult(outputs, "; ".join(summaries), extra=extra, training_inputs=inputs)


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
