"""How much headroom does a warm-start leave GRPO? Node-0 gold rate on held-out tasks after k SFT steps.

    python scripts/bench/bench_warmstart.py --rules                       # no model: the SFT target with one rule left out
    python scripts/bench/bench_warmstart.py --sft-steps 4,6,8 --tasks 16  # SmolLM2 after 4, 6, 8 SFT steps (~15 min)
    python scripts/bench/bench_warmstart.py --sft-steps 1 --tasks 2       # tiny CPU variant

GRPO can only show an effect where the warm-started model is not already gold at node 0 on
every task (the committed CPU runs of the 16-step warm-start were). Two ways to leave room,
measured here on the study's held-out trace tasks (one per page, W8_TRACE_TASK_SEED on):
- `--rules`: the compact SFT target with each of its rules left out, scored exactly (a
  program the model would have to complete from reward alone);
- `--sft-steps`: SFT (the run's knobs: W8_SFT_COUNT rows, W8_TRAIN_EXAMPLES_PER_OBS) to each
  step count in turn (each continues from the previous export), then one node-0 answer per
  task sampled exactly as the searches do (W8_OPERATOR_TEMPERATURE, the token budget, the
  node-0 seed of search seed 0), scored in the sandbox.
Ends with one line per setting: node-0 gold tasks k/n, valid answers, mean reward. Writes
nothing outside --out (default .w8-biayn/bench-warmstart).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.config import add_flags, load_config_or_exit  # noqa: E402
from harness.files import WORK_DIR  # noqa: E402
from harness.hparams import for_config  # noqa: E402
from harness.interface import extract_code  # noqa: E402
from harness.models import resolve_model  # noqa: E402
from harness.operators import HFOperator  # noqa: E402
from harness.oracle import COMPACT_HARNESS  # noqa: E402
from harness.rewards import RewardKnobs, score_harness  # noqa: E402
from harness.operators import Request  # noqa: E402
from harness.search import node_seed  # noqa: E402
from harness.traces import trace_tasks  # noqa: E402
from harness.training_data import training_data_for  # noqa: E402


def score_of(code: str, examples, reward: RewardKnobs):
    return score_harness(code, examples, reward.recall_weight, reward.timeout_s, sandbox=reward.sandbox)


def rule_blocks(code: str) -> list[int]:
    """Line numbers of the program's one-line rules: `if ...:` followed by a `return`."""
    lines = code.split("\n")
    return [i for i, line in enumerate(lines[:-1]) if line.startswith("    if ") and
            lines[i + 1].strip().startswith("return")]


def rules_table(tasks, reward: RewardKnobs) -> None:
    lines = COMPACT_HARNESS.split("\n")
    for i in rule_blocks(COMPACT_HARNESS):
        code = "\n".join(lines[:i] + lines[i + 2:])
        accs = [score_of(code, t.examples, reward).balanced_accuracy for t in tasks]
        gold = sum(a >= reward.gold_threshold for a in accs)
        print(f"without `{lines[i].strip()[:70]}`: gold on {gold}/{len(tasks)} tasks", flush=True)


def node0_table(cfg, tasks, reward: RewardKnobs, steps_list: list[int], out: Path) -> None:
    from harness.train_local import train_sft  # TRL: heavy, only for this mode

    data = training_data_for(cfg, out / "data")
    hp = for_config(cfg)
    for steps in steps_list:
        start = time.monotonic()
        sft = train_sft(str(resolve_model(cfg.harness_model)), out / "sft", data, steps, hp,
                        report_to=cfg.report_to, precision=cfg.train_precision)
        op = HFOperator(str(sft.policy_dir), cfg.operator_max_new_tokens, cfg.operator_temperature)
        gold = valid = 0
        rewards = []
        for task in tasks:
            gen = op.answer([Request(task, node_seed(cfg.search_seed, 0, task.task_id))])[0]
            score = score_of(extract_code(gen.text) or "", task.examples, reward)
            gold += score.valid and score.balanced_accuracy >= reward.gold_threshold
            valid += score.valid
            rewards.append(score.reward)
        print(f"SFT {steps} steps: node-0 gold on {gold}/{len(tasks)} tasks, valid {valid}/{len(tasks)}, mean reward "
              f"{sum(rewards) / len(rewards):.3f} ({time.monotonic() - start:.0f} s)", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rules", action="store_true", help="score the SFT target with each rule left out (no model)")
    p.add_argument("--sft-steps", default="", help="comma-separated SFT step counts, ascending (e.g. 4,6,8)")
    p.add_argument("--tasks", type=int, default=16, help="held-out trace tasks (one per page)")
    p.add_argument("--out", default=str(WORK_DIR / "bench-warmstart"), help="scratch folder for rows and exports")
    add_flags(p)
    args = p.parse_args()
    cfg = load_config_or_exit(sys.argv[1:], parser=p)
    cfg = cfg.replace(trace_tasks=args.tasks)
    tasks = trace_tasks(cfg)
    reward = RewardKnobs.from_config(cfg)
    if args.rules:
        rules_table(tasks, reward)
    if args.sft_steps:
        node0_table(cfg, tasks, reward, sorted(int(s) for s in args.sft_steps.split(",")), Path(args.out))
    if not (args.rules or args.sft_steps):
        p.error("say --rules, --sft-steps or both")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
