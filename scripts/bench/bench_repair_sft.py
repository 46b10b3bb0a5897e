"""The repair warm-start probe: SFT from the base model on repair rows mixed with the warm-start's zero-shot rows.

    W8_PRESET=study python scripts/bench/bench_repair_sft.py --repair-rows 96       # ~30 min on 2 quiet cores
    W8_PRESET=study python scripts/bench/bench_repair_sft.py --repair-rows 2 --out /tmp/repair-sft   # tiny
    W8_PRESET=study python scripts/repair_eval.py --arm repair_sft=<out>/sft/global_step_<N>/policy

A repair row is a train repair task's refinement prompt, its parent shown with the failures the search shows
(harness.repair_rows.repair_sft_rows), answered with the task's reference. --repair-rows of them are drawn
round-robin over the families (families and tasks in an order seeded by W8_TRAIN_SEED), beside the run's
W8_SFT_COUNT zero-shot rows (the warm-start's own, harness.training_data); one SFT step per row (each seen once,
shuffled with W8_TRAIN_SEED), TRL on CPU with harness/hparams.py's SFT settings. The held-in benchmark
(scripts/repair_eval.py) then measures whether the export adds the rule its shown failures share. Ends with
one line: rows, steps, seconds per step, the export. Writes only under --out (.w8-biayn/bench-repair-sft).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.config import add_flags, load_config_or_exit  # noqa: E402
from harness.files import WORK_DIR, atomic_write_text  # noqa: E402
from harness.hparams import for_config  # noqa: E402
from harness.models import resolve_model  # noqa: E402
from harness.repair import RepairKnobs, make_side  # noqa: E402
from harness.repair_rows import repair_sft_rows  # noqa: E402
from harness.rewards import RewardKnobs  # noqa: E402
from harness.rule_split import Design  # noqa: E402
from harness.training_data import TrainingData, training_data_for  # noqa: E402


def round_robin(tasks: list, n: int, rng: random.Random) -> list:
    """n tasks, one family after another (each family's tasks in a seeded order)."""
    by_family: dict[str, list] = {}
    for t in tasks:
        by_family.setdefault(t.family, []).append(t)
    queues = [rng.sample(group, len(group)) for _, group in sorted(by_family.items())]
    rng.shuffle(queues)
    out: list = []
    while len(out) < n and any(queues):
        for queue in queues:
            if queue and len(out) < n:
                out.append(queue.pop())
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repair-rows", type=int, default=96, help="repair rows beside the zero-shot rows [96]")
    parser.add_argument("--out", default=str(WORK_DIR / "bench-repair-sft"), help="output folder")
    add_flags(parser)
    args = parser.parse_args(argv)
    cfg = load_config_or_exit(argv, parser=parser)
    if args.repair_rows < 1:
        print(f"error: --repair-rows {args.repair_rows}: expected at least 1", file=sys.stderr)
        return 2
    out = Path(args.out)
    rng = random.Random(f"repair-sft:{cfg.train_seed}")
    tasks = round_robin(make_side("train", Design.of(cfg), RepairKnobs.from_config(cfg)), args.repair_rows, rng)
    reward = dataclasses.replace(RewardKnobs.from_config(cfg), sandbox="local")
    zero_shot = training_data_for(cfg, out / "data")
    rows = [json.loads(line) for line in (zero_shot.sft_dir / "train.jsonl").read_text().splitlines() if line]
    rows += repair_sft_rows(tasks, reward)
    rng.shuffle(rows)
    atomic_write_text(out / "rows" / "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    data = TrainingData(zero_shot.train_parquet, zero_shot.eval_parquet, out / "rows", zero_shot.n_train,
                        zero_shot.n_eval)
    print(f"repair warm-start: {len(tasks)} repair rows from {len({t.family for t in tasks})} families + "
          f"{len(rows) - len(tasks)} zero-shot rows, {len(rows)} SFT steps", file=sys.stderr)
    from harness.train_local import train_sft  # TRL: imported only here

    start = time.monotonic()
    result = train_sft(str(resolve_model(cfg.harness_model)), out / "sft", data, len(rows), for_config(cfg),
                       seed=cfg.train_seed, report_to=cfg.report_to, precision=cfg.train_precision)
    wall = time.monotonic() - start
    print(f"repair warm-start: {len(rows)} rows ({len(tasks)} repair), {len(rows)} steps in {wall:.0f}s "
          f"({wall / len(rows):.1f} s/step) -> {result.policy_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
