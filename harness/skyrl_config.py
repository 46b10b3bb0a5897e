"""The one place that renders SkyRL 0.4.0 override lists (GRPO and SFT) and validates them offline.

    from harness.skyrl_config import render_all, validate_overrides
    r = render_all(cfg, model="Qwen/Qwen2.5-Coder-1.5B-Instruct", run_dir=run_dir)   # rows, plan, budget check
    validate_overrides(r.grpo, r.sft, r.lengths, cfg.operator_max_new_tokens)        # SkyRL's own checks, on a CPU

The cluster-dependent settings come from `harness.skyrl_plan.plan_for` (engines, tensor
parallelism, batch sizes, memory settings, logger). The settings that avoid the known
SkyRL/vLLM failures are marked `# pitfall:` below (and in skyrl_plan) and explained in
TRAINING_PITFALLS.md.

One token budget: GRPO's `max_generate_length` is W8_OPERATOR_MAX_NEW_TOKENS, the search's
answer budget, and `check_budget` refuses a budget below the SFT answer's length.

Validation runs what SkyRL runs at start-up (`SkyRLTrainConfig.from_cli_overrides` +
`validate_cfg`; `SFTConfig.from_cli_overrides` + `validate_sft_cfg` + the SFT trainer's
batch check) plus the checks SkyRL only makes once the cluster is up: the parquet columns,
dataset size vs `train_batch_size`, and the longest real prompt vs `max_prompt_length`
(SkyRL silently drops longer prompts). Token lengths use the policy's own tokenizer when it
is available locally (always on the GPU node); on a CPU machine without it they are
estimated with the embedded SmolLM2 tokenizer times ESTIMATE_MARGIN, and said so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.files import atomic_write_text
from harness.hparams import SKYRL, Hparams, for_config
from harness.models import ModelError, check_model_dir, resolve_model
from harness.skyrl_plan import Plan, SkyRLConfigError, parse_accelerator, plan_for  # noqa: F401 (the public names)
from harness.training_data import ENV_CLASS, TrainingData, check_skyrl_parquet, training_data_for

ESTIMATE_MARGIN = 1.25  # SmolLM2 token counts x this when the policy's tokenizer is not local
PROMPT_ROUND = 128


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _round_up(n: int, step: int = PROMPT_ROUND) -> int:
    return max(step, -(-n // step) * step)


# ---- token lengths --------------------------------------------------------------------------

@dataclass(frozen=True)
class Lengths:
    prompt_max: int  # longest train/eval prompt, chat template with generation prompt
    conversation_max: int  # longest SFT row (prompt + answer)
    answer_max: int  # longest SFT answer (the assistant turn) + its end-of-turn token
    exact: bool  # counted with the policy's own tokenizer
    tokenizer: str


def _load_tokenizer(model: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model, local_files_only=True), True, model
    except Exception:  # not in the local cache: estimate with the embedded model's tokenizer
        path = resolve_model("smollm2-135m")
        return AutoTokenizer.from_pretrained(path), False, "smollm2-135m"


def measure_lengths(model: str, data: TrainingData) -> Lengths:
    """Token lengths of the real rows, as SkyRL's PromptDataset and SFT tokenizer will count them."""
    import json

    import pyarrow.parquet as pq

    tok, exact, name = _load_tokenizer(model)
    prompts = [p for path in (data.train_parquet, data.eval_parquet)
               for p in pq.read_table(path, columns=["prompt"]).column("prompt").to_pylist()]
    longest_prompt = max(len(tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True,
                                                     return_dict=False)) for p in prompts)
    rows = [json.loads(line) for line in (data.sft_dir / "train.jsonl").read_text().splitlines() if line]
    longest_row = max(len(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=False)) for r in rows)
    longest_answer = max(len(tok(r["messages"][-1]["content"], add_special_tokens=False)["input_ids"]) + 1
                         for r in rows)
    scale = 1.0 if exact else ESTIMATE_MARGIN
    return Lengths(math.ceil(longest_prompt * scale), math.ceil(longest_row * scale),
                   math.ceil(longest_answer * scale), exact, name)


def check_budget(budget: int, lengths: Lengths) -> None:
    """One token budget: the search's answers and GRPO's completions (max_generate_length) are both
    W8_OPERATOR_MAX_NEW_TOKENS, and it must hold the SFT answer, or the trained model's answers are cut
    into invalid code in step 04 and the run reports "not shrunk" because of a setting."""
    if lengths.answer_max > budget:
        how = "exact" if lengths.exact else f"estimated: {lengths.tokenizer} tokens x {ESTIMATE_MARGIN}"
        raise SkyRLConfigError(f"W8_OPERATOR_MAX_NEW_TOKENS={budget} < the SFT answer's {lengths.answer_max} tokens "
                               f"({how}): the trained model's answers would be cut in the search; raise it to "
                               f">= {_round_up(lengths.answer_max, 256)}")


# ---- rendering ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Paths:
    """Where a SkyRL run writes: exports and checkpoints (local, or the W8_BUCKET URI), infra logs (local)."""

    export: str
    logs: str

    @property
    def ckpt(self) -> str:
        return f"{self.export}/ckpt"


def paths_for(cfg: Any, run_dir: str | Path, kind: str) -> Paths:
    """<run>/<kind> on one node; <bucket>/<run-id>/<kind> with W8_BUCKET (FSDP rank 0 may be on any node)."""
    local = Path(run_dir) / kind
    export = f"{cfg.bucket.rstrip('/')}/{Path(run_dir).name}/{kind}" if cfg.bucket else str(local)
    return Paths(export=export, logs=str(local / "logs"))


def render_grpo(model: str, plan: Plan, data: TrainingData, lengths: Lengths, paths: Paths, epochs: int,
                budget: int, max_steps: int, run_name: str, hp: Hparams = SKYRL) -> list[str]:
    """The override list of `python -m harness.skyrl_main grpo` (one setting a line, grouped)."""
    steps_per_epoch = max(1, data.n_train // plan.train_batch_size)
    return [
        # data: SkyRL parquet rows (harness.training_data.skyrl_row), prompts = node 0's prompt
        f"data.train_data=['{data.train_parquet}']",
        f"data.val_data=['{data.eval_parquet}']",
        f"environment.env_class={ENV_CLASS}",
        # model and placement: everything colocated on every GPU of every node
        f"trainer.policy.model.path={model}",
        "trainer.strategy=fsdp",
        "trainer.placement.colocate_all=true",
        f"trainer.placement.policy_num_nodes={plan.num_nodes}",
        f"trainer.placement.policy_num_gpus_per_node={plan.accelerator.count}",
        f"trainer.placement.ref_num_nodes={plan.num_nodes}",
        f"trainer.placement.ref_num_gpus_per_node={plan.accelerator.count}",
        # pitfall (colocated_all): policy GPUs must equal engines x TP
        f"generator.inference_engine.num_engines={plan.num_engines}",
        f"generator.inference_engine.tensor_parallel_size={plan.tensor_parallel}",
        "generator.inference_engine.backend=vllm",
        "generator.inference_engine.weight_sync_backend=nccl",
        # pitfall (colocated OOM): vLLM's share of the GPU, eager mode on small GPUs, FSDP offload
        f"generator.inference_engine.gpu_memory_utilization={plan.gpu_memory_utilization}",
        f"generator.inference_engine.enforce_eager={_bool(plan.enforce_eager)}",
        f"trainer.policy.fsdp_config.cpu_offload={_bool(plan.cpu_offload)}",
        f"trainer.ref.fsdp_config.cpu_offload={_bool(plan.cpu_offload)}",
        # pitfall (CUDA-IPC weight sync): expandable segments on the trainer only, never on the engines
        "trainer.use_expandable_segments=true",
        "generator.inference_engine.use_expandable_segments=false",
        # GRPO
        "trainer.algorithm.advantage_estimator=grpo",
        "trainer.algorithm.use_kl_loss=true",
        f"trainer.algorithm.kl_loss_coef={hp.kl_coef}",
        f"trainer.policy.optimizer_config.lr={hp.grpo_lr}",
        f"generator.n_samples_per_prompt={hp.group_size}",
        # one token budget: GRPO's completions are as long as the search's answers (check_budget)
        f"generator.sampling_params.max_generate_length={budget}",
        f"generator.sampling_params.temperature={hp.grpo_temperature}",
        f"trainer.epochs={epochs}",
        *([f"trainer.max_training_steps={max_steps}"] if max_steps else []),
        # pitfall (batch sizes): train % mini == 0, per-GPU mini % micro == 0
        f"trainer.train_batch_size={plan.train_batch_size}",
        f"trainer.policy_mini_batch_size={plan.mini_batch_size}",
        f"trainer.micro_train_batch_size_per_gpu={plan.micro_train}",
        f"trainer.micro_forward_batch_size_per_gpu={plan.micro_forward}",
        # pitfall (silently dropped prompts): max_prompt_length covers the longest real prompt
        f"trainer.max_prompt_length={_round_up(lengths.prompt_max)}",
        f"trainer.eval_batch_size={max(1, data.n_eval)}",
        "trainer.eval_before_train=true",  # also the first sandbox check: a broken sandbox stops here
        f"trainer.eval_interval={hp.eval_interval}",
        # pitfall (no config.json): HF export only with hf_save_interval > 0 -> export_path/global_step_N/policy
        f"trainer.export_path={paths.export}",
        f"trainer.hf_save_interval={min(steps_per_epoch, max_steps) if max_steps else steps_per_epoch}",
        f"trainer.ckpt_path={paths.ckpt}",
        f"trainer.ckpt_interval={hp.ckpt_interval}",
        "trainer.resume_mode=latest",
        # SkyRL's infra logs (vLLM start-up, worker start): a failed step sends their tails home
        f"trainer.log_path={paths.logs}",
        # pitfall (wandb without a key): console logger unless WANDB_API_KEY is set
        f"trainer.logger={plan.logger}",
        "trainer.project_name=w8-biayn",
        f"trainer.run_name={run_name}",
    ]


def render_sft(model: str, plan: Plan, data: TrainingData, lengths: Lengths, paths: Paths, steps: int,
               run_name: str, hp: Hparams = SKYRL) -> list[str]:
    """The override list of `python -m harness.skyrl_main sft` (SkyRL's SFT trainer)."""
    micro = 1 if plan.cpu_offload else hp.sft_batch
    return [
        "strategy=fsdp",
        f"model.path={model}",
        f"train_datasets=['{data.sft_dir}']",  # holds train.jsonl (chat `messages`)
        "train_dataset_splits=[train]",
        "messages_key=messages",
        f"placement.num_nodes={plan.num_nodes}",
        f"placement.num_gpus_per_node={plan.accelerator.count}",
        f"batch_size={plan.total_gpus * micro * 2}",  # divisible by the DP size and the micro batch
        f"micro_train_batch_size_per_gpu={micro}",
        f"num_steps={steps}",
        f"max_length={_round_up(lengths.conversation_max, 256)}",
        f"optimizer_config.lr={hp.sft_lr}",
        f"fsdp_config.cpu_offload={_bool(plan.cpu_offload)}",
        "num_workers=0",
        f"export_path={paths.export}",
        f"hf_save_interval={steps}",  # pitfall (no config.json): export at the last step
        f"ckpt_path={paths.ckpt}",
        f"logger={plan.logger}",
        "project_name=w8-biayn",
        f"run_name={run_name}",
    ]


@dataclass(frozen=True)
class Rendered:
    """Both override lists of one configuration, with what they were derived from."""

    grpo: list[str]
    sft: list[str]
    plan: Plan
    lengths: Lengths
    data: TrainingData


def render_all(cfg: Any, model: str, run_dir: str | Path, data_dir: str | Path,
               lengths: Lengths | None = None, grpo_name: str = "grpo", data: TrainingData | None = None,
               sft_name: str = "sft") -> Rendered:
    """Rows (built if needed), plan, token budget check and both override lists for cfg's knobs.
    `data`: other GRPO rows than the run's zero-shot ones (the refine and self arms' mixed parquet); the
    prompt budget is then measured on them, so the longest refinement prompt sets max_prompt_length.
    grpo_name / sft_name: the output folders (<run>/<name>, or <bucket>/<run-id>/<name>) of the two renders.

    SkyRLConfigError in one line when the plan, the budget or the data cannot work.
    """
    data = data or training_data_for(cfg, data_dir)
    hp = for_config(cfg)  # the backend's table with the run's GRPO knobs
    plan = plan_for(cfg.accelerators, model, data.n_train, cfg.num_nodes, hp)
    lengths = lengths or measure_lengths(model, data)
    check_budget(cfg.operator_max_new_tokens, lengths)
    run_name = Path(run_dir).name or "w8-biayn-r3"
    grpo = render_grpo(model, plan, data, lengths, paths_for(cfg, run_dir, grpo_name), cfg.grpo_epochs,
                       cfg.operator_max_new_tokens, cfg.grpo_max_steps, run_name if grpo_name == "grpo" else
                       f"{run_name}-{grpo_name}", hp) + [f"trainer.seed={cfg.train_seed}"]  # W8_TRAIN_SEED
    sft = render_sft(model, plan, data, lengths, paths_for(cfg, run_dir, sft_name), max(1, cfg.harness_sft_steps),
                     f"{run_name}-{sft_name}", hp) + [f"seed={cfg.train_seed}"]
    return Rendered(grpo, sft, plan, lengths, data)


def write_overrides(path: str | Path, overrides: Sequence[str]) -> Path:
    """An override list as a file, one override a line (what the node ran, readable and diffable)."""
    return atomic_write_text(Path(path), "\n".join(overrides) + "\n")


# ---- offline validation ---------------------------------------------------------------------

def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return re.sub(r" Valid fields are \{.*", "", text)[:400]


def _value(overrides: Sequence[str], key: str) -> str | None:
    for item in overrides:
        k, _, v = item.partition("=")
        if k == key:
            return v
    return None


def validate_grpo(overrides: Sequence[str], lengths: Lengths | None = None, budget: int | None = None) -> Any:
    """SkyRLTrainConfig.from_cli_overrides + validate_cfg + the dataset and budget checks; returns the config."""
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.utils.utils import validate_cfg

    try:
        cfg = SkyRLTrainConfig.from_cli_overrides(list(overrides))
        validate_cfg(cfg)
    except Exception as err:  # SkyRL raises ValueError/AssertionError with its own message
        raise SkyRLConfigError(f"SkyRL rejects the GRPO overrides: {_one_line(err)}") from None
    if cfg.environment.env_class != ENV_CLASS:
        raise SkyRLConfigError(f"environment.env_class={cfg.environment.env_class}, expected {ENV_CLASS}")
    if cfg.trainer.hf_save_interval <= 0:
        raise SkyRLConfigError("trainer.hf_save_interval <= 0: no global_step_N/policy export would be written")
    _check_model_path(cfg.trainer.policy.model.path)
    n_train = sum(check_skyrl_parquet(p) for p in cfg.data.train_data)
    for path in cfg.data.val_data:
        check_skyrl_parquet(path)
    if n_train < cfg.trainer.train_batch_size:
        raise SkyRLConfigError(f"train dataset {', '.join(cfg.data.train_data)} has {n_train} rows < "
                               f"trainer.train_batch_size={cfg.trainer.train_batch_size}")
    if lengths is not None and lengths.prompt_max > cfg.trainer.max_prompt_length:
        raise SkyRLConfigError(f"longest prompt is {lengths.prompt_max} tokens ({lengths.tokenizer}) > "
                               f"trainer.max_prompt_length={cfg.trainer.max_prompt_length}: SkyRL would drop it")
    generate = cfg.generator.sampling_params.max_generate_length
    if budget is not None and generate != budget:
        raise SkyRLConfigError(f"generator.sampling_params.max_generate_length={generate} but the search answers "
                               f"in W8_OPERATOR_MAX_NEW_TOKENS={budget} tokens: GRPO must train the budget the "
                               "trace measures")
    return cfg


def validate_sft(overrides: Sequence[str], lengths: Lengths | None = None) -> Any:
    """SFTConfig.from_cli_overrides + validate_sft_cfg + the SFT trainer's batch check + the data."""
    from types import SimpleNamespace

    from skyrl.train.config.sft_config import SFTConfig, build_skyrl_config_for_sft, validate_sft_cfg
    from skyrl.train.sft_trainer import SFTTrainer

    try:
        cfg = SFTConfig.from_cli_overrides(list(overrides))
        validate_sft_cfg(cfg)
        build_skyrl_config_for_sft(cfg)
        probe = SimpleNamespace(sft_cfg=cfg)
        probe._dp_size = lambda: SFTTrainer._dp_size(probe)
        SFTTrainer._validate_batch_parallelism(probe)  # what SFTTrainer.setup() checks on the node
    except Exception as err:
        raise SkyRLConfigError(f"SkyRL rejects the SFT overrides: {_one_line(err)}") from None
    if cfg.hf_save_interval <= 0:
        raise SkyRLConfigError("hf_save_interval <= 0: SFT would write no global_step_N/policy export")
    _check_model_path(cfg.model.path)
    for source in cfg.train_datasets:
        rows = Path(source) / "train.jsonl"
        if Path(source).exists() and not rows.is_file():
            raise SkyRLConfigError(f"SFT dataset {source} has no train.jsonl (split train)")
    if lengths is not None and cfg.max_length is not None and lengths.conversation_max > cfg.max_length:
        raise SkyRLConfigError(f"longest SFT row is {lengths.conversation_max} tokens > max_length={cfg.max_length}")
    return cfg


def _check_model_path(path: str | None) -> None:
    if path and (path.startswith(("/", ".", "~")) or Path(path).exists()):
        try:
            check_model_dir(Path(path).expanduser())
        except ModelError as err:
            raise SkyRLConfigError(str(err)) from None


def validate_overrides(grpo: Sequence[str], sft: Sequence[str] | None = None, lengths: Lengths | None = None,
                       budget: int | None = None) -> dict:
    """Both lists through SkyRL's config classes and start-up checks; a short summary of the result."""
    cfg = validate_grpo(grpo, lengths, budget)
    summary = {"nodes": cfg.trainer.placement.policy_num_nodes, "gpus": cfg.trainer.placement.policy_num_gpus_per_node,
               "engines": cfg.generator.inference_engine.num_engines,
               "tp": cfg.generator.inference_engine.tensor_parallel_size,
               "train_batch_size": cfg.trainer.train_batch_size, "mini_batch": cfg.trainer.policy_mini_batch_size,
               "micro": cfg.trainer.micro_train_batch_size_per_gpu, "max_prompt_length": cfg.trainer.max_prompt_length,
               "logger": cfg.trainer.logger, "max_generate_length": cfg.generator.sampling_params.max_generate_length}
    if sft is not None:
        s = validate_sft(sft, lengths)
        summary.update(sft_batch=s.batch_size, sft_steps=s.num_steps, sft_max_length=s.max_length)
    return summary
