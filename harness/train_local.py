"""The embedded CPU trainer: TRL SFT (oracle warm-start) and TRL GRPO on the operator model.

    from harness.train_local import train_sft, train_grpo, grpo_steps
    data = training_data_for(cfg, run_dir / "data")          # harness.training_data
    sft = train_sft(resolve_model("smollm2-135m"), run_dir / "sft", data, steps=16, hp=LOCAL, report_to="none",
                    precision="auto")             # W8_TRAIN_PRECISION: bf16 autocast where the CPU has it
    grpo = train_grpo(str(sft.policy_dir), run_dir / "grpo", data, grpo_steps(16, 1, 1), 448, LOCAL,
                      report_to="tensorboard",    # W8_REPORT_TO: TensorBoard files in run_dir/grpo/logs
                      sampler="llamacpp")         # W8_GRPO_SAMPLER: each group sampled by llama.cpp (grpo_rollout)

Training writes `<out>/global_step_N/policy` HF exports (config.json, weights,
tokenizer), the same layout SkyRL's `hf_save_interval` produces on the GPU node, plus
`<out>/metrics.json` and `<out>/metrics.png`. Exports are written to a temp dir and
renamed, so an interrupted run never leaves a half export and never touches earlier ones;
a rerun resumes from the newest complete export (harness.exports).

GRPO's reward function is `HarnessLegalityEnv.step` (harness/env.py) on each row's
`reward_spec`/`extra_info`, the very path SkyRL's generator takes on the GPU node.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from harness.dynamic_sampling import DynamicSampling, with_dynamic_sampling
from harness.env import HarnessLegalityEnv
from harness.exports import export_policy, newest_export_step, quiet_transformers
from harness.hparams import Hparams
from harness.metrics import write_metrics
from harness.files import shown_path
from harness.grpo_rollout import rollout_for
from harness.models import check_model_dir
from harness.sandbox_protocol import SandboxError
from harness.training_data import PROMPT_KINDS, TrainingData, check_skyrl_parquet, row_prompt_kind

@dataclass
class TrainResult:
    """What a training call produced: the newest export, its step, the metrics file."""

    policy_dir: Path
    step: int
    metrics_path: Path
    skipped: bool = False  # the requested steps were already exported by an earlier run


# ---- SFT ---------------------------------------------------------------------------------

# Precision (W8_TRAIN_PRECISION, resolve_precision below): "bf16" is autocast, not a bf16 model. The model is
# loaded in float32 and stays so (weights, gradients, AdamW state, exports); TRL's config gets bf16=True, and
# accelerate wraps the model's forward in torch.autocast("cpu"/"cuda", bfloat16), so the matmuls of the forward
# and backward passes, and of GRPO's generate (which calls that forward), run in bf16. On a CPU with AVX512-BF16
# or AMX that is about twice as fast as float32; on a CPU without either a bf16 matmul takes a slow reference
# path (~0.3 GFLOP/s against ~80 in float32 on a 2-core machine without it), so "auto" picks float32 there.
# Gradient checkpointing (hp.gradient_checkpointing unless the caller says) recomputes activations in the
# backward pass instead of keeping them: less peak memory for more compute. LOCAL has it off: with bf16 autocast
# a step is faster without it, and the CPU's memory holds a 135M model's activations
# (scripts/bench/bench_train_speed.py and bench_memory.py measure both; TRL turns it off while GRPO generates).
# The hyperparameters are harness.hparams.LOCAL, passed in by the caller.
PRECISIONS = ("auto", "float32", "bf16")


def cpu_has_bf16(cpuinfo: str) -> bool:
    """Whether /proc/cpuinfo's text lists a native bf16 matmul: the flag avx512_bf16 or amx_bf16."""
    flags = {word for line in cpuinfo.splitlines() if line.startswith("flags") for word in line.split()}
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve_precision(name: str, cpuinfo: str | None = None, cuda: bool | None = None) -> str:
    """W8_TRAIN_PRECISION -> "bf16" | "float32". auto: bf16 on CUDA when torch says it supports bf16, else on a
    CPU whose flags (`cpuinfo`, default /proc/cpuinfo's text) list avx512_bf16 or amx_bf16; float32 otherwise.
    `cuda` defaults to whether a GPU is there (the trainer's device, on_cpu)."""
    if name not in PRECISIONS:
        raise ValueError(f"precision {name!r}: expected one of {', '.join(PRECISIONS)}")
    if name != "auto":
        return name
    if cuda if cuda is not None else not on_cpu():
        import torch

        return "bf16" if torch.cuda.is_bf16_supported() else "float32"
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    return "bf16" if cpu_has_bf16(cpuinfo) else "float32"


def _load(model_path: str, seed: int):
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()  # no load/save bars or repeated advice: the trainer's one bar is the progress
    datasets.disable_progress_bars()  # "Tokenizing train dataset" bars of a few rows
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    return model, tokenizer


def on_cpu() -> bool:
    """The embedded trainer trains on CUDA when a GPU is there (scripts/gpu_checks.sh), else on the CPU."""
    import torch

    return not torch.cuda.is_available()


def count_generate_calls(model) -> dict[str, list]:
    """Wrap model.generate so that every call appends its batch size (rows of input_ids) to ["sizes"] and its
    wall seconds to ["seconds"]: what GRPO's own sampling costs, apart from the backward pass."""
    calls: dict[str, list] = {"sizes": [], "seconds": []}
    generate = model.generate

    def counted(*args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        calls["sizes"].append(int(ids.shape[0]) if ids is not None else 0)
        start = time.monotonic()
        try:
            return generate(*args, **kwargs)
        finally:
            calls["seconds"].append(time.monotonic() - start)

    model.generate = counted
    return calls


def generate_without_autocast(model) -> None:
    """GRPO's sampling in float32 when training autocasts to bf16: accelerate wraps the model's forward in
    torch.autocast (keeping the plain one as `_original_forward`), and generate calls that forward once per new
    token, casting every weight to bf16 again each time. On the 2-core test machine (under load) 4 prompts x 64
    sampled tokens took 69-70 s under autocast against 58-65 s in float32. While generate runs, the plain forward
    is put back."""
    generate = model.generate

    def plain(*args, **kwargs):
        wrapped, original = model.__dict__.get("forward"), model.__dict__.get("_original_forward")
        if wrapped is not None and original is not None:
            model.forward = original
        try:
            return generate(*args, **kwargs)
        finally:
            if wrapped is not None and original is not None:
                model.forward = wrapped

    model.generate = plain


def _start(model_path: str, out_dir: Path, steps: int) -> tuple[str, int, TrainResult | None]:
    """Resume point: (model to start from, steps already done, result if nothing is left to do)."""
    done = newest_export_step(out_dir)
    if done and done[0] >= steps:
        return str(done[1]), done[0], TrainResult(done[1], done[0], Path(out_dir) / "metrics.json", skipped=True)
    if done:
        return str(done[1]), done[0], None
    return model_path, 0, None


def _prior_steps(out_dir: Path) -> list[dict[str, Any]]:
    path = Path(out_dir) / "metrics.json"
    return json.loads(path.read_text()).get("steps", []) if path.is_file() else []


@contextmanager
def scratch_dir(out_dir: Path) -> Iterator[Path]:
    """The trainer's scratch folder, inside the training's own folder: emptied at start and removed on any
    exit Python sees (a kill -9 leaves it, and the next run of the step empties it), never in the system's
    temp dir, where a killed run used to leave w8-grpo-* folders behind."""
    path = Path(out_dir) / ".scratch"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# Where an integration of W8_REPORT_TO writes, when the user has not said: the training's own folder, since the
# trainer's output_dir is the scratch folder above and goes when training ends.
LOG_DIR_ENV = {"tensorboard": "TENSORBOARD_LOGGING_DIR", "wandb": "WANDB_DIR"}


@contextmanager
def training_logs(report_to: str, out_dir: Path) -> Iterator[list[str]]:
    """TRL's report_to for W8_REPORT_TO ([] for 'none', which the config checked is installed otherwise), with
    tensorboard's and wandb's files in <out_dir>/logs unless their own env var names a folder."""
    if report_to == "none":
        yield []
        return
    name = LOG_DIR_ENV.get(report_to)
    if name is None or os.environ.get(name):
        yield [report_to]
        return
    os.environ[name] = str(Path(out_dir) / "logs")
    try:
        yield [report_to]
    finally:
        os.environ.pop(name, None)


def progress_callback(name: str, total: int, done: int, keys: tuple[str, ...]):
    """A TrainerCallback drawing one tqdm bar: step k/n, the latest of `keys` from the logs, time left."""
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        bar = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.bar = tqdm(total=total, initial=done, desc=name, unit="step", dynamic_ncols=True, mininterval=1.0)

        def on_log(self, args, state, control, logs=None, **kwargs):
            shown = {k: f"{logs[k]:.3g}" for k in keys if isinstance((logs or {}).get(k), (int, float))}
            if self.bar is not None and shown:
                self.bar.set_postfix(shown, refresh=False)

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.update(1)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()

    return Progress()


def quiet(trainer) -> None:
    """Our progress bar is the only per-step output: drop transformers' printer of every step's log dict (its
    numbers go to metrics.json)."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)


def train_sft(model_path: str, out_dir: str | Path, data: TrainingData, steps: int, hp: Hparams,
              seed: int = 0, gradient_checkpointing: bool | None = None, *, report_to: str,
              precision: str = "auto") -> TrainResult:
    """TRL SFTTrainer on the rows' reference answers (loss on the answer only) -> global_step_<steps>/policy.

    `data` comes from harness.training_data.training_data_for (the run's knobs); hp from
    harness.hparams. Resumable: an export with N >= steps means done; a smaller N restarts from that export's
    weights for the remaining steps (the optimizer state is not kept between runs). report_to is W8_REPORT_TO,
    precision W8_TRAIN_PRECISION (resolve_precision); gradient_checkpointing None means hp's.
    """
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    out_dir = Path(out_dir)
    check_model_dir(Path(model_path)) if Path(model_path).exists() else None
    start_path, done, finished = _start(model_path, out_dir, steps)
    if finished:
        return finished
    rows = [json.loads(line) for line in (data.sft_dir / "train.jsonl").read_text().splitlines() if line]
    dataset = Dataset.from_list([{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in rows])
    precision = resolve_precision(precision)
    checkpointing = hp.gradient_checkpointing if gradient_checkpointing is None else gradient_checkpointing
    model, tokenizer = _load(start_path, seed)
    log: list[dict[str, Any]] = _prior_steps(out_dir) if done else []
    clock = {"t": time.monotonic()}

    class StepLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                now = time.monotonic()
                log.append({"step": done + state.global_step, "loss": float(logs["loss"]),
                            "step_time_s": round(now - clock["t"], 2)})
                clock["t"] = now

    with scratch_dir(out_dir) as scratch, training_logs(report_to, out_dir) as reporters:
        args = SFTConfig(output_dir=scratch, max_steps=steps - done, per_device_train_batch_size=hp.sft_batch,
                         learning_rate=hp.sft_lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                         logging_steps=1, save_strategy="no", report_to=reporters, use_cpu=on_cpu(), seed=seed,
                         max_length=None, completion_only_loss=True, dataloader_num_workers=0,
                         gradient_checkpointing=checkpointing, disable_tqdm=True, bf16=precision == "bf16",
                         fp16=False)
        trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                             callbacks=[StepLog(), progress_callback("SFT", steps, done, ("loss",))])
        quiet(trainer)
        trainer.train()
    policy = export_policy(trainer.model, tokenizer, out_dir, steps)
    metrics = write_metrics(out_dir, "sft", log, {"model": shown_path(model_path, Path(out_dir).parent), "steps": steps,
                                                   "lr": hp.sft_lr, "batch_size": hp.sft_batch,
                                                   "train_rows": len(rows), "precision": precision,
                                                   "gradient_checkpointing": checkpointing})
    return TrainResult(policy, steps, metrics)


# ---- GRPO --------------------------------------------------------------------------------

def _warn_if_answer_is_cut(tokenizer, data: TrainingData, max_completion_length: int) -> None:
    """A completion budget below the SFT answer's length truncates every answer into invalid code."""
    first = json.loads((data.sft_dir / "train.jsonl").read_text().splitlines()[0])
    n = len(tokenizer(first["messages"][-1]["content"])["input_ids"]) + 1
    if n > max_completion_length:
        print(f"warning: the SFT answer is {n} tokens > max_completion_length={max_completion_length}: "
              "completions that follow it are cut and score 0", flush=True)


class EnvReward:
    """TRL reward function: HarnessLegalityEnv.step on each completion (the SkyRL env's code path).

    TRL passes the dataset's other columns as lists; each row's `reward_spec` and `extra_info`
    become the env's `extras`, nested exactly as SkyRL nests them.
    """

    __name__ = "harness_legality"

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0
        self.kinds = dict.fromkeys(PROMPT_KINDS, 0)  # samples scored per prompt kind (zero_shot, refine), cumulative
        self.last: list[float] = []  # the latest call's rewards (one group): what dynamic sampling looks at

    def __call__(self, prompts, completions, reward_spec, extra_info, log_metric=None, **kwargs):
        start = time.monotonic()
        rewards, valid, bacc, failed, reason = [], [], [], 0, ""
        for completion, spec, info in zip(completions, reward_spec, extra_info):
            self.kinds[row_prompt_kind({"extra_info": info})] += 1
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            env = HarnessLegalityEnv(extras={"reward_spec": spec, "extra_info": info})
            out = env.step(text)
            rewards.append(float(out["reward"]))
            valid.append(out["metadata"]["valid"])
            bacc.append(out["metadata"]["balanced_accuracy"])
            if out["metadata"]["sandbox_failed"]:
                failed, reason = failed + 1, reason or str(out["metadata"].get("reason", ""))
        if rewards and failed == len(rewards):  # the rule of skyrl_main.TrainingGuard: no training on sandbox zeros
            raise SandboxError(f"the sandbox failed on all {failed} programs of a GRPO batch ({reason[:160]}): "
                               "stopping instead of training on zero rewards")
        self.seconds += time.monotonic() - start
        self.calls += len(rewards)
        self.last = list(rewards)
        if log_metric is not None:
            log_metric("valid_rate", sum(valid) / len(valid))
            log_metric("balanced_accuracy", sum(bacc) / len(bacc))
            log_metric("reward_seconds", time.monotonic() - start)
        return rewards


def grpo_steps(train_count: int, epochs: int, max_steps: int) -> int:
    """Local GRPO steps: one train task each, epochs x train_count, capped by W8_GRPO_MAX_STEPS (0: none)."""
    return min(max_steps, epochs * train_count) if max_steps else epochs * train_count


def train_grpo(model_path: str, out_dir: str | Path, data: TrainingData, steps: int, max_completion_length: int,
               hp: Hparams, seed: int = 0, gradient_checkpointing: bool | None = None, *, report_to: str,
               precision: str = "auto", dynamic_tries: int = 0, sampler: str = "hf") -> TrainResult:
    """TRL GRPOTrainer on CPU, reward = HarnessLegalityEnv.step -> global_step_N/policy + metrics.

    One prompt (train task) and hp.group_size sampled completions per step (3 to 3.5 minutes
    each on 2 CPU cores with 448-token completions); max_completion_length is the run's one
    token budget (W8_OPERATOR_MAX_NEW_TOKENS). Resumable like train_sft; report_to, precision and
    gradient_checkpointing as there. dynamic_tries (W8_GRPO_DYNAMIC_TRIES): a group whose rewards are all equal
    is replaced by another prompt's group, at most that many times a step (harness.dynamic_sampling); each
    step's log then holds every group it sampled with its rewards, and the share of flat ones. sampler
    (W8_GRPO_SAMPLER): "hf" samples with the trainer's generate, "llamacpp" with llama.cpp workers on an F16 GGUF
    of the current weights (harness.grpo_rollout; each step row then has export_time_s).
    """
    from datasets import load_dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    out_dir = Path(out_dir)
    start_path, done, finished = _start(model_path, out_dir, steps)
    if finished:
        return finished
    rollout = rollout_for(sampler, seed, done)  # None for "hf"; a bad name or no llama.cpp stops here
    check_skyrl_parquet(data.train_parquet)
    dataset = load_dataset("parquet", data_files=str(data.train_parquet), split="train")
    precision = resolve_precision(precision)
    checkpointing = hp.gradient_checkpointing if gradient_checkpointing is None else gradient_checkpointing
    model, tokenizer = _load(start_path, seed)
    if precision == "bf16":
        generate_without_autocast(model)
    generate_batches = rollout.record if rollout else count_generate_calls(model)  # the same fields either way
    _warn_if_answer_is_cut(tokenizer, data, max_completion_length)
    reward = EnvReward()
    sampling = DynamicSampling(list(dataset), dynamic_tries, seed)
    log: list[dict[str, Any]] = _prior_steps(out_dir) if done else []
    clock = {"t": time.monotonic(), "reward_s": 0.0, "kinds": dict(reward.kinds), "generate_s": 0.0, "export_s": 0.0}

    class StepLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "reward" not in logs:
                return
            now = time.monotonic()
            scoring = reward.seconds - clock["reward_s"]
            sampled = sum(generate_batches["seconds"]) - clock["generate_s"]  # hf: generate; llamacpp: the workers
            exported = sum(generate_batches.get("export_seconds", [])) - clock["export_s"]
            groups = sampling.take_step()  # every group this step sampled (dynamic sampling), with its rewards
            # the step's prompts by kind: its samples of each kind / the group (every sample of a group shares a row)
            prompts = {f"prompts_{kind}": (reward.kinds[kind] - clock["kinds"][kind]) / hp.group_size
                       for kind in PROMPT_KINDS}
            log.append({"step": done + state.global_step, "reward_mean": logs.get("reward"),
                        "reward_std": logs.get("reward_std"), "valid_rate": logs.get("valid_rate"),
                        "balanced_accuracy": logs.get("balanced_accuracy"), "kl": logs.get("kl"),
                        "loss": logs.get("loss"), "completion_length": logs.get("completions/mean_length"),
                        "zero_variance_groups": logs.get("frac_reward_zero_std"),
                        "step_time_s": round(now - clock["t"], 2), "reward_time_s": round(scoring, 3),
                        "generate_time_s": round(sampled, 2), **prompts, **groups,
                        **({"export_time_s": round(exported, 2)} if rollout else {}),
                        "generations": groups["groups_sampled"] * hp.group_size})
            clock.update(t=now, reward_s=reward.seconds, kinds=dict(reward.kinds),
                         generate_s=sum(generate_batches["seconds"]), export_s=exported + clock["export_s"])

    # One completion per forward/backward (micro batch 1, accumulated over the group): the logits of a
    # whole group (group x ~1.8k tokens x 49k vocab in float32) were most of a 12 GB peak; one optimizer
    # step per group, as before.
    with scratch_dir(out_dir) as scratch, training_logs(report_to, out_dir) as reporters, rollout or nullcontext():
        args = GRPOConfig(output_dir=scratch, max_steps=steps - done, per_device_train_batch_size=1,
                          gradient_accumulation_steps=hp.group_size,
                          num_generations=hp.group_size, max_completion_length=max_completion_length,
                          learning_rate=hp.grpo_lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                          beta=hp.kl_coef, temperature=hp.grpo_temperature, logging_steps=1, save_strategy="no",
                          report_to=reporters, use_cpu=on_cpu(), seed=seed, shuffle_dataset=True,
                          dataloader_num_workers=0, disable_tqdm=True, remove_unused_columns=False,
                          gradient_checkpointing=checkpointing, bf16=precision == "bf16", fp16=False)
        trainer_class = with_dynamic_sampling(GRPOTrainer, sampling, lambda: reward.last)
        trainer = trainer_class(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                              processing_class=tokenizer, rollout_func=rollout,
                              callbacks=[StepLog(), progress_callback("GRPO", steps, done, ("reward", "reward_std"))])
        quiet(trainer)
        trainer.train()
    policy = export_policy(trainer.model, tokenizer, out_dir, steps)
    meta = {"model": shown_path(model_path, Path(out_dir).parent), "steps": steps, "group_size": hp.group_size, "lr": hp.grpo_lr,
            "beta": hp.kl_coef, "temperature": hp.grpo_temperature, "max_completion_length": max_completion_length,
            "train_rows": data.n_train, "reward_calls": reward.calls, "precision": precision,
            "dynamic_tries": dynamic_tries, "sampler": sampler, **(rollout.summary() if rollout else {}),
            "gradient_checkpointing": checkpointing,
            # TRL generates a step's whole generation batch (per_device 1 x accumulation = the group) in one
            # generate call: these record it, per call, so a run shows its groups were generated batched
            "generate_calls": len(generate_batches["sizes"]),
            "generate_batch_sizes": sorted(set(generate_batches["sizes"])),
            "generate_seconds": round(sum(generate_batches["seconds"]), 2), "reward_seconds": round(reward.seconds, 2)}
    return TrainResult(policy, steps, write_metrics(out_dir, "grpo", log, meta))
