"""SkyRL on the GPU node(s): what steps 02/03 call, and the entrypoints they start.

    train_skyrl(cfg, run_dir, "grpo", model)           # render, save the overrides, run, fetch the export
    python -m harness.skyrl_main grpo <overrides...>   # GRPO: SkyRL's BasePPOExp + our env, generator, callbacks
    python -m harness.skyrl_main sft <overrides...>    # SFT: SkyRL's SFTTrainer + our metrics callback

Same shape as SkyRL's examples/train/multiply/main_multiply.py and skyrl.train.main_sft:
parse and validate the overrides on the head process, start (or join) Ray, and run training
inside one Ray task that first registers `harness_legality` (registration is per process,
so it must happen where the generator builds envs). That task is pinned to the head node,
where the rows and the run folder are; the repo root is on PYTHONPATH so the string entry
point `harness.env:HarnessLegalityEnv` imports in every worker.

What we add to SkyRL's own loop, all through its public hooks:
- `MetricsLog` (a TrainingCallback): every dict SkyRL logs (timing/*, reward/*, environment/*,
  policy/*, train/*) is appended to <export>/metrics.jsonl, summarised into metrics.json/png;
- `HarnessGenerator` (SkyRLGymGenerator + `harness/*` rollout metrics): per batch the reward
  mean/std, valid-program rate, sandbox-failure rate, the share of zero-variance groups
  (groups whose samples all scored the same: no GRPO signal) and how many prompts were
  zero-shot and how many refinement (harness/prompts_zero_shot, harness/prompts_refine);
- `TrainingGuard`: any batch whose every program the sandbox failed (a remote sandbox gone for
  good mid-run included) stops the run with one line, and so do the first batches (eval before
  training included) when no program in any group was valid, instead of training on all-zero
  rewards and reporting "trained = frozen" -- unless W8_GUARD_NO_VALID=report (gpu-smoke), where
  that is written to guard.json as a finding and the run goes on.
Before any GPU work the rows are re-checked with the policy's real tokenizer (prompt length,
dataset size, the one token budget): the dry-run could only estimate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from skyrl.train.utils.callbacks import TrainingCallback

from harness.env import register_env
from harness.exports import fetch_newest_export, newest_export
from harness.files import REPO_ROOT, atomic_write_json
from harness.metrics import summarize_skyrl_metrics
from harness.sandbox import sandbox_provenance
from harness.skyrl_config import (SkyRLConfigError, check_budget, measure_lengths, paths_for, render_all,
                                  validate_grpo, validate_overrides, validate_sft, write_overrides)
from harness.training_data import PROMPT_KINDS, TrainingData, check_skyrl_parquet, row_prompt_kind

KINDS = ("sft", "grpo")
# pitfall (placement-group stalls): SkyRL reads this at import; the first start of a node
# (vLLM compile, worker package set-up) can take longer than its 180 s default.
os.environ.setdefault("SKYRL_RAY_PG_TIMEOUT_IN_S", "600")
GUARD_BATCHES = 2  # generate() calls the guard watches: eval before training + the first step


class TrainingGuardError(RuntimeError):
    """The run would train on nothing (broken sandbox, no valid program); the message says which."""


class SkyRLRunError(RuntimeError):
    """A SkyRL step failed on the caller's side (entrypoint exit, missing export); one line."""


# ---- metrics: per batch, per step -----------------------------------------------------------

def group_stats(instance_ids: Sequence[str], rewards: Sequence[Any], env_metrics: Sequence[dict],
                kinds: Sequence[str] | None = None) -> dict:
    """Reward mean/std, valid and sandbox-failure rates, the share of zero-variance groups of one batch, and
    how many of its prompts (groups) were zero-shot and how many refinement (kinds: each sample's prompt_kind)."""
    flat = [float(sum(r)) if isinstance(r, list) else float(r) for r in rewards]
    groups: dict[str, list[float]] = {}
    group_kind: dict[str, str] = {}
    for uid, reward, kind in zip(instance_ids, flat, kinds or ["zero_shot"] * len(flat)):
        groups.setdefault(uid, []).append(reward)
        group_kind.setdefault(uid, kind)
    n = max(1, len(flat))
    mean = sum(flat) / n
    return {"reward_mean": mean, "reward_std": (sum((r - mean) ** 2 for r in flat) / n) ** 0.5,
            "valid_rate": sum(float(m.get("valid", 0.0)) for m in env_metrics) / n,
            "sandbox_failure_rate": sum(float(m.get("sandbox_failed", 0.0)) for m in env_metrics) / n,
            "zero_variance_groups": sum(max(g) - min(g) <= 1e-9 for g in groups.values()) / max(1, len(groups)),
            "groups": float(len(groups)), "samples": float(len(flat)),
            **{f"prompts_{kind}": float(sum(k == kind for k in group_kind.values())) for kind in PROMPT_KINDS}}


class TrainingGuard:
    """Stops a run in its first batches when it cannot learn anything (see module doc).

    no_valid="report" (W8_GUARD_NO_VALID, the gpu-smoke preset): first batches without a valid program are
    counted as a finding instead of stopping, so the smoke proves the plumbing with a model too small to
    write one; a sandbox that fails every program stops the run in either mode.
    """
    def __init__(self, batches: int = GUARD_BATCHES, no_valid: str = "stop"):
        self.batches, self.no_valid, self.seen, self.empty = batches, no_valid, 0, 0
        self.empty_batches: list[int] = []  # batches (1-based) without a valid program, for the finding
        self.last_reason = ""

    def check(self, stats: dict, env_metrics: Sequence[dict]) -> None:
        self.seen += 1
        reason = next((str(m.get("reason")) for m in env_metrics if m.get("reason")), "")
        if stats["samples"] and stats["sandbox_failure_rate"] >= 1.0:  # any batch: a sandbox gone mid-run too
            raise TrainingGuardError(f"the sandbox failed on all {int(stats['samples'])} programs of batch "
                                     f"{self.seen} ({reason[:160]}): fix the sandbox (python -c 'from "
                                     "harness.sandbox import sandbox_info; print(sandbox_info())') before training")
        if stats["valid_rate"] == 0.0:
            self.empty_batches.append(self.seen)
            self.last_reason = reason
        if self.seen > self.batches:
            return
        self.empty = self.empty + 1 if stats["valid_rate"] == 0.0 else 0
        if self.empty >= self.batches and self.no_valid == "stop":
            raise TrainingGuardError(f"no valid program in any group of the first {self.batches} batches (last "
                                     f"reason: {reason[:160]}): every GRPO advantage is 0; check the sandbox, the "
                                     "prompt and W8_OPERATOR_MAX_NEW_TOKENS before paying for more steps")

    def finding(self) -> dict:
        """What the guard saw, for guard.json and the step's record ("" finding when every batch had a valid program)."""
        text = (f"the model wrote no valid program in {len(self.empty_batches)} of {self.seen} batches "
                f"(last reason: {self.last_reason[:160]}); GRPO had no signal there"
                if self.empty_batches else "")
        return {"no_valid": self.no_valid, "batches": self.seen, "batches_without_valid": self.empty_batches,
                "finding": text}


class MetricsLog(TrainingCallback):
    """A SkyRL TrainingCallback: every numeric value SkyRL is about to log, appended to a JSONL file."""
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def on_log(self, trainer, callback_input, control) -> None:
        logs = callback_input.logs or {}
        row = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": int(callback_input.global_step), **row}) + "\n")


# ---- inside the Ray task --------------------------------------------------------------------

def harness_generator_class(no_valid: str = "stop", guard_path: str | Path | None = None):
    """SkyRLGymGenerator with our per-batch metrics and the training guard (built lazily: GPU env only).
    The guard's finding is rewritten to guard_path after every batch (it survives a crash of the trainer)."""
    from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator

    class HarnessGenerator(SkyRLGymGenerator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.guard = TrainingGuard(no_valid=no_valid)

        async def generate(self, input_batch, disable_tqdm: bool = False):
            out = await super().generate(input_batch, disable_tqdm)
            ids = [t.instance_id for t in input_batch.get("trajectory_ids") or []] or \
                [str(i) for i in range(len(out["rewards"]))]
            metrics = out.get("env_metrics") or [{} for _ in out["rewards"]]
            kinds = [row_prompt_kind(extras or {}) for extras in input_batch.get("env_extras") or []]
            stats = group_stats(ids, out["rewards"], metrics, kinds if len(kinds) == len(ids) else None)
            if out.get("rollout_metrics") is not None:
                out["rollout_metrics"].update({f"harness/{k}": v for k, v in stats.items()})
            try:
                self.guard.check(stats, metrics)
            finally:
                if guard_path:
                    atomic_write_json(Path(guard_path), self.guard.finding(), indent=1)
            return out

    return HarnessGenerator


def write_sandbox_record(folder: str | Path) -> Path:
    """sandbox.json: which backend ran the rewards' programs in this process (and any fallback)."""
    return atomic_write_json(Path(folder) / "sandbox.json", sandbox_provenance(), indent=1)


def grpo_entrypoint(cfg, metrics_path: str, no_valid: str = "stop") -> None:
    """Runs in the Ray task: register the env, then SkyRL's BasePPOExp with our generator and callback."""
    from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.trainer import RayPPOTrainer

    register_env()  # this process's generator calls skyrl_gym.make
    metrics = MetricsLog(metrics_path)

    class Exp(BasePPOExp):
        def get_generator(self, cfg, tokenizer, inference_engine_client):
            return harness_generator_class(no_valid, Path(metrics_path).parent / "guard.json")(
                generator_cfg=cfg.generator, skyrl_gym_cfg=cfg.environment.skyrl_gym,
                inference_engine_client=inference_engine_client, tokenizer=tokenizer,
                policy_model_name=resolve_policy_model_name(cfg))

        def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client,
                        generator, colocate_pg):
            return RayPPOTrainer(cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset,
                                 eval_dataset=eval_dataset, inference_engine_client=inference_engine_client,
                                 generator=generator, colocate_pg=colocate_pg, callbacks=[metrics])

    try:
        Exp(cfg).run()
    finally:
        write_sandbox_record(Path(metrics_path).parent)


def sft_entrypoint(cfg, skyrl_cfg, metrics_path: str) -> None:
    """Runs in the Ray task: SkyRL's SFTTrainer (as skyrl.train.main_sft) with our metrics callback."""
    from skyrl.train.sft_trainer import SFTTrainer

    trainer = SFTTrainer(cfg, skyrl_cfg=skyrl_cfg, callbacks=[MetricsLog(metrics_path)])
    trainer.setup()
    trainer.train()
    trainer.shutdown()


# ---- the head process -----------------------------------------------------------------------

def _pinned_here():
    """Ray options that keep a task on this (head) node: the rows and the run folder are here."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"num_cpus": 1, "scheduling_strategy": NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False)}


def replicate_model_dir(path: str) -> int:
    """A local model folder (the SFT export) copied to the same path on every other Ray node; returns how
    many nodes got it. Policy and vLLM workers on other nodes load the model from that path."""
    import ray

    folder = Path(path)
    if not folder.is_dir():
        return 0  # a hub id: every node fetches it from the hub itself
    here = ray.get_runtime_context().get_node_id()
    others = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["NodeID"] != here]
    if not others:
        return 0
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    files = {str(p.relative_to(folder)): ray.put(p.read_bytes()) for p in folder.rglob("*") if p.is_file()}

    @ray.remote(num_cpus=1)
    def write(root: str, refs: dict) -> int:
        for rel, ref in refs.items():
            target = Path(root) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(ray.get(ref))
        return len(refs)

    ray.get([write.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
             .remote(str(folder), files) for node in others])
    return len(others)


def check_rows_on_node(cfg, budget: int | None) -> None:
    """Prompt lengths and the token budget with the policy's own tokenizer; SkyRLRunError in one line."""
    train, val = Path(cfg.data.train_data[0]), Path(cfg.data.val_data[0])
    data = TrainingData(train, val, train.parent / "sft", check_skyrl_parquet(train), check_skyrl_parquet(val))
    if data.n_train < cfg.trainer.train_batch_size:
        raise SkyRLRunError(f"{train} has {data.n_train} rows < trainer.train_batch_size={cfg.trainer.train_batch_size}")
    if not (data.sft_dir / "train.jsonl").is_file():
        return
    lengths = measure_lengths(cfg.trainer.policy.model.path, data)
    if lengths.prompt_max > cfg.trainer.max_prompt_length:
        raise SkyRLRunError(f"longest prompt {lengths.prompt_max} tokens ({lengths.tokenizer}) > "
                            f"trainer.max_prompt_length={cfg.trainer.max_prompt_length}: SkyRL would drop it")
    if budget is not None:
        try:
            check_budget(budget, lengths)
        except SkyRLConfigError as err:
            raise SkyRLRunError(str(err)) from None


def _start_ray(skyrl_cfg) -> None:
    from skyrl.train.utils import initialize_ray

    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    initialize_ray(skyrl_cfg)


def main_grpo(overrides: list[str], metrics_path: str, no_valid: str = "stop") -> None:
    import ray
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.utils.utils import validate_cfg


    validate_grpo(overrides)
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    check_rows_on_node(cfg, cfg.generator.sampling_params.max_generate_length)
    _start_ray(cfg)
    replicate_model_dir(cfg.trainer.policy.model.path)
    ray.get(ray.remote(grpo_entrypoint).options(**_pinned_here()).remote(cfg, metrics_path, no_valid))


def sft_configs(overrides: list[str], infra_logs: str | None):
    """SkyRL's SFTConfig from the overrides and the SkyRLTrainConfig its trainer runs on, whose infra logs go to
    `infra_logs` (SFTConfig has no log_path key: SkyRL would write them to /tmp/skyrl-logs, never collected)."""
    from skyrl.train.config.sft_config import SFTConfig, build_skyrl_config_for_sft, validate_sft_cfg

    validate_sft(overrides)
    cfg = SFTConfig.from_cli_overrides(overrides)
    validate_sft_cfg(cfg)
    skyrl_cfg = build_skyrl_config_for_sft(cfg)
    if infra_logs:
        skyrl_cfg.trainer.log_path = infra_logs
    return cfg, skyrl_cfg


def main_sft(overrides: list[str], metrics_path: str, infra_logs: str | None = None) -> None:
    import ray

    cfg, skyrl_cfg = sft_configs(overrides, infra_logs)
    _start_ray(skyrl_cfg)
    replicate_model_dir(cfg.model.path)
    ray.get(ray.remote(sft_entrypoint).options(**_pinned_here()).remote(cfg, skyrl_cfg, metrics_path))


def main(argv: list[str] | None = None) -> int:

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in KINDS:
        print(f"usage: python -m harness.skyrl_main {{{'|'.join(KINDS)}}} [--metrics PATH] [--infra-logs DIR] "
              "[--guard-no-valid stop|report] <overrides...>", file=sys.stderr)
        return 2
    kind, rest = argv[0], argv[1:]
    options = {"--metrics": f"{kind}-metrics.jsonl", "--infra-logs": None, "--guard-no-valid": "stop"}
    while rest[:1] and rest[0] in options and len(rest) > 1:
        options[rest[0]], rest = rest[1], rest[2:]
    try:
        if kind == "grpo":  # GRPO's overrides carry trainer.log_path themselves
            main_grpo(rest, options["--metrics"], options["--guard-no-valid"])
        else:
            main_sft(rest, options["--metrics"], options["--infra-logs"])
    except (SkyRLConfigError, SkyRLRunError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


# ---- what steps 02 and 03 call --------------------------------------------------------------

def run_entrypoint(kind: str, overrides: list[str], log_path: Path, metrics_path: Path,
                   infra_logs: str | None = None, no_valid: str = "stop") -> None:
    """`python -m harness.skyrl_main KIND ...` in a subprocess, its output teed to log_path."""
    cmd = [sys.executable, "-m", "harness.skyrl_main", kind, "--metrics", str(metrics_path),
           *(["--infra-logs", infra_logs] if infra_logs else []), "--guard-no-valid", no_valid, *overrides]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"$ python -m harness.skyrl_main {kind} ({len(overrides)} overrides, log {log_path.name})", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    with open(log_path, "a") as log, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                      text=True, bufsize=1, env=env, cwd=REPO_ROOT) as proc:
        for line in proc.stdout:
            log.write(line)
            print(line, end="", flush=True)
    if proc.returncode != 0:
        raise SkyRLRunError(f"skyrl {kind} exited with {proc.returncode} (log {log_path}; its tail comes home "
                            "as failure-* records)")


def train_skyrl(cfg, run_dir: Path, kind: str, model: str, data: TrainingData | None = None,
                entry: str | None = None) -> dict:
    """Render and save the overrides (<run>/skyrl_<kind>_overrides.txt), run SkyRL, fetch the export from the
    bucket if there is one, summarise the metrics; returns what the step records. `data`: the rows to train on
    when they are not the run's own (the refine and self arms' mixed GRPO parquet, a self round's SFT rows).
    `entry`: sft or grpo, by default sft for kind "sft" and grpo for every other kind (grpo_only, refine, self)."""

    entry = entry or ("sft" if kind == "sft" else "grpo")  # grpo_only: the GRPO entrypoint into its own folder
    if entry not in KINDS:
        raise SkyRLConfigError(f"skyrl entrypoint {entry!r}: expected one of {', '.join(KINDS)}")
    rendered = render_all(cfg, model, run_dir, data_dir=run_dir / "data", grpo_name=kind if entry == "grpo" else "grpo",
                          sft_name=kind if entry == "sft" else "sft", data=data)
    overrides = rendered.grpo if entry == "grpo" else rendered.sft
    validate_overrides(rendered.grpo, rendered.sft, rendered.lengths, cfg.operator_max_new_tokens)
    write_overrides(run_dir / f"skyrl_{kind}_overrides.txt", overrides)
    out_dir = run_dir / kind
    metrics_path = out_dir / "metrics.jsonl"
    start = time.monotonic()
    paths = paths_for(cfg, run_dir, kind)
    # SkyRL's infra logs under the run folder (GRPO: trainer.log_path; SFT: --infra-logs), so a failed step's
    # tails come home (harness.records.failure_logs reads every *.log of the run folder)
    run_entrypoint(entry, overrides, out_dir / f"skyrl_{kind}.log", metrics_path, paths.logs, cfg.guard_no_valid)
    export = paths.export
    if "://" in export:
        fetch_newest_export(export, out_dir)
    if newest_export(out_dir) is None:
        raise SkyRLRunError(f"skyrl {kind} finished without an export under {export} (global_step_N/policy)")
    summarize_skyrl_metrics(metrics_path, out_dir, kind)
    sandbox, guard = out_dir / "sandbox.json", out_dir / "guard.json"
    finding = json.loads(guard.read_text()) if guard.is_file() else None
    if finding and finding["finding"]:
        print(f"finding: {finding['finding']} (W8_GUARD_NO_VALID={finding['no_valid']})", flush=True)
    return {"train_wall_s": round(time.monotonic() - start, 1), "overrides": f"skyrl_{kind}_overrides.txt",
            "sandbox": json.loads(sandbox.read_text()) if sandbox.is_file() else None, "guard": finding,
            "plan": {"nodes": rendered.plan.num_nodes, "gpus": rendered.plan.total_gpus,
                     "engines": rendered.plan.num_engines, "tp": rendered.plan.tensor_parallel,
                     "train_batch_size": rendered.plan.train_batch_size}}


if __name__ == "__main__":
    raise SystemExit(main())
