"""Every knob of agent-rein in one table, and the preset files that set several at once.

Each knob is an env var (``W8_...``) and a flag of the numbered scripts
(``--trace-task-seed 7`` for ``W8_TRACE_TASK_SEED``). Precedence: flag > env >
preset > default. A bad value stops the program with one line naming the variable.

A preset is a small file `presets/<name>.env` (one `W8_KNOB=value` a line, `#` comments),
chosen with W8_PRESET: `make smoke`, `make local`, `make launch` and `make gpu-smoke` are
the presets smoke, local, gcp and gpu-smoke. A preset only fills knobs the user did not
set, so `make local W8_TRACE_MAX_ITERATIONS=8` wins over it.

    from harness.config import load_config
    cfg = load_config()                       # env vars (and W8_PRESET) only
    cfg = load_config(argv=sys.argv[1:])      # flags too
    cfg.trace_task_seed, cfg.as_dict()
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from harness.node_env import SKYRL_REF
from harness.knob_parser import KnobParser
from harness.knob_rules import (OTHER_ENV, accelerator_spec, bucket_uri, choice, int_range, optional, optional_range,
                                positive, rule_families, unit_closed, unit_open_closed, worker_count, yes_no)
from harness.rule_split import SPLIT_KINDS

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"
# W8_REPORT_TO's integrations and the modules that make one installed (transformers checks the same ones)
REPORT_TO_MODULES = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",), "mlflow": ("mlflow",),
                     "trackio": ("trackio",)}


class ConfigError(ValueError):
    """A knob has a bad value; the message names the variable."""


@dataclass(frozen=True)
class Knob:
    name: str  # attribute name, e.g. "trace_task_seed"
    type: Callable[[str], Any]
    default: Any
    doc: str
    check: Callable[[Any], bool] = lambda v: True
    rule: str = ""  # human form of `check`, shown in errors and --help

    @property
    def env(self) -> str:
        return "W8_" + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.env"))


def _preset_name():
    return (lambda v: v == "" or (PRESETS_DIR / f"{v}.env").is_file()), \
        "'' or the name of a file presets/<name>.env (" + ", ".join(preset_names()) + ")"


def _knob(name, type_, default, doc, rule=None):
    check, text = rule if rule else ((lambda v: True), "")
    return Knob(name, type_, default, doc, check, text)


# The one table. Keep the seed names (HARNESS_MODEL, HARNESS_GOLD_THRESHOLD,
# HARNESS_SFT_STEPS) stable: run scripts and sky/r3.yaml refer to them.
KNOBS: tuple[Knob, ...] = (
    _knob("backend", str, "local", "trainer backend: local (TRL on CPU) or skyrl (GCP GPU node)",
          choice("local", "skyrl")),
    _knob("harness_model", str, "smollm2-135m",
          "operator model: 'smollm2-135m' (embedded GGUF), an HF id, or a local HF directory"),
    _knob("operator", str, "auto", "mutation operator: auto (llamacpp locally, vllm on skyrl) | deterministic | hf | ct2 "
          "(CTranslate2, CPU) | llamacpp (llama.cpp workers, CPU) | vllm | openai",
          choice("auto", "deterministic", "hf", "ct2", "llamacpp", "vllm", "openai")),
    _knob("gguf_type", str, "F16", "weights of the llamacpp operator's GGUF: F16 | Q8_0 | Q4_1 (the shipped base's "
          "own) | F32 (scripts/bench/bench_engines.py chose F16: hf's quality, Q8_0's speed)", choice("Q8_0", "Q4_1", "F16", "F32")),
    _knob("operator_workers", optional(int), None, "llamacpp worker processes of one thread each (auto: every "
          "core this process may use); a node's program does not depend on it", worker_count()),
    _knob("ct2_compute_type", str, "int8", "weights of the ct2 operator's CTranslate2 copy: int8 | int8_float32 | float32",
          choice("int8", "int8_float32", "float32")),
    _knob("split", str, "rule", "train vs held-out: rule (held-out pages whose tasks need W8_HELDOUT_RULES, which no "
          "training example shows; harness/rule_split.py) | page (held-out pages, the same rules: measures recall). "
          "rule is every preset's split, so a script run without a preset runs it too (with W8_HELDOUT_RULES's "
          "default, the presets' families); W8_CURRICULUM=auto follows it", choice(*SPLIT_KINDS)),
    _knob("heldout_rules", str, "pointer,fill_editable", "the oracle's rule families the rule split holds out of "
          "training (harness.rules names)", rule_families()),
    _knob("harness_gold_threshold", float, 0.90, "balanced accuracy at which a harness is gold",
          unit_open_closed()),
    _knob("reward_recall_weight", float, 0.2, "w in reward = (1-w)*balanced_accuracy + w*effective_recall",
          unit_closed()),
    _knob("search_c", float, 20.0, "Thompson-sampling weight C in Beta(1+C*h, 1+C*(1-h)+N)", positive()),
    _knob("search_seed", int, 0, "seed of the search's Thompson-sampling RNG (and of sampled operator answers)",
          int_range(0)),
    _knob("operator_max_new_tokens", int, 512, "longest answer in tokens of every model operator (hf, ct2, llamacpp, "
          "vllm, openai), and of GRPO's completions",
          int_range(16, 8192)),
    _knob("operator_temperature", float, 0.5, "operator sampling temperature of every arm's searches (0: greedy)",
          ((lambda v: 0.0 <= v <= 2.0), "a number in [0, 2]")),
    _knob("operator_base_url", str, "", "OpenAI-compatible endpoint of the openai operator, e.g. http://127.0.0.1:8000/v1"),
    _knob("harness_sft_steps", int, 0, "oracle SFT warm-start steps before GRPO (0 skips step 02)",
          int_range(0)),
    _knob("train_count", int, 512, "number of train tasks: the GRPO prompts (and the SFT rows unless W8_SFT_COUNT "
          "is set)", int_range(1)),
    _knob("sft_count", int, 0, "SFT rows (train tasks 0..n-1) apart from the GRPO prompts; 0 = W8_TRAIN_COUNT",
          int_range(0)),
    _knob("sft_target", str, "auto", "the SFT answer: auto (oracle on skyrl, compact on local) | oracle | compact "
          "(harness/oracle.py); fewer SFT steps, not another target, leave GRPO its headroom (docs/reading-results.md)",
          choice("auto", "oracle", "compact")),
    _knob("grpo_group_size", optional(int), None, "GRPO samples per prompt (auto: harness/hparams.py per backend)",
          optional_range(2, 64, "an integer")),
    _knob("grpo_lr", optional(float), None, "GRPO learning rate (auto: harness/hparams.py per backend)",
          optional_range(1e-9, 1e-2)),
    _knob("grpo_temperature", optional(float), None, "GRPO sampling temperature, apart from the searches' "
          "W8_OPERATOR_TEMPERATURE (auto: harness/hparams.py per backend)", optional_range(0.05, 2.0)),
    _knob("grpo_kl_coef", optional(float), None, "GRPO KL coefficient against the start model; 0 keeps no reference "
          "model (auto: harness/hparams.py per backend)", optional_range(0.0, 1.0)),
    _knob("train_examples_per_obs", int, 24, "labeled actions per train task", int_range(2, 64)),
    _knob("grpo_epochs", int, 2, "passes over the train tasks", int_range(1)),
    _knob("grpo_max_steps", int, 0, "cap on GRPO steps (local: one train task each; skyrl: trainer.max_training_steps); "
          "0 = no cap",
          int_range(0)),
    _knob("train_seed", int, 0, "seed of the local trainers (SFT and GRPO: data order, sampling, initial torch "
          "state); recorded in run_config.json, so two training seeds tell training noise from an arm's effect",
          int_range(0)),
    _knob("train_precision", str, "auto", "the local trainers' arithmetic: auto (bf16 autocast when the CPU has "
          "AVX512-BF16 or AMX, or on a CUDA GPU with bf16; float32 otherwise, where a bf16 matmul takes a slow "
          "reference path) | float32 | bf16 (autocast: weights and optimizer state stay float32); recorded in each "
          "trainer's metrics.json", choice("auto", "float32", "bf16")),
    _knob("report_to", str, "none", "the local trainer's logs, TRL's report_to: none | tensorboard (into <run>/<training>"
          "/logs) | wandb | mlflow | trackio; refused when that package is not installed, and on skyrl (SkyRL's "
          "trainer.logger logs there)", choice("none", *REPORT_TO_MODULES)),
    _knob("trace_task_seed", int, 7, "seed of the (first) held-out trace task", int_range(0)),
    _knob("trace_examples_per_obs", int, 24, "labeled actions in a trace task", int_range(2, 64)),
    _knob("trace_max_iterations", int, 16, "refinements per search (a trace has at most this + 1 nodes)",
          int_range(0, 1000)),
    _knob("trace_tasks", int, 1, "held-out trace tasks, each from a different held-out page (seeds from "
          "trace_task_seed on)", int_range(1, 100)),
    _knob("trace_seeds", int, 1, "search seeds per trace task (search_seed, +1, ...): the (task, seed) pairs every "
          "arm searches", int_range(1, 64)),
    _knob("grpo_only_arm", yes_no, False, "also train GRPO from the frozen model without SFT and trace it (the "
          "grpo_only arm)", ((lambda v: isinstance(v, bool)), "0 or 1")),
    _knob("refine_arm", yes_no, False, "also train the refine arm (SFT warm-start, then GRPO on zero-shot prompts mixed "
          "with refinement prompts harvested from its own searches on train pages) and trace it",
          ((lambda v: isinstance(v, bool)), "0 or 1")),
    _knob("self_arm", yes_no, False, "also train the self arm (no answer key: rejection-sampling fine-tuning of the base "
          "model on its own best programs from searches on train pages, then GRPO on mixed prompts) and trace it",
          ((lambda v: isinstance(v, bool)), "0 or 1")),
    _knob("refine_share", float, 0.5, "share of the refine and self arms' GRPO prompts that are refinement prompts "
          "(harness.prompts.build_refine_prompt of a harvested parent and its failures); the rest are zero-shot",
          unit_closed()),
    _knob("refine_improvement_bonus", float, 0.2, "reward bonus of a refinement whose child scores strictly above its "
          "parent (a linear improvement term would be a no-op: GRPO normalises rewards within a group of one parent)",
          unit_closed()),
    _knob("refine_identical_penalty", float, 0.2, "reward penalty of a refinement whose child is its parent's program "
          "unchanged", unit_closed()),
    _knob("harvest_tasks", int, 8, "train tasks (train pages only) searched to harvest refinement prompts and the self "
          "arm's programs", int_range(1, 512)),
    _knob("harvest_max_iterations", int, 4, "refinements per harvest search on a train task", int_range(1, 64)),
    _knob("self_rounds", int, 2, "rejection-sampling fine-tuning rounds of the self arm (each: search train pages, "
          "keep the best programs, fine-tune from the base model on them)", int_range(1, 3)),
    _knob("self_sft_steps", int, 8, "SFT steps of each self-arm round (batch of one kept program each)",
          int_range(1, 1000)),
    _knob("frozen_matched_arm", yes_no, False, "also compare the frozen_matched arm: the frozen operator given the "
          "trained arms' training generations as extra search nodes (cut from one longer frozen search per task)",
          ((lambda v: isinstance(v, bool)), "0 or 1")),
    _knob("matched_max_iterations", int, 64, "hard cap on the frozen_matched arm's budget (the frozen budget plus the "
          "trained arms' training generations per held-out task); a larger one is refused before any model loads",
          int_range(0, 1000)),
    _knob("curriculum", str, "auto", "the training arms' train tasks: auto (repair under W8_SPLIT=rule, none under "
          "page) | none (the split's train tasks) | repair (repair tasks: a parent below gold plus the rule that fixes "
          "it; harness/repair.py)", choice("auto", "none", "repair")),
    _knob("repair_families", int, 24, "synthetic rule families of the train repair tasks (verbs + a predicate on the "
          "target element's line)", int_range(1, 200)),
    _knob("repair_tasks_per_family", int, 96, "train repair tasks per family (synthetic and real)", int_range(1, 10000)),
    _knob("repair_madeup_share", float, 0.6, "share of synthetic families whose property is made up (written onto "
          "some element lines, a name varying per task): at least 0.5, so the answer is copied, not remembered",
          ((lambda v: 0.5 <= v <= 1.0), "a number in [0.5, 1]")),
    _knob("repair_heldin_families", int, 10, "synthetic families of the held-in repair benchmark (held-out pages, "
          "names, roles and properties no train family uses)", int_range(1, 64)),
    _knob("repair_heldin_tasks_per_family", int, 8, "held-in repair tasks per family", int_range(1, 1000)),
    _knob("repair_budget", int, 2, "refinements per search of the held-in repair benchmark (node 0 is the parent)",
          int_range(1, 64)),
    _knob("repair_seed", int, 0, "seed of the repair-task generator (families, made-up names, example draws)",
          int_range(0)),
    _knob("repair_sft_rows", int, 512, "repair rows of the repair warm-start (the repair_sft arm, under the repair "
          "curriculum): train repair tasks' refinement prompts answered with the fix, spread over parent-accuracy "
          "bins, beside the W8_SFT_COUNT zero-shot rows; one SFT step a row (harness/repair_training.py)",
          int_range(1, 100000)),
    _knob("repair_soar_tasks", int, 48, "train repair tasks the start model refines once before the repair "
          "warm-start: its wrong programs, relabeled with themselves plus the rule, replace that many repair rows "
          "(as SOAR does; 0 = none)", int_range(0, 10000)),
    _knob("grpo_dynamic_tries", int, 4, "extra groups a local GRPO step may sample when a group's rewards are all "
          "equal (dropped and replaced, as DAPO's dynamic sampling does); 0 = keep every group", int_range(0, 64)),
    _knob("grpo_prefilter_samples", int, 0, "under the repair curriculum, answers the trained arm's start model "
          "samples to each of 2 x W8_TRAIN_COUNT repair prompts before GRPO; the prompts whose rewards differ are "
          "trained on first (pass-rate filtering, as DAPO; harness/repair_training.py); 0 = no filter", int_range(0, 64)),
    _knob("grpo_sampler", str, "hf", "who samples a local GRPO group: hf (the trainer's own generate) | llamacpp "
          "(llama.cpp workers on a GGUF of the current weights each step; the trainer recomputes the logprobs)",
          choice("hf", "llamacpp")),
    _knob("repair_train_eval", yes_no, True, "under the repair curriculum, the held-in repair benchmark's first "
          "refinement rate of the trained arm at GRPO step 0, half-way and the end (<run>/repair_training_eval.json)",
          ((lambda v: isinstance(v, bool)), "0 or 1")),
    _knob("sandbox", str, "auto", "where model code runs: auto (daytona if DAYTONA_API_KEY) | local | daytona",
          choice("auto", "local", "daytona")),
    _knob("sandbox_timeout_s", float, 2.0, "wall-time limit for one program on one task", positive()),
    _knob("run_id", str, "", "run folder name; empty derives one from pipeline, model, seed and time"),
    _knob("accelerators", str, "A100:8", "GPUs of each GCP node (sky launch --gpus); recorded in run_config.json",
          accelerator_spec()),
    _knob("num_nodes", int, 1, "GCP nodes (sky launch --num-nodes); SkyRL places policy, ref and engines on all",
          int_range(1, 16)),
    _knob("bucket", str, "", "gs:// URI for SkyRL exports and checkpoints; needed with W8_NUM_NODES > 1",
          bucket_uri()),
    _knob("image_id", str, "", "GCP image of the node (sky launch --image-id); empty = SkyPilot's default GPU image"),
    _knob("skyrl_ref", str, SKYRL_REF, "SkyRL git tag or commit the node installs (scripts/node_setup.sh); it must pin "
          "what the dry-run validated", ((lambda v: re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*", v) is not None),
                                         "a git tag or commit")),
    _knob("memory", str, "", "host RAM of each GCP node in GB, SkyPilot's form (sky launch --memory): 64 exactly, "
          "64+ at least; a skyrl launch needs >= 64 (vLLM and FSDP load side by side)",
          ((lambda v: v == "" or re.fullmatch(r"[1-9][0-9]*\+?", v) is not None), "'' or <GB> or <GB>+, e.g. 64+")),
    _knob("guard_no_valid", str, "stop", "GRPO's first batches without one valid program: stop the run (no "
          "signal to pay for) | report it as a finding and go on (gpu-smoke: proves the plumbing); a failing "
          "sandbox always stops", choice("stop", "report")),
    _knob("keep_cluster", yes_no, False, "make launch / gpu-smoke: leave a cluster whose launch failed or was "
          "interrupted up (for debugging; it bills until `make down`) instead of `sky down -y`",
          ((lambda v: isinstance(v, bool)), "0 or 1")),
    _knob("gcp_iap", yes_no, False, "launch with SSH through IAP TCP forwarding, internal IPs only, in the VPC "
          "W8_GCP_VPC (docs/gpu-launch.md)", ((lambda v: isinstance(v, bool)), "0 or 1")),
    _knob("gcp_vpc", str, "", "GCP VPC network of W8_GCP_IAP=1 launches: its only tcp:22 source must be IAP's "
          "35.235.240.0/20 (make doctor checks)", ((lambda v: v == "" or re.fullmatch(r"[a-z]([-a-z0-9]{0,61}"
                                                                                        r"[a-z0-9])?", v) is not None),
                                                  "'' or a GCP network name")),
    _knob("preset", str, "", "a file presets/<name>.env whose knobs fill in what is not set ("
          + " | ".join(preset_names()) + "); unset, the defaults of this table (a numbered script says so)",
          _preset_name()),
)

BY_NAME = {k.name: k for k in KNOBS}
BY_ENV = {k.env: k for k in KNOBS}

# What ran before a knob existed, where its default now differs: a run folder whose run_config.json lacks the knob
# ran this (W8_SPLIT: every run before the knob was a page-split run; the default became the presets' rule split;
# no run before W8_CURRICULUM trained on repair tasks, and none before W8_GRPO_DYNAMIC_TRIES replaced flat groups).
BEFORE_THE_KNOB = {"split": "page", "curriculum": "none", "grpo_dynamic_tries": 0}


def recorded_value(knobs: Mapping[str, Any], name: str) -> Any:
    """A knob's value in a run's recorded knobs: the recorded one, else what runs did before the knob existed."""
    return knobs[name] if name in knobs else BEFORE_THE_KNOB.get(name, BY_NAME[name].default)

def unknown_env_error(env: Mapping[str, str]) -> str | None:
    """One line for the first W8_ variable that is neither a knob nor in OTHER_ENV, with the closest
    known name: a typo such as W8_TRACE_SEDS would otherwise run silently with the default."""
    known = [*BY_ENV, *OTHER_ENV]
    for name in sorted(env):
        if name.startswith("W8_") and name not in BY_ENV and name not in OTHER_ENV:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else "see harness/config.py (KNOBS, OTHER_ENV)"
            return f"{name}: unknown knob; {hint}"
    return None


def default(name: str) -> Any:
    """A knob's default: the public helpers (score_harness, run_harness, ...) use it when called
    without the value; the pipeline always passes the resolved knobs."""
    return BY_NAME[name].default


def read_preset(name: str) -> dict[str, str]:
    """presets/<name>.env as {W8_KNOB: value}; ConfigError naming the file and line of a bad entry."""
    path = PRESETS_DIR / f"{name}.env"
    if not path.is_file():
        raise ConfigError(f"W8_PRESET={name!r}: no file presets/{name}.env (have: {', '.join(preset_names())})")
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in BY_ENV or key == "W8_PRESET":
            raise ConfigError(f"presets/{name}.env:{number}: {line!r} is not W8_KNOB=value for a knob of harness/config.py")
        _validate(BY_ENV[key], value, f"{key} (presets/{name}.env:{number})")
        values[key] = value
    return values


class Config:
    """Resolved knob values; attribute access by knob name."""

    def __init__(self, values: dict[str, Any]):
        self._values = dict(values)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def replace(self, **changes: Any) -> "Config":
        values = dict(self._values)
        for name, value in changes.items():
            values[name] = _validate(BY_NAME[name], value, BY_NAME[name].env)
        return Config(values)


def _validate(knob: Knob, raw: Any, source: str) -> Any:
    try:
        typed = isinstance(knob.type, type) and isinstance(raw, knob.type) and not isinstance(raw, str)
        value = raw if typed or (knob.type is yes_no and isinstance(raw, bool)) else knob.type(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{source}={raw!r}: expected {knob.rule or knob.type.__name__}") from None
    if not knob.check(value):
        raise ConfigError(f"{source}={raw!r}: expected {knob.rule}")
    return value


def add_flags(parser: argparse.ArgumentParser, names: Sequence[str] | None = None) -> None:
    """Add one flag per knob (all, or `names`) to a script's parser."""
    for knob in KNOBS:
        if names is None or knob.name in names:
            parser.add_argument(knob.flag, dest=knob.name, default=None,
                                metavar="0|1" if knob.type is yes_no else knob.type.__name__.upper(),
                                help=f"{knob.doc} [env {knob.env}, default {knob.default!r}]")


def load_config(argv: Sequence[str] | None = None, env: dict[str, str] | None = None,
                parser: argparse.ArgumentParser | None = None) -> Config:
    """Resolve every knob from flags (if argv is given), env vars, then defaults."""
    env = os.environ if env is None else env
    unknown = unknown_env_error(env)
    if unknown:
        raise ConfigError(unknown)
    flags: dict[str, Any] = {}
    if argv is not None:
        parser = parser or KnobParser()
        if not any(a.dest == KNOBS[0].name for a in parser._actions):
            add_flags(parser)
        flags = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    env = with_preset({**env, **({"W8_PRESET": flags["preset"]} if "preset" in flags else {})})
    values = {}
    for knob in KNOBS:
        if knob.name in flags:
            values[knob.name] = _validate(knob, flags[knob.name], knob.flag)
        elif env.get(knob.env, "") != "":
            values[knob.name] = _validate(knob, env[knob.env], knob.env)
        else:
            values[knob.name] = knob.default
    check_together(values)
    return Config(values)


def with_preset(env: Mapping[str, str]) -> dict[str, str]:
    """env with the knobs of its W8_PRESET filled in where env leaves them unset (or empty)."""
    env = dict(env)
    name = env.get("W8_PRESET", "")
    if name:
        _validate(BY_NAME["preset"], name, "W8_PRESET")
        for key, value in read_preset(name).items():
            if env.get(key, "") == "":
                env[key] = value
    return env


def check_together(values: Mapping[str, Any]) -> None:
    """Rules between knobs (each alone is in range); ConfigError naming both."""
    if values["num_nodes"] > 1 and not values["bucket"]:
        raise ConfigError(f"W8_NUM_NODES={values['num_nodes']} needs W8_BUCKET=gs://<bucket>/<prefix>: FSDP rank 0 "
                          "writes SkyRL's exports on whichever node it lands, so they must go to a bucket")
    if values["sft_count"] > 0 and values["harness_sft_steps"] == 0:
        raise ConfigError(f"W8_SFT_COUNT={values['sft_count']} with W8_HARNESS_SFT_STEPS=0: there is no SFT to give rows to")
    if values["gcp_iap"] and not values["gcp_vpc"]:
        raise ConfigError("W8_GCP_IAP=1 needs W8_GCP_VPC=<network>: the VPC whose firewall admits tcp:22 from IAP's "
                          "35.235.240.0/20 only (docs/gpu-launch.md)")
    if values["operator"] in ("ct2", "llamacpp") and values["backend"] == "skyrl":
        raise ConfigError(f"W8_OPERATOR={values['operator']} with W8_BACKEND=skyrl: that operator is for CPUs; the GPU "
                          "node searches with vllm (W8_OPERATOR=auto)")
    if values["refine_arm"] and values["harness_sft_steps"] == 0:
        raise ConfigError("W8_REFINE_ARM=1 with W8_HARNESS_SFT_STEPS=0: the refine arm starts from the SFT warm-start")
    if values["num_nodes"] > 1 and values["backend"] != "skyrl":
        raise ConfigError(f"W8_NUM_NODES={values['num_nodes']}: several nodes need W8_BACKEND=skyrl")
    check_report_to(values["report_to"], values["backend"])


def check_report_to(name: str, backend: str) -> None:
    """W8_REPORT_TO is for the local trainer, and its package must be importable here: refused before any
    model loads rather than when TRL builds the trainer."""
    if name != "none" and backend == "skyrl":
        raise ConfigError(f"W8_REPORT_TO={name} with W8_BACKEND=skyrl: it sets the local trainer's logs; SkyRL logs "
                          "through its trainer.logger (wandb when WANDB_API_KEY is set, else the console)")
    if name != "none" and not any(importlib.util.find_spec(module) for module in REPORT_TO_MODULES[name]):
        raise ConfigError(f"W8_REPORT_TO={name}: {REPORT_TO_MODULES[name][0]} is not installed in this environment "
                          f"(pip install {REPORT_TO_MODULES[name][0]}), or leave W8_REPORT_TO=none")


def load_config_or_exit(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> Config:
    """load_config for scripts: a bad knob prints one line and exits 2."""
    try:
        return load_config(argv, parser=parser)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def defaults_notice(cfg: Config) -> str | None:
    """Without a preset, the one line a numbered script prints first: which experiment the knob table's defaults
    run (the rule split, as every preset, but at the table's budget and task count), so none runs unnoticed."""
    if cfg.preset:
        return None
    return (f"no preset (W8_PRESET unset): {cfg.split} split, budget {cfg.trace_max_iterations} refinements, "
            f"{cfg.trace_tasks} task(s) x {cfg.trace_seeds} seed(s); knobs not set by a flag or W8_* variable take "
            f"harness/config.py's defaults (presets: {', '.join(preset_names())})")


def knob_table_markdown() -> str:
    """The knob table as Markdown (the README embeds this)."""
    rows = ["| env var | default | meaning |", "|---|---|---|"]
    rows += [f"| `{k.env}` | `{k.default}` | {k.doc.replace('|', chr(92) + '|')} |" for k in KNOBS]  # \| in a cell
    return "\n".join(rows)
