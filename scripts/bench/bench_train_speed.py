"""The embedded trainers' speed by precision and gradient checkpointing, side by side, the old setting first.

    W8_PRESET=study python scripts/bench/bench_train_speed.py                      # 4 settings, SFT and GRPO
    python scripts/bench/bench_train_speed.py --sft-rows 4 --grpo-settings fp32+ckpt,bf16   # shorter
    python scripts/bench/bench_train_speed.py --skip-sft --grpo-settings fp32 --grpo-samplers hf,llamacpp
    W8_GRPO_GROUP_SIZE=2 W8_OPERATOR_MAX_NEW_TOKENS=16 python scripts/bench/bench_train_speed.py --skip-sft \
        --sft-rows 2 --grpo-settings fp32 --grpo-samplers hf,llamacpp                 # tiny CPU smoke, minutes

Settings: fp32+ckpt (the baseline: what both trainers did before W8_TRAIN_PRECISION), fp32, bf16+ckpt, bf16
("bf16" is autocast: the weights and optimizer state stay float32; harness.train_local). Each training runs
in its own process. SFT: --sft-rows repair SFT rows (harness.repair_rows.repair_sft_rows, the same rows in every
setting), one row per step from the base model with W8_TRAIN_SEED; reported: the median seconds per row over the
steps after the first, and the mean loss (equal loss, faster). GRPO: --grpo-steps steps of a group of
W8_GRPO_GROUP_SIZE (8 unless set) on repair refinement rows (repair_refine_rows), completions up to
W8_OPERATOR_MAX_NEW_TOKENS, from --grpo-start (the base model); reported: step seconds (the first step includes
the trainer's set-up) and the share that is sampling (metrics.json's generate_time_s). --grpo-samplers times each
GRPO setting with each sampler (harness.grpo_rollout: "hf", TRL's generate, the baseline and always first;
"llamacpp", llama.cpp workers on an F16 GGUF export of the policy, whose export share is reported apart), on the
same prompt and group. --skip-sft times GRPO only. Knobs: W8_PRESET=study
unless W8_* variables say otherwise. Not a test: a measurement. Writes only under --out
(default .w8-biayn/bench-train-speed), bench_train_speed.json with every number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.files import WORK_DIR  # noqa: E402
from harness.grpo_rollout import SAMPLERS  # noqa: E402

SETTINGS = {"fp32+ckpt": ("float32", True), "fp32": ("float32", False), "bf16+ckpt": ("bf16", True),
            "bf16": ("bf16", False)}  # name -> (precision, gradient checkpointing); the first is the baseline
GOALS = {"sft": ("s/row", 5.0), "grpo": ("s/step", 60.0)}  # a repair SFT row <= 5 s; a GRPO step of group 8 <= 60 s


def knobs():
    from harness.config import load_config

    env = {k: v for k, v in os.environ.items() if k.startswith("W8_")}
    return load_config(env={"W8_PRESET": "study", "W8_GRPO_GROUP_SIZE": "8", **env})


def write_rows(cfg, n: int, data_dir: Path):
    """The bench's rows, once for every setting: n repair SFT rows and the same tasks' refinement rows."""
    from harness.repair import RepairKnobs, make_side
    from harness.repair_rows import repair_refine_rows, repair_sft_rows
    from harness.rewards import RewardKnobs
    from harness.rule_split import Design
    from harness.training_data import write_jsonl_rows, write_parquet_rows

    tasks = make_side("train", Design.of(cfg), RepairKnobs.from_config(cfg))[:n]
    reward = dataclasses.replace(RewardKnobs.from_config(cfg), sandbox="local")
    write_jsonl_rows(repair_sft_rows(tasks, reward), data_dir / "sft" / "train.jsonl")
    refine = repair_refine_rows(tasks, reward, cfg.refine_improvement_bonus, cfg.refine_identical_penalty)
    write_parquet_rows(refine, data_dir / "train.parquet")
    return len(tasks)


def child(trainer: str, setting: str, steps: int, out: Path, data_dir: Path, start: str, sampler: str) -> None:
    """One training in this process; prints one JSON line with its numbers."""
    from harness.hparams import for_config
    from harness.train_local import train_grpo, train_sft
    from harness.training_data import TrainingData

    cfg = knobs()
    precision, checkpointing = SETTINGS[setting]
    parquet = data_dir / "train.parquet"
    data = TrainingData(parquet, parquet, data_dir / "sft", steps, 0)
    t0 = time.monotonic()
    if trainer == "sft":
        result = train_sft(start, out, data, steps, for_config(cfg), seed=cfg.train_seed,
                           gradient_checkpointing=checkpointing, report_to="none", precision=precision)
    else:
        result = train_grpo(start, out, data, steps, cfg.operator_max_new_tokens, for_config(cfg),
                            seed=cfg.train_seed, gradient_checkpointing=checkpointing, report_to="none",
                            precision=precision, sampler=sampler)
    metrics = json.loads(result.metrics_path.read_text())
    log = metrics["steps"]
    from safetensors import safe_open

    with safe_open(str(next(Path(result.policy_dir).glob("*.safetensors"))), "pt") as weights:  # autocast: float32
        dtypes = sorted({str(weights.get_slice(k).get_dtype()) for k in weights.keys()})
    row = {"setting": setting if trainer == "sft" else f"{setting} {sampler}",
           "wall_s": round(time.monotonic() - t0, 1), "steps": log, "export_dtypes": dtypes,
           "precision": metrics["precision"], "gradient_checkpointing": metrics["gradient_checkpointing"]}
    if trainer == "sft":
        later = [s["step_time_s"] for s in log[1:]] or [log[0]["step_time_s"]]
        row.update(s_per_unit=statistics.median(later), loss=statistics.mean(s["loss"] for s in log))
    else:
        step_s = [s["step_time_s"] for s in log]
        row.update(s_per_unit=statistics.median(step_s),
                   sampling_share=sum(s["generate_time_s"] for s in log) / sum(step_s),
                   export_share=sum(s.get("export_time_s", 0.0) for s in log) / sum(step_s), sampler=sampler,
                   reward=statistics.mean(s["reward_mean"] for s in log))
    print(json.dumps(row), flush=True)


def measure(trainer: str, setting: str, steps: int, out: Path, data_dir: Path, start: str,
            sampler: str = "hf") -> dict:
    folder = out / (f"{trainer}-{setting}" if trainer == "sft" else f"{trainer}-{setting}-{sampler}")
    shutil.rmtree(folder, ignore_errors=True)  # a fresh training each time: a kept export would skip it
    cmd = [sys.executable, __file__, "--child", trainer, "--setting", setting, "--steps", str(steps),
           "--out", str(folder), "--data", str(data_dir), "--start", start, "--sampler", sampler]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"error: {trainer} {setting} {sampler} exited {proc.returncode} (its output is above)")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(trainer: str, rows: list[dict]) -> list[str]:
    """One line a setting: the median (and, for SFT, the fastest: the least disturbed on a shared machine)
    seconds per unit, the speed-up of the median against the first row, and the goal."""
    unit, goal = GOALS[trainer]
    base = rows[0]["s_per_unit"]
    extra = "fastest  mean loss" if trainer == "sft" else "sampling, export, reward"
    lines = [f"{'setting':18} {unit:>8} {'speed-up':>9}  {extra}"]
    for r in rows:
        later = [s["step_time_s"] for s in r["steps"][1:]] or [r["s_per_unit"]]
        tail = (f"{min(later):>7.1f}  {r['loss']:.4f}" if trainer == "sft"
                else f"{r['sampling_share']:.0%}, {r.get('export_share', 0.0):.0%}, {r['reward']:.3f}")
        met = "met" if r["s_per_unit"] <= goal else "not met"
        lines.append(f"{r['setting']:18} {r['s_per_unit']:>8.1f} {base / r['s_per_unit']:>8.2f}x  {tail}"
                     f"   (goal <= {goal:.0f} {unit}: {met})")
    return lines


def report(result: dict) -> None:
    k = result["knobs"]
    if result.get("sft"):
        print(f"\nrepair SFT, {k['sft_rows']} rows one per step from the base model (median and fastest s/row over "
              f"the steps after the first); {result['sft'][0]['setting']} = baseline")
        print("\n".join(table("sft", result["sft"])))
    if result.get("grpo"):
        print(f"\nGRPO, {k['grpo_steps']} step(s) of a group of {k['group_size']}, completions <= "
              f"{k['max_new_tokens']} tokens (median s/step; the shares of it that are sampling and GGUF export); "
              f"{result['grpo'][0]['setting']} = baseline")
        print("\n".join(table("grpo", result["grpo"])))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sft-rows", type=int, default=6, help="repair SFT rows, one per step [6]")
    p.add_argument("--grpo-steps", type=int, default=1, help="GRPO steps per setting [1]; 0 = no GRPO")
    p.add_argument("--grpo-settings", default=",".join(SETTINGS),
                   help=f"comma-separated settings GRPO runs (the first is its baseline) [{','.join(SETTINGS)}]")
    p.add_argument("--grpo-samplers", default="hf",
                   help=f"comma-separated GRPO samplers timed per setting, hf first [hf] (of {','.join(SAMPLERS)})")
    p.add_argument("--skip-sft", action="store_true", help="time GRPO only (the rows are still written)")
    p.add_argument("--grpo-start", default="", help="GRPO's start model [the base model, W8_HARNESS_MODEL]")
    p.add_argument("--out", default=str(WORK_DIR / "bench-train-speed"), help="output folder")
    p.add_argument("--table", metavar="JSON", help="print the tables of an earlier run's bench_train_speed.json")
    p.add_argument("--child", choices=("sft", "grpo"), help=argparse.SUPPRESS)
    p.add_argument("--setting", choices=tuple(SETTINGS), help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--data", default="", help=argparse.SUPPRESS)
    p.add_argument("--start", default="", help=argparse.SUPPRESS)
    p.add_argument("--sampler", choices=SAMPLERS, default="hf", help=argparse.SUPPRESS)
    args = p.parse_args()
    out = Path(args.out)
    if args.table:
        report(json.loads(Path(args.table).read_text()))
        return 0
    if args.child:
        child(args.child, args.setting, args.steps, out, Path(args.data), args.start, args.sampler)
        return 0
    grpo_settings = [s for s in args.grpo_settings.split(",") if s]
    samplers = sorted({s for s in args.grpo_samplers.split(",") if s}, key=lambda s: (s != "hf", s))  # hf first
    if (args.sft_rows < 2 or args.grpo_steps < 0 or any(s not in SETTINGS for s in grpo_settings)
            or not samplers or any(s not in SAMPLERS for s in samplers)):
        print(f"error: --sft-rows {args.sft_rows} (at least 2), --grpo-steps {args.grpo_steps} (at least 0), "
              f"--grpo-settings {args.grpo_settings} (of {','.join(SETTINGS)}), --grpo-samplers "
              f"{args.grpo_samplers} (of {','.join(SAMPLERS)}): out of range", file=sys.stderr)
        return 2
    from harness.models import resolve_model

    cfg = knobs()
    base = str(resolve_model(cfg.harness_model))
    out.mkdir(parents=True, exist_ok=True)
    n = write_rows(cfg, args.sft_rows, out / "data")
    from harness.hparams import for_config

    result = {"knobs": {"group_size": for_config(cfg).group_size, "max_new_tokens": cfg.operator_max_new_tokens,
                        "train_seed": cfg.train_seed, "sft_rows": n, "grpo_steps": args.grpo_steps,
                        "grpo_samplers": samplers},
              "sft": [] if args.skip_sft else [measure("sft", s, n, out, out / "data", base) for s in SETTINGS]}
    if args.grpo_steps:
        start = args.grpo_start or base
        result["grpo"] = [measure("grpo", s, args.grpo_steps, out, out / "data", start, sampler)
                          for s in grpo_settings for sampler in samplers]
    (out / "bench_train_speed.json").write_text(json.dumps(result, indent=1) + "\n")
    report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
