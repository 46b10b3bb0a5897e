"""The cluster-dependent part of a SkyRL run: which GPUs, how many engines, which batch sizes.

    from harness.skyrl_plan import plan_for
    plan = plan_for("A100:8", "Qwen/Qwen2.5-Coder-1.5B-Instruct", n_train=512, num_nodes=1)

`plan_for(accelerator, model, n_train, num_nodes)` derives everything that depends on the
cluster from the SkyPilot accelerator string (`A100:8`, `H100:8`, `L4:1`, ...) and the node
count: vLLM engines and tensor parallelism over all GPUs of all nodes, batch sizes that
divide (train batch / mini batch / micro batch per GPU with colocated policy, ref and
engines), memory settings, and the logger (`console` unless WANDB_API_KEY is set).
harness/skyrl_config.py renders the override lists from a Plan.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness.hparams import SKYRL, Hparams

GPU_MEMORY_GB = {"A100": 40, "A100-80GB": 80, "H100": 80, "H100-MEGA": 80, "H200": 141, "B200": 180,
                 "L4": 24, "L40S": 48, "A10G": 24, "A10": 24, "A6000": 48, "RTX6000-Ada": 48}
# SkyRL trains in bf16 with FlashAttention-2 (trainer.flash_attn, remove_microbatch_padding): Ampere or newer.
PRE_AMPERE = {"T4", "V100", "V100-32GB", "P100", "P4", "K80"}
GPU_COUNTS = (1, 2, 4, 8, 16)


class SkyRLConfigError(ValueError):
    """An override list or accelerator SkyRL cannot use; the message is one line naming it."""


@dataclass(frozen=True)
class Accelerator:
    name: str
    count: int
    memory_gb: int

    def __str__(self) -> str:
        return f"{self.name}:{self.count}"


@dataclass(frozen=True)
class Plan:
    """Everything the cluster shape decides, derived once (see plan_for)."""

    accelerator: Accelerator  # per node
    num_nodes: int
    tensor_parallel: int
    num_engines: int
    train_batch_size: int
    mini_batch_size: int
    micro_train: int
    micro_forward: int
    gpu_memory_utilization: float
    cpu_offload: bool
    enforce_eager: bool
    logger: str

    @property
    def total_gpus(self) -> int:
        return self.accelerator.count * self.num_nodes


def parse_accelerator(spec: str) -> Accelerator:
    """'A100:8' -> Accelerator; SkyRLConfigError naming the string if SkyRL cannot use it."""
    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9_.-]*)(?::(\d+))?", (spec or "").strip())
    if not m:
        raise SkyRLConfigError(f"accelerator {spec!r}: expected <GPU>:<count> with a whole count, e.g. A100:8")
    name, count = m.group(1), int(m.group(2) or 1)
    known = {k.lower(): k for k in GPU_MEMORY_GB}
    if name.upper() in PRE_AMPERE:
        raise SkyRLConfigError(f"accelerator {spec!r}: {name} is pre-Ampere (no bf16/FlashAttention-2), "
                               "SkyRL's FSDP trainer cannot use it; use A100, H100, L4 or newer")
    if name.lower() not in known:
        raise SkyRLConfigError(f"accelerator {spec!r}: unknown GPU {name} (known: {', '.join(sorted(GPU_MEMORY_GB))})")
    if count not in GPU_COUNTS:
        raise SkyRLConfigError(f"accelerator {spec!r}: {count} GPUs; one node with "
                               f"{'/'.join(map(str, GPU_COUNTS))} GPUs is supported")
    name = known[name.lower()]
    return Accelerator(name, count, GPU_MEMORY_GB[name])


def model_billions(model: str) -> float:
    """Parameter count in billions read from the model name ('...-1.5B-...' -> 1.5); 1.5 if unknown."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*[Bb](?![a-zA-Z])", Path(str(model)).name)
    if m:
        return float(m.group(1))
    m = re.search(r"(\d+)\s*[Mm](?![a-zA-Z])", Path(str(model)).name)
    return float(m.group(1)) / 1000 if m else 1.5


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def plan_for(accelerator: str, model: str, n_train: int, num_nodes: int, hp: Hparams = SKYRL) -> Plan:
    """Cluster-dependent settings for `model` on `num_nodes` nodes of `accelerator` with `n_train` prompt rows.

    Policy, ref and vLLM engines are colocated on every GPU of every node (SkyRL's
    colocate_all): engines x TP = all GPUs. A shape the placement cannot serve raises
    SkyRLConfigError naming the knob to change.
    """
    acc = parse_accelerator(accelerator)
    gpus = acc.count * num_nodes
    billions = model_billions(model)
    tp = 1  # bf16 weights must leave room for the KV cache next to the (offloaded) trainer
    while 2 * billions > 0.3 * acc.memory_gb * tp:
        tp *= 2
    if tp > acc.count:
        raise SkyRLConfigError(f"accelerator {acc}: {model} (~{billions:g}B) needs tensor parallel {tp} "
                               f"> {acc.count} GPUs per node")
    # pitfall (colocated OOM): 16 bytes/param of fp32 weights+grads+Adam, sharded over the GPUs,
    # must fit beside the sleeping vLLM engine; otherwise FSDP offloads them to CPU.
    cpu_offload = 16 * billions / gpus > 0.5 * acc.memory_gb
    train_batch = min(8 * gpus, 2 ** int(math.log2(max(1, n_train))))
    mini = max(1, train_batch // 2)
    if gpus & (gpus - 1):  # batches are powers of two: they split evenly only over a power of two of GPUs
        raise SkyRLConfigError(f"W8_NUM_NODES={num_nodes} x {acc} = {gpus} GPUs: use a node count that makes a "
                               "power of two of GPUs (1, 2, 4, 8, 16 nodes)")
    group = hp.group_size  # GRPO samples per prompt (W8_GRPO_GROUP_SIZE over harness/hparams.py)
    if (mini * group) % gpus:
        raise SkyRLConfigError(f"W8_NUM_NODES={num_nodes} x {acc} = {gpus} GPUs: a policy mini batch of {mini} "
                               f"prompt(s) x {group} samples cannot be split over {gpus} GPUs; raise "
                               f"W8_TRAIN_COUNT to >= {2 * gpus // group} or use fewer nodes")
    mini_per_gpu = mini * group // gpus
    micro = _largest_divisor_at_most(mini_per_gpu, 4 if acc.memory_gb >= 40 and not cpu_offload else 2)
    return Plan(accelerator=acc, num_nodes=num_nodes, tensor_parallel=tp, num_engines=gpus // tp,
                train_batch_size=train_batch, mini_batch_size=mini, micro_train=micro, micro_forward=2 * micro,
                gpu_memory_utilization=0.6 if acc.memory_gb >= 40 else 0.5, cpu_offload=cpu_offload,
                enforce_eager=acc.memory_gb < 40, logger="wandb" if os.environ.get("WANDB_API_KEY") else "console")
