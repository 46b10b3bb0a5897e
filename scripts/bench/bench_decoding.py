"""Measure what the search's sampling temperature does to a model's answers (the W8_OPERATOR_TEMPERATURE choice).

    python scripts/bench/bench_decoding.py                                   # the frozen embedded model
    python scripts/bench/bench_decoding.py --model .w8-biayn/runs/<id>/sft/global_step_16/policy   # an SFT export
    python scripts/bench/bench_decoding.py --temperatures 0.3,0.7 --samples 4 --tasks 1              # a quick look

For each temperature, `--samples` answers per zero-shot prompt (node 0 of a search) of
`--tasks` held-out trace tasks, in one batch per task (the hf operator, the run's token
budget from presets/local.env), scored by the reward (harness.rewards): the share of valid
programs, the mean reward, the share gold, and the distinct programs among the samples of a
prompt (a search whose samples repeat spends its budget on copies). Not a test: a
measurement. Ends with one line per temperature.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.config import load_config  # noqa: E402
from harness.operators import HFOperator, Request  # noqa: E402
from harness.rewards import RewardKnobs, score_with  # noqa: E402
from harness.traces import trace_tasks  # noqa: E402


def measure(operator: HFOperator, tasks, samples: int, knobs: RewardKnobs) -> dict:
    valid, rewards, gold, distinct = [], [], [], []
    for task in tasks:
        gens = operator.answer([Request(task, seed) for seed in range(samples)])
        codes = []
        for gen in gens:
            code, score, is_gold = score_with(gen.text, task.examples, knobs)
            valid.append(score.valid)
            rewards.append(score.reward)
            gold.append(is_gold)
            codes.append(code)
        distinct.append(len(set(codes)) / len(codes))
    n = len(valid)
    return {"valid_share": round(sum(valid) / n, 3), "reward_mean": round(sum(rewards) / n, 3),
            "gold_share": round(sum(gold) / n, 3), "distinct_share": round(sum(distinct) / len(distinct), 3), "n": n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--temperatures", default="0,0.3,0.5,0.7,1.0")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=2)
    args = parser.parse_args(argv)
    cfg = load_config(env={"W8_PRESET": "local", "W8_TRACE_TASKS": str(args.tasks), "W8_SANDBOX": "local"})
    tasks = trace_tasks(cfg)
    knobs = RewardKnobs.from_config(cfg)
    rows = {}
    operator = HFOperator(args.model, cfg.operator_max_new_tokens)
    for text in args.temperatures.split(","):
        operator.temperature = float(text)
        rows[text] = measure(operator, tasks, args.samples, knobs)
        print(json.dumps({"model": Path(args.model).name, "temperature": float(text), **rows[text]}), flush=True)
    for text, row in rows.items():
        print(f"bench_decoding {Path(args.model).name} T={text}: valid {row['valid_share']:.2f}, reward "
              f"{row['reward_mean']:.3f}, gold {row['gold_share']:.2f}, distinct programs {row['distinct_share']:.2f} "
              f"({row['n']} answers)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
