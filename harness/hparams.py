"""The trainers' hyperparameters, both backends side by side, with the reason for each value.

    from harness.hparams import for_config
    hp = for_config(cfg)                 # LOCAL (TRL on CPU) or SKYRL (the GPU node), GRPO knobs applied
    hp.grpo_lr, hp.group_size, hp.grpo_temperature

Knobs (harness/config.py) are what a user varies per run; these are the settings a run
is built around. The GRPO completion length is not here: it is the knob
W8_OPERATOR_MAX_NEW_TOKENS, the one token budget of the search and of GRPO. Every
run_config.json carries the record of the backend it used (`hparams_record`), and
summary.md shows it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Hparams:
    sft_lr: float
    sft_batch: int  # rows per SFT step (SkyRL: per GPU micro batch; the global batch follows the GPUs)
    grpo_lr: float
    group_size: int  # GRPO samples per prompt
    grpo_temperature: float  # GRPO sampling temperature (the searches sample at W8_OPERATOR_TEMPERATURE)
    kl_coef: float  # 0 = no KL term (and no reference model)
    eval_interval: int  # GRPO steps between evals on the held-out eval rows; 0 = none
    ckpt_interval: int  # GRPO steps between resumable checkpoints; 0 = export at the end only
    gradient_checkpointing: bool  # recompute activations in the backward pass instead of keeping them


# CPU, SmolLM2-135M, TRL, bf16 autocast where the CPU has it (W8_TRAIN_PRECISION). A step must fit minutes on 2 cores.
LOCAL = Hparams(
    sft_lr=1e-4,  # full fine-tune, AdamW, constant: moves a 135M model within 16 steps (16 rows)
    sft_batch=1,  # one ~1.3k-token row per step: ~18 s a step on 2 cores
    grpo_lr=2e-6,  # one or two steps: a real update that does not undo the SFT warm-start
    group_size=4,  # 4 completions of <= 448 tokens: ~100 s of generation per step
    grpo_temperature=0.5,  # measured after SFT: at 1.0 or 0.7, 2-4 of 4 samples were syntax errors (no signal);
                      # at 0.5 all 4 were valid with rewards 0.6-0.93
    kl_coef=0.0,  # TRL then keeps no reference model: one forward pass less per step
    eval_interval=0,
    ckpt_interval=0,
    gradient_checkpointing=False,  # measured on 2 cores with AVX512-BF16, raw torch, one 1500-token row, forward +
                                   # backward + AdamW: bf16 autocast 6.8 s without it, 7.8 s with; float32 13-15 s
                                   # without, 13 s with. The CPU's memory holds the activations: bench_memory.py, off,
                                   # SFT 4.2 GB, GRPO (group 4) 5.3 GB peak. scripts/bench/bench_train_speed.py times
                                   # it through TRL (docs/measurements.md)
)

# GPU node, Qwen2.5-Coder-1.5B, SkyRL (FSDP + vLLM), bf16.
SKYRL = Hparams(
    sft_lr=1e-5,  # a 1.5B model over 20 steps of 16-128 rows
    sft_batch=2,  # micro batch per GPU (1 when FSDP offloads to CPU)
    grpo_lr=1e-6,  # SkyRL's own GRPO examples (gsm8k, multiply) use 1e-6 for 1.5B models
    group_size=8,  # 8 samples per prompt: a group rarely has zero variance on this task
    grpo_temperature=1.0,  # on-policy sampling at the model's own distribution, as SkyRL's examples
    kl_coef=0.001,  # a light KL loss against the reference, SkyRL's default coefficient
    eval_interval=5,  # the 16 held-out eval rows every 5 steps (and before training: the first sandbox check)
    ckpt_interval=10,  # resumable FSDP checkpoints every 10 steps (a preempted run resumes from the latest)
    gradient_checkpointing=True,  # SkyRL's default on the GPU node: a 1.5B model's activations against GPU memory
)


# Knobs (harness/config.py) that override one value of the backend's table when set (not 'auto').
KNOB_OVERRIDES = {"grpo_group_size": "group_size", "grpo_lr": "grpo_lr", "grpo_temperature": "grpo_temperature",
                  "grpo_kl_coef": "kl_coef"}


def for_backend(backend: str) -> Hparams:
    return SKYRL if backend == "skyrl" else LOCAL


def for_config(cfg: Any) -> Hparams:
    """The run's hyperparameters: its backend's table above, with every GRPO knob the run set."""
    changes = {field: getattr(cfg, knob) for knob, field in KNOB_OVERRIDES.items() if getattr(cfg, knob) is not None}
    return replace(for_backend(cfg.backend), **changes)


def hparams_record(cfg: Any) -> dict:
    """What run_config.json keeps: the values the run trains with (the reasons are in this file), and which
    of them a knob set."""
    hp = for_config(cfg)
    set_by = sorted(field for knob, field in KNOB_OVERRIDES.items() if getattr(cfg, knob) is not None)
    return {"backend": cfg.backend, **asdict(hp), "set_by_knob": set_by}
